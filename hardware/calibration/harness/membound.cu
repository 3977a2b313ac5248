// Memory-bound phase: hand-written streaming kernels (16-byte accesses,
// grid-stride loops, several loads in flight) at sizes from 64 KiB to 4 GiB.
//
// "bytes" convention: the fewest bytes the operation must move through device
// memory, each input read once and each output written once:
//   copy      read N + write N                    = 2N   (N = size of the buffer)
//   axpy      y = a*x + y (bf16): read x, y; write y = 3N
//   layernorm read x, write y (bf16), plus gamma/beta (fp32) and the per-row
//             mean/rstd (fp32) it writes            = 2N + 8H + 8R
//   rmsnorm   read x, write y, gamma, per-row rstd = 2N + 4H + 4R
//   softmax   read x, write y (bf16)                = 2N   (the kernel reads each
//             row twice; the second read mostly hits L2 and is not counted)
//   adam      fp32 p, g, m, v read; p, m, v written = 7N  (N = size of p)
// gbps = bytes / time / 1e9.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "phases.h"

namespace harness {
namespace {

constexpr int kThreads = 256;

unsigned stream_blocks(size_t work_items, int sms) {
  // Enough resident blocks to fill every SM (8 x 256 threads = 2048 per SM).
  const size_t max_blocks = static_cast<size_t>(sms > 0 ? sms : 132) * 8;
  return static_cast<unsigned>(std::max<size_t>(1, std::min(max_blocks, (work_items + kThreads - 1) / kThreads)));
}

__global__ void copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  // Four independent 16-byte loads in flight before the first store.
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    dst[i] = a;
    dst[i + stride] = b;
    dst[i + 2 * stride] = c;
    dst[i + 3 * stride] = d;
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

__device__ __forceinline__ uint4 axpy8(uint4 xv, uint4 yv, float a) {
  const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&xv);
  __nv_bfloat162* y2 = reinterpret_cast<__nv_bfloat162*>(&yv);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 xf = __bfloat1622float2(x2[j]);
    const float2 yf = __bfloat1622float2(y2[j]);
    y2[j] = __floats2bfloat162_rn(fmaf(a, xf.x, yf.x), fmaf(a, xf.y, yf.y));
  }
  return yv;
}

__global__ void axpy_kernel(const uint4* __restrict__ x, uint4* __restrict__ y, float a, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + stride < n; i += 2 * stride) {
    const uint4 x0 = x[i], x1 = x[i + stride], y0 = y[i], y1 = y[i + stride];
    y[i] = axpy8(x0, y0, a);
    y[i + stride] = axpy8(x1, y1, a);
  }
  for (; i < n; i += stride) y[i] = axpy8(x[i], y[i], a);
}

__global__ void adam_kernel(float4* __restrict__ p, const float4* __restrict__ g, float4* __restrict__ m,
                            float4* __restrict__ v, size_t n, float lr, float b1, float b2, float eps, float wd,
                            float inv_bc1, float inv_bc2) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float4 pp = p[i];
    const float4 gg = g[i];
    float4 mm = m[i];
    float4 vv = v[i];
    float* pf = reinterpret_cast<float*>(&pp);
    const float* gf = reinterpret_cast<const float*>(&gg);
    float* mf = reinterpret_cast<float*>(&mm);
    float* vf = reinterpret_cast<float*>(&vv);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      mf[j] = b1 * mf[j] + (1.f - b1) * gf[j];
      vf[j] = b2 * vf[j] + (1.f - b2) * gf[j] * gf[j];
      const float update = (mf[j] * inv_bc1) / (sqrtf(vf[j] * inv_bc2) + eps) + wd * pf[j];
      pf[j] -= lr * update;
    }
    p[i] = pp;
    m[i] = mm;
    v[i] = vv;
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block; every thread gets the result.
__device__ float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int nw = (blockDim.x + 31) >> 5;
  float t = lane < nw ? scratch[lane] : 0.f;
  return warp_sum(t);
}

constexpr int kNormVpt = 8;  // up to 8 x 16-byte vectors per thread held in registers

