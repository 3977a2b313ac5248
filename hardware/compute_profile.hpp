#pragma once
// The efficiency figures the compute model needs, beyond the datasheet: what fraction of peak a
// well-shaped GEMM reaches, how fast memory-bound kernels stream, the fixed cost of a kernel, and
// the host (framework) time to issue one. A profile says where its numbers came from: the
// physics-based default for a GPU, or a calibration on real hardware (hardware/calibration/).
#include <array>
#include <string>
#include <vector>

#include "hardware/dtype.hpp"
#include "hardware/gpu.hpp"
#include "hardware/link_profile.hpp"
#include "sim/engine/time.hpp"

namespace scaleout {

struct GemmTile {
  int m = 128, n = 128;
  double efficiency = 1.0;  // relative to the best tile: small tiles reuse operands less
};

// Every dtype set (a default for per-dtype switches).
constexpr std::array<bool, kDtypeCount> all_dtypes_true() {
  std::array<bool, kDtypeCount> a{};
  for (bool& b : a) b = true;
  return a;
}

struct ComputeProfile {
  std::string name;          // e.g. "h200-calibrated"
  std::string measured_on;   // GPU, driver, date; "datasheet" for the default profile
  std::string source;        // how it was made

  // Fraction of the dense peak a large, tile-aligned GEMM reaches, per dtype.
  std::array<double, kDtypeCount> gemm_efficiency{};
  // Short reduction dimensions pay prologue/epilogue: efficiency scales by k / (k + gemm_k_half).
  double gemm_k_half = 48;
  // Per dtype where calibrated (each dtype's MMA instructions and pipelines differ); 0: gemm_k_half.
  std::array<double, kDtypeCount> gemm_k_half_by_dtype{};
  double k_half(Dtype d) const {
    const double v = gemm_k_half_by_dtype[static_cast<std::size_t>(d)];
    return v > 0 ? v : gemm_k_half;
  }
  std::vector<GemmTile> tiles;
  // A dimension that is not a multiple of 16 bytes of elements (GPT-2's vocabulary of 50257)
  // takes cuBLAS off its vectorised kernels: the GEMM runs at this fraction of its rate.
  double gemm_unaligned_efficiency = 1.0;
  // Per dtype where calibrated (0: the one above). How far off its vectorised path an unaligned
  // GEMM falls depends on how many bytes its loads can still move at once: a row of 4-byte tf32
  // elements stays 4-byte aligned, one of 2-byte bf16 elements only 2-byte.
  std::array<double, kDtypeCount> gemm_unaligned_efficiency_by_dtype{};
  double unaligned_eff(Dtype d) const {
    const double v = gemm_unaligned_efficiency_by_dtype[static_cast<std::size_t>(d)];
    return v > 0 ? v : gemm_unaligned_efficiency;
  }
  // The one tile an unaligned GEMM runs with, where measured (m = 0: chosen among `tiles` like
  // any other): cuBLASLt has no choice of tile shape for these, so their last wave is as empty
  // as that tile leaves it. The harness records the heuristic's wave count; the fit reads the tile
  // off it.
  GemmTile gemm_unaligned_tile{0, 0, 1.0};
  // How strictly tiles run in whole waves: 1 = ceil(tiles / SMs) (classic data-parallel
  // kernels), 0 = fractional (stream-K / persistent kernels that balance the last wave).
  double wave_quantization = 1.0;
  // Bandwidth-bound GEMMs (GEMV-like, skinny) stream their operands at their own rate (they
  // only read, where a copy reads and writes), and not at once: the achieved bandwidth ramps
  // linearly from zero to that rate over gemm_stream_ramp (CTAs starting, the memory pipeline
  // filling), so streaming x = bytes / (HBM bandwidth * gemm_memory_efficiency) takes
  //   x + ramp / 2 once x >= ramp / 2, and sqrt(2 * x * ramp) before:
  // a large GEMV pays half the ramp as start-up, a small product far less. Both are fitted to the
  // bandwidth-bound GEMMs of a calibration; 0 is no ramp (a profile that does not set it).
  double gemm_memory_efficiency = 0.9;
  Time gemm_stream_ramp = Time::zero();
  // Near the ridge point a GEMM's math and its operand streaming do not overlap perfectly (each
  // stalls the other's pipeline): past the fixed cost it takes (tc^p + tm^p)^(1/p) for math time
  // tc and streaming time tm, which is max(tc, tm) far from the ridge and up to 2^(1/p) times it
  // at the ridge. 0: plain max(tc, tm) (a profile that does not set it). Fitted.
  double gemm_overlap_exponent = 0;
  // Whether cuBLAS cuts a GEMM's reduction across idle SMs (split-K) for a dtype; a calibration
  // decides per dtype by which of the two fits its measurements better.
  std::array<bool, kDtypeCount> gemm_split_k = all_dtypes_true();
  // FP8 GEMMs run without fast accumulation (GemmShape::split_accumulate): their math takes this
  // many times as long as with it. Fitted to the harness's fp8_acc pairs (the same product with
  // fast accumulation on and off); 1: not measured.
  double fp8_split_accumulate = 1.0;
  bool split_k(Dtype d) const { return gemm_split_k[static_cast<std::size_t>(d)]; }
  // Achieved fraction of HBM bandwidth for long streams.
  double memory_efficiency = 0.9;
  // The same for multi-tensor (foreach) kernels by element dtype (Kernel::multi_tensor); 0: not
  // measured, memory_efficiency.
  std::array<double, kDtypeCount> multi_tensor_efficiency{};
  // Eager elementwise kernels that are not vectorized (Kernel::Access): an upcast's element-by-
  // element loop, and the generic strided loop by element dtype (its accesses are one element
  // each: 16-bit ones move half the bytes of 32-bit ones), as fractions of HBM bandwidth; 0: not
  // measured, memory_efficiency.
  double unrolled_efficiency = 0;
  std::array<double, kDtypeCount> strided_efficiency{};
  // Fixed GPU-side cost of every kernel (launch, ramp-up, tail).
  Time kernel_latency = Time::from_us(2.5);
  // Row reductions (LayerNorm, RMSNorm, softmax) stream less well and cost more to start.
  double reduction_efficiency = 0.8;
  Time reduction_latency = Time::from_us(4);
  // Flash attention (FlashAttention-2 as PyTorch's SDPA runs it) as a fraction of the bf16 peak,
  // reached for long sequences; shorter ones lose by seq / (seq + attention_seq_half).
  double attention_fwd_efficiency = 0.42;
  double attention_bwd_efficiency = 0.33;
  double attention_seq_half = 256;
  // Host time to issue one kernel from eager PyTorch (Python + dispatcher + launch), in forward,
  // in autograd's backward, and in the optimizer's foreach loops.
  Time host_fwd_kernel = Time::from_us(9);
  Time host_bwd_kernel = Time::from_us(5);
  Time host_opt_kernel = Time::from_us(4);
  // Python work of torch.optim per parameter tensor (state lookups, step counters, list
  // building) before the foreach kernels are issued.
  Time host_opt_tensor = Time::from_us(10);

  // Links between GPUs of this kind, when calibrated (empty: the cluster's own figures).
  LinkProfile links;

  double gemm_eff(Dtype d) const { return gemm_efficiency[static_cast<std::size_t>(d)]; }
};

// The default profile of a GPU: datasheet peaks with the efficiencies measured on an H200 of this
// workplace (788 TFLOP/s of 989 for an 8192^3 bf16 GEMM, 4.3 of 4.8 TB/s for a device copy;
// /work/.library/device/KINDS.md, 2026-10-28), carried over as fractions of peak.
ComputeProfile default_profile(const GpuSpec& gpu);

}  // namespace scaleout
