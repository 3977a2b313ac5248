#pragma once
// Kernel times from shapes. A GEMM is cut into output tiles that run in waves over the SMs:
//   t = waves * (2 * tm * tn * k) / (peak / sms * eff * tile_eff) * (1 + k_half / k) + latency,
// bounded below by its bytes over HBM bandwidth; the tile (and split-K for few tiles) giving the
// least time is taken, as cuBLAS's heuristics try to. Memory-bound kernels take bytes over
// achieved bandwidth plus latency; flash attention its FLOPs over an efficiency of the peak.
#include "hardware/compute_profile.hpp"
#include "hardware/gpu.hpp"
#include "hardware/kernel.hpp"

namespace scaleout {

// How a GEMM runs under the model: its best tile and split, as the calibration fit needs it.
// time = max(work / efficiency * (1 + k_half / k) + split_reduction, memory) for that choice;
// `work` is the waves' FLOPs over the SMs' peak (efficiency 1), `work_over_k` that over k.
struct GemmPlan {
  double time_s = 0;  // without the kernel latency
  double work_s = 0, work_over_k = 0, split_reduction_s = 0;
  bool memory_bound = false;
};

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
  GpuSpec gpu_;
  ComputeProfile profile_;
};

}  // namespace scaleout