// One block per row; the row stays in registers between the statistics and the write.
template <bool kRms>
__global__ void norm_kernel(const uint4* __restrict__ x, uint4* __restrict__ y, const float* __restrict__ gamma,
                            const float* __restrict__ beta, float* __restrict__ mean_out, float* __restrict__ rstd_out,
                            int h8, float eps) {
  __shared__ float scratch[32];
  const size_t row = blockIdx.x;
  const uint4* xr = x + row * h8;
  uint4* yr = y + row * h8;
  float v[kNormVpt][8];
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < kNormVpt; ++j) {
    const int idx = threadIdx.x + j * blockDim.x;
    if (idx < h8) {
      uint4 raw = xr[idx];
      const __nv_bfloat162* b2 = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 f = __bfloat1622float2(b2[q]);
        v[j][2 * q] = f.x;
        v[j][2 * q + 1] = f.y;
        sum += kRms ? f.x * f.x + f.y * f.y : f.x + f.y;
      }
    }
  }
  const float h = 8.f * h8;
  float mean = 0.f, rstd;
  if (kRms) {
    rstd = rsqrtf(block_sum(sum, scratch) / h + eps);
  } else {
    mean = block_sum(sum, scratch) / h;
    float sq = 0.f;
#pragma unroll
    for (int j = 0; j < kNormVpt; ++j) {
      const int idx = threadIdx.x + j * blockDim.x;
      if (idx < h8) {
#pragma unroll
        for (int q = 0; q < 8; ++q) sq += (v[j][q] - mean) * (v[j][q] - mean);
      }
    }
    rstd = rsqrtf(block_sum(sq, scratch) / h + eps);
  }
#pragma unroll
  for (int j = 0; j < kNormVpt; ++j) {
    const int idx = threadIdx.x + j * blockDim.x;
    if (idx < h8) {
      uint4 out;
      __nv_bfloat162* o2 = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int c = idx * 8 + 2 * q;
        float a = (v[j][2 * q] - mean) * rstd * gamma[c];
        float b = (v[j][2 * q + 1] - mean) * rstd * gamma[c + 1];
        if (!kRms) {
          a += beta[c];
          b += beta[c + 1];
        }
        o2[q] = __floats2bfloat162_rn(a, b);
      }
      yr[idx] = out;
    }
  }
  if (threadIdx.x == 0) {
    if (!kRms) mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// Online softmax over one row per block: pass 1 keeps a running (max, sum),
// pass 2 writes exp(x - max) / sum.
__global__ void softmax_kernel(const uint4* __restrict__ x, uint4* __restrict__ y, int l8) {
  __shared__ float s_m[32], s_s[32];
  const size_t row = blockIdx.x;
  const uint4* xr = x + row * l8;
  uint4* yr = y + row * l8;
  float m = -INFINITY, s = 0.f;
  for (int i = threadIdx.x; i < l8; i += blockDim.x) {
    uint4 raw = xr[i];
    const __nv_bfloat162* b2 = reinterpret_cast<const __nv_bfloat162*>(&raw);
    float f[8];
    float lm = m;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float2 t = __bfloat1622float2(b2[q]);
      f[2 * q] = t.x;
      f[2 * q + 1] = t.y;
      lm = fmaxf(lm, fmaxf(t.x, t.y));
    }
    s *= __expf(m - lm);  // m == -inf only before the first chunk, where s == 0
    if (m == -INFINITY) s = 0.f;
#pragma unroll
    for (int q = 0; q < 8; ++q) s += __expf(f[q] - lm);
    m = lm;
  }
  // Combine (m, s) pairs across the warp, then across warps.
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float om = __shfl_xor_sync(0xffffffffu, m, o);
    const float os = __shfl_xor_sync(0xffffffffu, s, o);
    const float nm = fmaxf(m, om);
    s = (m == -INFINITY ? 0.f : s * __expf(m - nm)) + (om == -INFINITY ? 0.f : os * __expf(om - nm));
    m = nm;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = (blockDim.x + 31) >> 5;
  if (lane == 0) {
    s_m[warp] = m;
    s_s[warp] = s;
  }
  __syncthreads();
  if (warp == 0) {
    m = lane < nw ? s_m[lane] : -INFINITY;
    s = lane < nw ? s_s[lane] : 0.f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float om = __shfl_xor_sync(0xffffffffu, m, o);
      const float os = __shfl_xor_sync(0xffffffffu, s, o);
      const float nm = fmaxf(m, om);
      s = (m == -INFINITY ? 0.f : s * __expf(m - nm)) + (om == -INFINITY ? 0.f : os * __expf(om - nm));
      m = nm;
    }
    if (lane == 0) {
      s_m[0] = m;
      s_s[0] = s;
    }
  }
  __syncthreads();
  const float row_max = s_m[0];
  const float inv = 1.f / s_s[0];
  for (int i = threadIdx.x; i < l8; i += blockDim.x) {
    uint4 raw = xr[i];
    const __nv_bfloat162* b2 = reinterpret_cast<const __nv_bfloat162*>(&raw);
    uint4 out;
    __nv_bfloat162* o2 = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float2 t = __bfloat1622float2(b2[q]);
      o2[q] = __floats2bfloat162_rn(__expf(t.x - row_max) * inv, __expf(t.y - row_max) * inv);
    }
    yr[i] = out;
  }
}

