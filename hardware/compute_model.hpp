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

class ComputeModel {
 public:
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
