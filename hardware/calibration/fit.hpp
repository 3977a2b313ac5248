#pragma once
// Fitting the compute model to kernel measurements (hardware/calibration/harness). The model is
// linear in its unknowns once the tile each GEMM runs with is fixed:
//   GEMM:    t = L + a * W + b * W / k,  W = waves * tile FLOPs / (peak / sms * tile_eff),
//            a = 1 / efficiency, b = k_half / efficiency
//   memory:  t = L + bytes / (bandwidth * efficiency)
//   bandwidth-bound GEMM: t = L + stream_time(bytes / (bandwidth * efficiency), ramp), on a grid
//   flash:   t = L + FLOPs / (peak * efficiency * seq / (seq + seq_half))
// so each is a weighted linear least-squares problem (Eigen), iterated with the tile choice and
// the compute/memory-bound split re-derived from the last fit; split-K is kept or dropped per dtype
// by which fits better. Rows are weighted by 1/t so that
// the fit minimises relative error, as the validation measures it.
#include <string>
#include <vector>

#include "hardware/compute_profile.hpp"
#include "hardware/gpu.hpp"
#include "hardware/kernel.hpp"

namespace scaleout {

struct KernelMeasurement {
  Kernel kernel;
  double seconds = 0;
  // GEMMs, where the harness recorded them: cuBLASLt's wave count for its chosen algorithm
  // (tiles / SMs; algorithm 24 counts split-K's slices as tiles, the Hopper algorithm 66 does not)
  // and whether that algorithm asked for a workspace (split-K among other uses).
  double waves = -1;
  bool workspace = false;
  // A row of shapes kept out of every fit (the harness's novel_gemm phase): checks only.
  bool novel = false;
  // The output tile (in the row-major m x n orientation) and split-K of that algorithm, where the
  // harness could read them from its configuration (0: not recorded).
  int tile_m = 0, tile_n = 0, split_k = 0;
};

struct FitStats {
  std::size_t fitted = 0, held_out = 0;
  double median_rel_error = 0, worst_rel_error = 0;  // on held-out rows
};

struct FitResidual {
  const KernelMeasurement* row;
  double predicted_s;
  bool held_out;
};

struct FitReport {
  ComputeProfile profile;
  std::vector<FitResidual> residuals;  // every row, with the final profile's prediction
  FitStats gemm, memory, attention;
  std::vector<std::string> notes;
};

// Every `hold_out_every`-th measurement of each kind (by its order) is kept out of the fit and
// used to report the error.
FitReport fit_profile(const GpuSpec& gpu, const std::vector<KernelMeasurement>& rows, const ComputeProfile& start,
                      int hold_out_every = 5);

}  // namespace scaleout