enum class Op { Copy, Axpy, LayerNorm, RmsNorm, Softmax, Adam };

const char* op_name(Op op) {
  switch (op) {
    case Op::Copy: return "copy";
    case Op::Axpy: return "axpy";
    case Op::LayerNorm: return "layernorm";
    case Op::RmsNorm: return "rmsnorm";
    case Op::Softmax: return "softmax";
    case Op::Adam: return "adam";
  }
  return "?";
}

struct MemCase {
  Op op;
  size_t size;   // bytes of the primary tensor (x, or p for adam)
  int row = 0;   // hidden size (norms) or row length (softmax)
};

// Per-operand sizes of one buffer set, in order of use by the launcher.
struct MemLayout {
  std::vector<size_t> bytes;  // operand sizes
  size_t set_stride = 0;      // bytes of one set (operands aligned to 256)
  size_t moved = 0;           // the "bytes" convention above
  size_t elements = 0;
  size_t rows = 0;
  int sets = 1;
};

MemLayout layout_of(const MemCase& c, size_t l2) {
  MemLayout l;
  const size_t n = c.size;
  switch (c.op) {
    case Op::Copy:
      l.bytes = {n, n};
      l.moved = 2 * n;
      l.elements = n / 2;
      break;
    case Op::Axpy:
      l.bytes = {n, n};
      l.moved = 3 * n;
      l.elements = n / 2;
      break;
    case Op::LayerNorm:
    case Op::RmsNorm: {
      l.rows = n / (2 * static_cast<size_t>(c.row));
      const size_t xb = l.rows * c.row * 2;
      // x, y, gamma, beta, mean, rstd
      l.bytes = {xb, xb, 4 * (size_t)c.row, 4 * (size_t)c.row, 4 * l.rows, 4 * l.rows};
      l.elements = l.rows * c.row;
      l.moved = c.op == Op::LayerNorm ? 2 * xb + 8 * (size_t)c.row + 8 * l.rows : 2 * xb + 4 * (size_t)c.row + 4 * l.rows;
      break;
    }
    case Op::Softmax: {
      l.rows = n / (2 * static_cast<size_t>(c.row));
      const size_t xb = l.rows * c.row * 2;
      l.bytes = {xb, xb};
      l.elements = l.rows * c.row;
      l.moved = 2 * xb;
      break;
    }
    case Op::Adam:
      l.bytes = {n, n, n, n};  // p, g, m, v
      l.elements = n / 4;
      l.moved = 7 * n;
      break;
  }
  for (size_t b : l.bytes) l.set_stride += align_up(b, 256);
  // Rotate through enough sets to cover 3x L2; a generous cap because small
  // sizes would otherwise be measured out of L2.
  l.sets = rotation_sets(l.moved, l2, 4096);
  return l;
}

std::vector<MemCase> build_plan(bool quick) {
  std::vector<MemCase> plan;
  std::vector<size_t> sizes;
  if (quick)
    sizes = {1ull << 20, 64ull << 20, 1ull << 30};
  else
    for (size_t s = 64ull << 10; s <= (4ull << 30); s *= 4) sizes.push_back(s);
  for (size_t s : sizes) {
    plan.push_back({Op::Copy, s, 0});
    plan.push_back({Op::Axpy, s, 0});
    plan.push_back({Op::LayerNorm, s, 4096});
    plan.push_back({Op::RmsNorm, s, 4096});
    plan.push_back({Op::Softmax, s, 4096});
    plan.push_back({Op::Adam, s, 0});
  }
  if (!quick) {
    const size_t s = 256ull << 20;
    for (int h : {768, 1024, 2048, 5120, 8192, 16384}) {
      plan.push_back({Op::LayerNorm, s, h});
      plan.push_back({Op::RmsNorm, s, h});
    }
    for (int l : {1024, 16384, 32768, 65536, 131072}) plan.push_back({Op::Softmax, s, l});
  }
  return plan;
}

