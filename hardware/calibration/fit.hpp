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
  // A row of the harness's fp8_acc phase (an FP8 product timed with fast accumulation on and,
  // beside it, off; kernel.gemm.split_accumulate says which): kept out of the compute fit, read in
  // pairs by fit_fp8_split_accumulate.
  bool accumulate_pair = false;
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

// FP8 split accumulation (ComputeProfile::fp8_split_accumulate) from the harness's fp8_acc pairs:
// the same product timed with fast accumulation on and off. Fitted to the pairs' ratios (off / on)
// rather than their times, so that the GEMM model's own error on a shape does not enter it; every
// `hold_out_every`-th pair is kept out and its ratio's error reported.
struct AccumulatePair {
  const KernelMeasurement *fast, *split;
  double measured_ratio = 0, predicted_ratio = 0;
  bool held_out = false;
};
struct AccumulateFit {
  double factor = 1.0;  // the fitted fp8_split_accumulate; 1 when there were no pairs
  std::vector<AccumulatePair> pairs;
  FitStats ratio;  // the held-out pairs' ratio error
};
// The pairs of a measurements file, in the order of their fast rows (every `hold_out_every`-th
// marked held out; ratios measured, not predicted).
std::vector<AccumulatePair> accumulate_pairs(const std::vector<KernelMeasurement>& rows, int hold_out_every = 4);
AccumulateFit fit_fp8_split_accumulate(const GpuSpec& gpu, const ComputeProfile& profile,
                                       const std::vector<KernelMeasurement>& rows, int hold_out_every = 4);

// Every `hold_out_every`-th measurement of each kind (by its order) is kept out of the fit and
// used to report the error.
FitReport fit_profile(const GpuSpec& gpu, const std::vector<KernelMeasurement>& rows, const ComputeProfile& start,
                      int hold_out_every = 5);

}  // namespace scaleout
