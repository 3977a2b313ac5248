#pragma once
// Kernel times from shapes. A GEMM is cut into output tiles that run in waves over the SMs:
//   t = latency + waves * (2 * tm * tn * k) / (peak / sms * eff * tile_eff) * (1 + k_half / k),
// combined with streaming its bytes, stream(bytes / (HBM bandwidth * gemm_memory_eff)) with the
// bandwidth ramping up linearly over gemm_stream_ramp (stream_time below), as the larger of the two
// or, calibrated, as the imperfect overlap (tc^p + tm^p)^(1/p) of both;
// the tile (and split-K for few tiles, where the dtype has it) giving the least time is taken, as
// cuBLAS's heuristics try to. Memory-bound kernels take bytes over achieved bandwidth plus
// latency; flash attention its FLOPs over an efficiency of the peak.
#include "hardware/compute_profile.hpp"
#include "hardware/gpu.hpp"
#include "hardware/kernel.hpp"

namespace scaleout {

// How a GEMM runs under the model: its best tile and split, as the calibration fit needs it.
// time = latency + overlap(work / efficiency * (1 + k_half / k), stream_time(stream, ramp),
//                          gemm_overlap_exponent) + split_reduction for that choice: split-K's
// partial sums are added after the main loop, not beside it. `work` is the waves' FLOPs over the
// SMs' peak (efficiency 1), `work_over_k` that over k, `stream` the bytes over the streaming
// bandwidth.
struct GemmPlan {
  double time_s = 0;  // the whole kernel, its fixed cost included
  double work_s = 0, work_over_k = 0, split_reduction_s = 0, stream_s = 0;
  bool memory_bound = false;
  double compute_s = 0, streaming_s = 0;  // tc and tm, the two sides that overlap
  int tile_m = 0, tile_n = 0, split = 1;   // the output tile and split-K taken
};

// Time to stream what takes x seconds at full rate when the rate ramps linearly from zero to full
// over `ramp`: x + ramp / 2 once past the ramp (x >= ramp / 2), sqrt(2 x ramp) within it.
double stream_time(double x, double ramp);
// Math time tc and streaming time tm together: (tc^p + tm^p)^(1/p), max(tc, tm) for p = 0.
double overlap(double tc, double tm, double p);

class ComputeModel {
 public:
  GemmPlan gemm_plan(const GemmShape& g, Dtype d) const;
  ComputeModel(GpuSpec gpu, ComputeProfile profile);
  Time time(const Kernel& k) const;
  Time gemm_time(const GemmShape& g, Dtype d) const;
  Time memory_time(double bytes, bool reduction = false) const;
  Time attention_time(const AttentionShape& a, bool backward, Dtype d) const;
  const GpuSpec& gpu() const { return gpu_; }
  const ComputeProfile& profile() const { return profile_; }

 private:
  // `bytes` read and written at `efficiency` of the HBM bandwidth, after a fixed `latency`.
  Time streamed(double bytes, double efficiency, Time latency) const;
  GpuSpec gpu_;
  ComputeProfile profile_;
};

}  // namespace scaleout