TimingOptions mem_timing(bool quick) {
  TimingOptions o;
  o.warmup = 2;
  o.min_reps = quick ? 5 : 10;
  o.max_reps = quick ? 10 : 30;
  o.target_total_s = quick ? 0.03 : 0.06;
  o.max_measure_s = 0.5;
  // Large batches so that graph replays of small kernels walk over all rotation sets.
  o.target_rep_s = 2e-3;
  o.max_inner = 2048;
  return o;
}

double predict_op_s(const MemCase& c, size_t l2) {
  const MemLayout l = layout_of(c, l2);
  return static_cast<double>(l.moved) / 3.5e12 + 3e-6;
}

}  // namespace

PlanSummary plan_membound(bool quick) {
  PlanSummary s;
  const size_t l2 = 60ull << 20;
  const TimingOptions o = mem_timing(quick);
  for (const auto& c : build_plan(quick)) {
    ++s.entries;
    s.predicted_s += predict_time_op_s(predict_op_s(c, l2), o) + 5e-3;
  }
  s.predicted_s += 1.0;
  return s;
}

void run_membound_phase(PhaseContext& ctx) {
  const std::vector<MemCase> plan = build_plan(ctx.quick);
  const size_t l2 = ctx.dev.l2_bytes;
  size_t arena_bytes = 0;
  for (const auto& c : plan) {
    const MemLayout l = layout_of(c, l2);
    if (l.rows == 0 && (c.op == Op::LayerNorm || c.op == Op::RmsNorm || c.op == Op::Softmax)) continue;
    arena_bytes = std::max(arena_bytes, l.set_stride * l.sets);
  }
  DeviceBuffer arena;
  std::string err = arena.allocate(arena_bytes);
  if (!err.empty()) {
    // A smaller card: retry without the largest sizes.
    arena_bytes /= 4;
    err = arena.allocate(arena_bytes);
  }
  if (!err.empty()) {
    JsonObject e;
    e.str("kind", "membound").str("error", "arena allocation: " + err);
    ctx.emit(e);
    return;
  }
  log_msg("arena %.2f GB, %zu cases", arena_bytes / 1e9, plan.size());
  const TimingOptions opts = mem_timing(ctx.quick);
  char* base = arena.as<char>();

  for (const auto& c : plan) {
    if (ctx.broken) break;
    const MemLayout l = layout_of(c, l2);
    if ((c.op == Op::LayerNorm || c.op == Op::RmsNorm || c.op == Op::Softmax) && l.rows == 0) continue;
    const double op_s = predict_op_s(c, l2);
    if (!ctx.budget.allows(predict_time_op_s(op_s, opts) + 0.02)) {
      ctx.skip();
      continue;
    }
    JsonObject e;
    e.str("kind", "membound").str("op", op_name(c.op)).str("dtype", c.op == Op::Adam ? "fp32" : "bf16");
    e.integer("size_bytes", static_cast<int64_t>(c.size));
    e.integer("bytes", static_cast<int64_t>(l.moved)).integer("elements", static_cast<int64_t>(l.elements));
    if (c.op == Op::LayerNorm || c.op == Op::RmsNorm) e.integer("hidden", c.row).integer("rows", (int64_t)l.rows);
    if (c.op == Op::Softmax) e.integer("row_len", c.row).integer("rows", (int64_t)l.rows);
    e.integer("rotation_sets", l.sets);
    if (l.set_stride * l.sets > arena_bytes) {
      e.null("time_s").str("error", "does not fit in the arena");
      ctx.emit(e);
      continue;
    }
    // Random inputs of the right type over every set used (fp32 in [0,1) for
    // Adam so that v stays non-negative; bf16 in [-1,1) otherwise).
    const size_t used = l.set_stride * l.sets;
    err = c.op == Op::Adam ? fill_random(base, used / 4, DType::FP32, 7, ctx.stream, 0.f, 1.f)
                           : fill_random(base, used / 2, DType::BF16, 7, ctx.stream);
    if (err.empty()) err = cuda_error(cudaStreamSynchronize(ctx.stream), "fill sync");
    if (!err.empty()) {
      e.null("time_s").str("error", "fill: " + err);
      ctx.emit(e);
      continue;
    }
    auto operand = [&](int set, int idx) -> void* {
      size_t off = static_cast<size_t>(set) * l.set_stride;
      for (int i = 0; i < idx; ++i) off += align_up(l.bytes[i], 256);
      return base + off;
    };
    const int sms = ctx.dev.sms;
    LaunchFn fn;
    switch (c.op) {
      case Op::Copy:
        fn = [&, sms](cudaStream_t s, int iter) -> std::string {
          const int set = iter % l.sets;
          const size_t n16 = l.bytes[0] / 16;
          copy_kernel<<<stream_blocks(n16, sms), kThreads, 0, s>>>(static_cast<const uint4*>(operand(set, 0)),
                                                                 static_cast<uint4*>(operand(set, 1)), n16);
          return cuda_error(cudaGetLastError(), "copy_kernel");
        };
        break;
      case Op::Axpy:
        fn = [&, sms](cudaStream_t s, int iter) -> std::string {
          const int set = iter % l.sets;
          const size_t n16 = l.bytes[0] / 16;
          axpy_kernel<<<stream_blocks(n16 / 2, sms), kThreads, 0, s>>>(static_cast<const uint4*>(operand(set, 0)),
                                                                     static_cast<uint4*>(operand(set, 1)), 0.5f, n16);
          return cuda_error(cudaGetLastError(), "axpy_kernel");
        };
        break;
      case Op::Adam:
        fn = [&, sms](cudaStream_t s, int iter) -> std::string {
          const int set = iter % l.sets;
          const size_t n4 = l.bytes[0] / 16;
          adam_kernel<<<stream_blocks(n4, sms), kThreads, 0, s>>>(
              static_cast<float4*>(operand(set, 0)), static_cast<const float4*>(operand(set, 1)),
              static_cast<float4*>(operand(set, 2)), static_cast<float4*>(operand(set, 3)), n4, 1e-4f, 0.9f, 0.95f,
              1e-8f, 0.1f, 1.f / (1.f - 0.9f), 1.f / (1.f - 0.95f));
          return cuda_error(cudaGetLastError(), "adam_kernel");
        };
        break;
      case Op::LayerNorm:
      case Op::RmsNorm: {
        const int h8 = c.row / 8;
        const int threads = std::max(32, std::min(256, (h8 / 4 + 31) / 32 * 32));
        if ((h8 + threads - 1) / threads > kNormVpt) {
          e.null("time_s").str("error", "hidden size too large for the register-resident kernel");
          ctx.emit(e);
          continue;
        }
        const bool rms = c.op == Op::RmsNorm;
        fn = [&, h8, threads, rms](cudaStream_t s, int iter) -> std::string {
          const int set = iter % l.sets;
          const unsigned rows = static_cast<unsigned>(l.rows);
          if (rms)
            norm_kernel<true><<<rows, threads, 0, s>>>(
                static_cast<const uint4*>(operand(set, 0)), static_cast<uint4*>(operand(set, 1)),
                static_cast<const float*>(operand(set, 2)), static_cast<const float*>(operand(set, 3)),
                static_cast<float*>(operand(set, 4)), static_cast<float*>(operand(set, 5)), h8, 1e-5f);
          else
            norm_kernel<false><<<rows, threads, 0, s>>>(
                static_cast<const uint4*>(operand(set, 0)), static_cast<uint4*>(operand(set, 1)),
                static_cast<const float*>(operand(set, 2)), static_cast<const float*>(operand(set, 3)),
                static_cast<float*>(operand(set, 4)), static_cast<float*>(operand(set, 5)), h8, 1e-5f);
          return cuda_error(cudaGetLastError(), "norm_kernel");
        };
        e.integer("threads", threads);
        break;
      }
      case Op::Softmax: {
        const int l8 = c.row / 8;
        const int threads = std::max(32, std::min(512, (l8 / 4 + 31) / 32 * 32));
        fn = [&, l8, threads](cudaStream_t s, int iter) -> std::string {
          const int set = iter % l.sets;
          softmax_kernel<<<static_cast<unsigned>(l.rows), threads, 0, s>>>(static_cast<const uint4*>(operand(set, 0)),
                                                                           static_cast<uint4*>(operand(set, 1)), l8);
          return cuda_error(cudaGetLastError(), "softmax_kernel");
        };
        e.integer("threads", threads);
        break;
      }
    }
    const Timing t = time_op(ctx.stream, fn, opts, ctx.budget);
    add_timing(e, t);
    if (t.ok) e.num("gbps", static_cast<double>(l.moved) / t.median_s / 1e9);
    ctx.emit(e);
    if (t.ok)
      log_msg("%s %zu B (row %d): %.4f ms %.0f GB/s", op_name(c.op), c.size, c.row, t.median_s * 1e3,
           static_cast<double>(l.moved) / t.median_s / 1e9);
    else
      log_msg("%s %zu B: %s", op_name(c.op), c.size, t.error.c_str());
  }
}

}  // namespace harness
