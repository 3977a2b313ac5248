#include "hardware/compute_model.hpp"

#include <algorithm>
#include <cmath>
#include <span>

namespace scaleout {

ComputeProfile default_profile(const GpuSpec& gpu) {
  ComputeProfile p;
  p.name = gpu.name + "-default";
  p.measured_on = "datasheet";
  p.source = "datasheet peaks; GEMM efficiencies as fractions of peak from one H200 measurement (KINDS.md, 2026-10-28); streaming bandwidth from published BabelStream runs (the GPU file's sources)";
  p.gemm_efficiency.fill(0.0);
  auto set = [&](Dtype d, double e) { p.gemm_efficiency[static_cast<std::size_t>(d)] = e; };
  set(Dtype::bf16, 0.80);
  set(Dtype::fp16, 0.80);
  set(Dtype::tf32, 0.75);
  set(Dtype::fp8, 0.70);
  set(Dtype::int8, 0.70);
  set(Dtype::fp32, 0.85);
  set(Dtype::fp64, 0.85);
  set(Dtype::nf4, 0.80);
  p.tiles = {{128, 256, 1.0}, {256, 128, 1.0}, {128, 128, 0.92}, {64, 128, 0.78}, {128, 64, 0.78}, {64, 64, 0.6}};
  // Streaming kernels: the GPU's published BabelStream fraction where the zoo has one, else the
  // middle of those published (A100 80GB 0.83, H100 SXM 0.87, H200 0.86: the gpus' sources); not
  // the 0.9 this profile assumed before, which no measurement reached.
  p.memory_efficiency = gpu.stream_efficiency > 0 ? gpu.stream_efficiency : 0.85;
  return p;
}

ComputeModel::ComputeModel(GpuSpec gpu, ComputeProfile profile) : gpu_(std::move(gpu)), profile_(std::move(profile)) {
  if (profile_.tiles.empty()) profile_.tiles = default_profile(gpu_).tiles;
}

Time ComputeModel::streamed(double bytes, double efficiency, Time latency) const {
  return latency + Time::from_seconds(bytes / (gpu_.hbm_bandwidth.value * efficiency));
}

Time ComputeModel::memory_time(double bytes, bool reduction) const {
  return reduction ? streamed(bytes, profile_.reduction_efficiency, profile_.reduction_latency)
                   : streamed(bytes, profile_.memory_efficiency, profile_.kernel_latency);
}

namespace {
// GPUs without a tensor-core rate for a dtype run it on the next best unit (V100 has no bf16).
double peak_for(const GpuSpec& gpu, Dtype d) {
  if (gpu.supports(d)) return gpu.peak(d).value;
  for (Dtype alt : {Dtype::bf16, Dtype::fp16, Dtype::fp32})
    if (gpu.supports(alt)) return gpu.peak(alt).value;
  return 1e12;
}
}  // namespace

double stream_time(double x, double ramp) {
  return x >= ramp / 2 ? x + ramp / 2 : std::sqrt(2.0 * x * ramp);
}

double overlap(double tc, double tm, double p) {
  if (!(p > 0)) return std::max(tc, tm);
  const double hi = std::max(tc, tm), lo = std::min(tc, tm);
  if (hi <= 0) return 0;
  return hi * std::pow(1.0 + std::pow(lo / hi, p), 1.0 / p);
}

GemmPlan ComputeModel::gemm_plan(const GemmShape& g, Dtype d) const {
  GemmPlan best;
  if (g.m <= 0 || g.n <= 0 || g.k <= 0 || g.batch <= 0) return best;
  Dtype eff_dtype = gpu_.supports(d) ? d : (gpu_.supports(Dtype::fp16) ? Dtype::fp16 : Dtype::fp32);
  const double eff = std::max(1e-3, profile_.gemm_eff(eff_dtype));
  const double elem = dtype_bytes(d);
  const auto align = static_cast<std::int64_t>(std::max(1.0, 16.0 / elem));
  const bool aligned = g.n % align == 0 && (g.a_transposed ? g.m : g.k) % align == 0;
  const double sm_rate = peak_for(gpu_, d) / std::max(1, gpu_.sms) * (aligned ? 1.0 : profile_.unaligned_eff(eff_dtype));
  const double bytes = double(g.batch) * (double(g.m) * double(g.k) + double(g.k) * double(g.n) +
                                          double(g.m) * double(g.n)) * elem;
  const double stream = bytes / (gpu_.hbm_bandwidth.value * profile_.gemm_memory_efficiency);
  const double latency = profile_.kernel_latency.seconds();
  const double t_stream = stream_time(stream, profile_.gemm_stream_ramp.seconds());
  const double p_ov = profile_.gemm_overlap_exponent;
  const double sms = std::max(1, gpu_.sms);
  const double p_wq = profile_.wave_quantization;
  const double accumulate = g.split_accumulate && eff_dtype == Dtype::fp8 ? profile_.fp8_split_accumulate : 1.0;
  best.time_s = 1e300;
  const bool one_tile = !aligned && profile_.gemm_unaligned_tile.m > 0 && profile_.gemm_unaligned_tile.n > 0;
  const std::span<const GemmTile> candidates =
      one_tile ? std::span<const GemmTile>(&profile_.gemm_unaligned_tile, 1) : std::span<const GemmTile>(profile_.tiles);
  for (const GemmTile& tile : candidates) {
    const double tiles = std::ceil(double(g.m) / tile.m) * std::ceil(double(g.n) / tile.n) * double(g.batch);
    // Split-K: when the tiles leave SMs idle, cut the reduction across them (partial sums in fp32).
    const double max_split =
        profile_.split_k(d) ? std::max(1.0, std::min(std::floor(sms / tiles), std::floor(double(g.k) / 256.0))) : 1.0;
    for (double split = 1; split <= max_split; split += 1) {
      const double k = std::ceil(double(g.k) / split);
      const double exact = tiles * split / sms;
      const double waves = std::max(1.0, p_wq * std::ceil(exact) + (1.0 - p_wq) * exact);
      // A product smaller than the tile only pays for the rows and columns it has (padded to the
      // tensor-core fragment of 16): GEMV-like shapes come out bandwidth-bound, as they are.
      const double tm = std::min<double>(tile.m, std::ceil(double(g.m) / 16.0) * 16.0);
      const double tn = std::min<double>(tile.n, std::ceil(double(g.n) / 16.0) * 16.0);
      const double work = waves * 2.0 * tm * tn * k / (sm_rate * tile.efficiency);
      // Split-K's partial sums (fp32) are written by the slices and read back to be added once
      // the main loop has streamed its operands: an epilogue after it, not overlapped with it.
      const double reduction = split > 1 ? double(g.m) * double(g.n) * double(g.batch) * 4.0 * split /
                                               (gpu_.hbm_bandwidth.value * profile_.memory_efficiency)
                                         : 0.0;
      const double tc = work / eff * (1.0 + profile_.k_half(eff_dtype) / k) * accumulate;
      const double t = latency + overlap(tc, t_stream, p_ov) + reduction;
      if (t < best.time_s) best = {t, work, work / k, reduction, stream, t_stream > tc, tc, t_stream, tile.m, tile.n, int(split)};
    }
  }
  return best;
}

Time ComputeModel::gemm_time(const GemmShape& g, Dtype d) const {
  if (g.m <= 0 || g.n <= 0 || g.k <= 0 || g.batch <= 0) return Time::zero();
  return Time::from_seconds(gemm_plan(g, d).time_s);
}

Time ComputeModel::attention_time(const AttentionShape& a, bool backward, Dtype d) const {
  const double peak = peak_for(gpu_, d == Dtype::fp8 ? Dtype::bf16 : d);
  const double seq = double(a.seq);
  const double shape = seq / (seq + profile_.attention_seq_half) * std::min(1.0, double(a.head_dim) / 128.0 + 0.25);
  const double eff = (backward ? profile_.attention_bwd_efficiency : profile_.attention_fwd_efficiency) * shape;
  const double flops = backward ? a.bwd_flops() : a.fwd_flops();
  return profile_.kernel_latency + Time::from_seconds(flops / (peak * std::max(1e-3, eff)));
}

Time ComputeModel::time(const Kernel& k) const {
  switch (k.kind) {
    case KernelKind::gemm: return gemm_time(k.gemm, k.dtype);
    case KernelKind::attention_fwd: return attention_time(k.attn, false, k.dtype);
    case KernelKind::attention_bwd: return attention_time(k.attn, true, k.dtype);
    case KernelKind::memory: {
      const double mt = k.multi_tensor ? profile_.multi_tensor_efficiency[static_cast<std::size_t>(k.dtype)] : 0.0;
      if (mt > 0) return streamed(k.bytes, mt, profile_.kernel_latency);
      const double slow = k.access == Kernel::Access::unrolled  ? profile_.unrolled_efficiency
                          : k.access == Kernel::Access::strided ? profile_.strided_efficiency[static_cast<std::size_t>(k.dtype)]
                                                                : 0.0;
      return slow > 0 && !k.reduction ? streamed(k.bytes, slow, profile_.kernel_latency) : memory_time(k.bytes, k.reduction);
    }
    case KernelKind::collective: return Time::zero();  // timed by the network, not the SMs
  }
  return Time::zero();
}

}  // namespace scaleout
