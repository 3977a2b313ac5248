// Attention phase: scaled-dot-product attention forward and backward, bf16,
// causal and not, layout BHSD (Q, K, V, O each [batch, heads, seq, head_dim]
// contiguous), softmax scale 1/sqrt(head_dim), fp32 log-sum-exp statistics.
//
// Two implementations:
//  * "cudnn": cuDNN 9's fused flash attention through the backend C API. The
//    operation graph is the one the cuDNN frontend (not available here) lowers
//    its sdpa() / sdpa_backward() nodes to: matmul, scale, causal mask
//    (gen_index, cmp_ge, binary_select), softmax as max/sub/exp/sum/log/div
//    with the statistics output, matmul; the backward graph recomputes P from
//    the statistics. The runtime library is loaded with dlopen, so a machine
//    without cuDNN still runs everything else.
//  * "own": a simple FlashAttention-2 style kernel pair written here with
//    mma.sync (m16n8k16 bf16, fp32 accumulation), 64x64 tiles, no software
//    pipelining. It is a correct lower bound, not a tuned kernel: use it only
//    where cuDNN failed.
// Both are checked against a naive fp32 reference on a small problem first
// ("attention_check" entries).
//
// FLOP convention: forward 4*b*h*s^2*d (two matmuls), backward 2.5x forward
// (five matmuls); causal counts half of that.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>

#if HARNESS_HAVE_CUDNN
#include <cudnn_graph.h>
#include <dlfcn.h>
#endif

#include "phases.h"

namespace harness {
namespace {

using bf16 = __nv_bfloat16;
constexpr float kLog2e = 1.4426950408889634f;

struct AttnConfig {
  int b, h, s, d;
};

double attn_flops(const AttnConfig& c, bool causal, bool backward) {
  double f = 4.0 * c.b * c.h * static_cast<double>(c.s) * c.s * c.d;
  if (causal) f *= 0.5;
  if (backward) f *= 2.5;
  return f;
}

// ===========================================================================
// Own kernels (mma.sync m16n8k16, bf16 in, fp32 accumulate)
// ===========================================================================
//
// Fragment layouts of mma.m16n8k16 (g = lane / 4, t = lane % 4):
//   A 16x16 row-major: a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]
//   B 16x8  ("col"):   b0 = B[2t..2t+1][g],  b1 = B[2t+8..2t+9][g]
//   C 16x8  fp32:      c0,c1 = C[g][2t..2t+1], c2,c3 = C[g+8][2t..2t+1]
// Two adjacent C tiles (16 columns) re-packed to bf16 are exactly an A fragment:
// that is how P = softmax(S) feeds the second matmul without leaving registers.

constexpr int kTile = 64;  // query and key tile (4 warps x 16 rows)

__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ uint32_t pack_f2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ uint32_t pack_b2(bf16 lo, bf16 hi) {
  __nv_bfloat162 v;
  v.x = lo;
  v.y = hi;
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ uint32_t ld32(const bf16* p) { return *reinterpret_cast<const uint32_t*>(p); }

// Copies rows [row0, row0 + 64) of a [S, D] head into shared memory with a row
// pitch of D + 8 elements (the padding spreads fragment loads over all banks).
template <int D>
__device__ __forceinline__ void load_tile(bf16* dst, const bf16* src, int row0, int S) {
  constexpr int LD = D + 8, CH = D / 8;
  for (int c = threadIdx.x; c < kTile * CH; c += blockDim.x) {
    const int r = c / CH, col = (c % CH) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (row0 + r < S) v = *reinterpret_cast<const uint4*>(src + static_cast<size_t>(row0 + r) * D + col);
    *reinterpret_cast<uint4*>(dst + r * LD + col) = v;
  }
}

template <int D>
constexpr size_t fwd_smem_bytes() {
  return 3ull * kTile * (D + 8) * sizeof(bf16);
}

// Forward: one block per (64-query tile, batch*head), 4 warps of 16 query rows.
template <int D>
__global__ void __launch_bounds__(128) own_fwd_kernel(const bf16* __restrict__ Q, const bf16* __restrict__ K,
                                                      const bf16* __restrict__ V, bf16* __restrict__ O,
                                                      float* __restrict__ LSE, int S, float scale_log2, int causal) {
  constexpr int LD = D + 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* Qs = reinterpret_cast<bf16*>(smem_raw);
  bf16* Ks = Qs + kTile * LD;
  bf16* Vs = Ks + kTile * LD;

  // Causal: the longest rows first, for a better tail.
  const int q_tile = causal ? (gridDim.x - 1 - blockIdx.x) : blockIdx.x;
  const int bh = blockIdx.y;
  const size_t head = static_cast<size_t>(bh) * S * D;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int q0 = q_tile * kTile, rw = warp * 16;

  load_tile<D>(Qs, Q + head, q0, S);
  __syncthreads();
  uint32_t qa[D / 16][4];
#pragma unroll
  for (int kc = 0; kc < D / 16; ++kc) {
    qa[kc][0] = ld32(Qs + (rw + g) * LD + kc * 16 + 2 * tq);
    qa[kc][1] = ld32(Qs + (rw + g + 8) * LD + kc * 16 + 2 * tq);
    qa[kc][2] = ld32(Qs + (rw + g) * LD + kc * 16 + 8 + 2 * tq);
    qa[kc][3] = ld32(Qs + (rw + g + 8) * LD + kc * 16 + 8 + 2 * tq);
  }

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY};
  float l_run[2] = {0.f, 0.f};

  const int n_kv = (S + kTile - 1) / kTile;
  const int n_tiles = causal ? min(n_kv, q_tile + 1) : n_kv;
  for (int j = 0; j < n_tiles; ++j) {
    const int k0 = j * kTile;
    __syncthreads();  // everyone is done with the previous K/V tile
    load_tile<D>(Ks, K + head, k0, S);
    load_tile<D>(Vs, V + head, k0, S);
    __syncthreads();

    float s[kTile / 8][4];
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
      for (int kc = 0; kc < D / 16; ++kc) {
        uint32_t b[2];
        b[0] = ld32(Ks + (nt * 8 + g) * LD + kc * 16 + 2 * tq);
        b[1] = ld32(Ks + (nt * 8 + g) * LD + kc * 16 + 8 + 2 * tq);
        mma_16816(s[nt], qa[kc], b);
      }
    }
    // Scale into the exp2 domain and mask.
    float mx[2] = {m_run[0], m_run[1]};
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = q0 + rw + g + (e >= 2 ? 8 : 0);
        const int col = k0 + nt * 8 + 2 * tq + (e & 1);
        float x = s[nt][e] * scale_log2;
        if (col >= S || (causal && col > row)) x = -INFINITY;
        s[nt][e] = x;
        mx[e >> 1] = fmaxf(mx[e >> 1], x);
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
    }
    float base[2], alpha[2], rsum[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      base[i] = mx[i] == -INFINITY ? 0.f : mx[i];  // a row with nothing unmasked yet
      alpha[i] = exp2f(m_run[i] - base[i]);         // 0 when m_run is -inf
      m_run[i] = mx[i];
    }
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = exp2f(s[nt][e] - base[e >> 1]);
        s[nt][e] = p;
        rsum[e >> 1] += p;
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) l_run[i] = l_run[i] * alpha[i] + rsum[i];
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) {
      o[dn][0] *= alpha[0];
      o[dn][1] *= alpha[0];
      o[dn][2] *= alpha[1];
      o[dn][3] *= alpha[1];
    }
    // O += P V
#pragma unroll
    for (int kc = 0; kc < kTile / 16; ++kc) {
      uint32_t pa[4];
      pa[0] = pack_f2(s[2 * kc][0], s[2 * kc][1]);
      pa[1] = pack_f2(s[2 * kc][2], s[2 * kc][3]);
      pa[2] = pack_f2(s[2 * kc + 1][0], s[2 * kc + 1][1]);
      pa[3] = pack_f2(s[2 * kc + 1][2], s[2 * kc + 1][3]);
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn) {
        const bf16* vp = Vs + (kc * 16 + 2 * tq) * LD + dn * 8 + g;
        uint32_t b[2];
        b[0] = pack_b2(vp[0], vp[LD]);
        b[1] = pack_b2(vp[8 * LD], vp[9 * LD]);
        mma_16816(o[dn], pa, b);
      }
    }
  }
  // The row sums are partial per thread (16 of 64 columns): finish them.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l_run[i] += __shfl_xor_sync(0xffffffffu, l_run[i], 1);
    l_run[i] += __shfl_xor_sync(0xffffffffu, l_run[i], 2);
  }
  const float inv0 = l_run[0] > 0.f ? 1.f / l_run[0] : 0.f;
  const float inv1 = l_run[1] > 0.f ? 1.f / l_run[1] : 0.f;
  const int r0 = q0 + rw + g, r1 = r0 + 8;
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn) {
    const int col = dn * 8 + 2 * tq;
    if (r0 < S) *reinterpret_cast<uint32_t*>(O + head + static_cast<size_t>(r0) * D + col) = pack_f2(o[dn][0] * inv0, o[dn][1] * inv0);
    if (r1 < S) *reinterpret_cast<uint32_t*>(O + head + static_cast<size_t>(r1) * D + col) = pack_f2(o[dn][2] * inv1, o[dn][3] * inv1);
  }
  if (tq == 0) {
    // Natural-log LSE of the scaled scores, as cuDNN's Stats output.
    const float ln2 = 0.6931471805599453f;
    if (r0 < S) LSE[static_cast<size_t>(bh) * S + r0] = (m_run[0] + log2f(l_run[0])) * ln2;
    if (r1 < S) LSE[static_cast<size_t>(bh) * S + r1] = (m_run[1] + log2f(l_run[1])) * ln2;
  }
}

// Backward pre-pass: Dvec[q] = sum_d dO[q][d] * O[q][d] (one warp per row).
template <int D>
__global__ void own_bwd_dot_kernel(const bf16* __restrict__ dO, const bf16* __restrict__ O, float* __restrict__ Dvec,
                                   size_t rows) {
  const size_t row = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  float acc = 0.f;
#pragma unroll
  for (int c = 2 * lane; c < D; c += 64) {
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(dO + row * D + c));
    const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(O + row * D + c));
    acc += a.x * b.x + a.y * b.y;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) Dvec[row] = acc;
}

__global__ void f32_to_bf16_kernel(const float* __restrict__ in, bf16* __restrict__ out, size_t n) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16(in[i]);
}

template <int D>
constexpr size_t bwd_smem_bytes() {
  return 4ull * kTile * (D + 8) * sizeof(bf16) + static_cast<size_t>(kTile) * (kTile + 8) * sizeof(bf16) +
         2ull * kTile * sizeof(float);
}

// Backward: one block per (64-key tile, batch*head), 4 warps of 16 key rows,
// looping over query tiles (FlashAttention-2 order). dK, dV stay in registers;
// dQ partials go to an fp32 buffer with atomics.
template <int D>
__global__ void __launch_bounds__(128, 1)
    own_bwd_kernel(const bf16* __restrict__ Q, const bf16* __restrict__ K, const bf16* __restrict__ V,
                   const bf16* __restrict__ dO, const float* __restrict__ LSE, const float* __restrict__ Dvec,
                   float* __restrict__ dQacc, bf16* __restrict__ dK, bf16* __restrict__ dV, int S, float scale,
                   float scale_log2, int causal) {
  constexpr int LD = D + 8, LDS = kTile + 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* Ks = reinterpret_cast<bf16*>(smem_raw);
  bf16* Vs = Ks + kTile * LD;
  bf16* Qs = Vs + kTile * LD;
  bf16* dOs = Qs + kTile * LD;
  bf16* dSs = dOs + kTile * LD;  // dS^T tile [key][query]
  float* lse_s = reinterpret_cast<float*>(dSs + kTile * LDS);
  float* dvec_s = lse_s + kTile;

  const int kv_tile = blockIdx.x, bh = blockIdx.y;
  const size_t head = static_cast<size_t>(bh) * S * D;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int k0 = kv_tile * kTile, rw = warp * 16;

  load_tile<D>(Ks, K + head, k0, S);
  load_tile<D>(Vs, V + head, k0, S);

  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) {
    dk[i][0] = dk[i][1] = dk[i][2] = dk[i][3] = 0.f;
    dv[i][0] = dv[i][1] = dv[i][2] = dv[i][3] = 0.f;
  }
  const int nq = (S + kTile - 1) / kTile;
  const int first_q = causal ? kv_tile : 0;  // tiles below the diagonal see nothing
  for (int qt = first_q; qt < nq; ++qt) {
    const int q0 = qt * kTile;
    __syncthreads();  // previous tile's Qs, dOs, dSs fully consumed
    load_tile<D>(Qs, Q + head, q0, S);
    load_tile<D>(dOs, dO + head, q0, S);
    if (threadIdx.x < kTile) {
      const int q = q0 + threadIdx.x;
      lse_s[threadIdx.x] = q < S ? LSE[static_cast<size_t>(bh) * S + q] * kLog2e : 0.f;
      dvec_s[threadIdx.x] = q < S ? Dvec[static_cast<size_t>(bh) * S + q] : 0.f;
    }
    __syncthreads();

    // S^T = K Q^T (this warp: 16 keys x 64 queries), then P^T.
    float st[kTile / 8][4];
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt) st[nt][0] = st[nt][1] = st[nt][2] = st[nt][3] = 0.f;
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
      uint32_t a[4];
      a[0] = ld32(Ks + (rw + g) * LD + kc * 16 + 2 * tq);
      a[1] = ld32(Ks + (rw + g + 8) * LD + kc * 16 + 2 * tq);
      a[2] = ld32(Ks + (rw + g) * LD + kc * 16 + 8 + 2 * tq);
      a[3] = ld32(Ks + (rw + g + 8) * LD + kc * 16 + 8 + 2 * tq);
#pragma unroll
      for (int nt = 0; nt < kTile / 8; ++nt) {
        uint32_t b[2];
        b[0] = ld32(Qs + (nt * 8 + g) * LD + kc * 16 + 2 * tq);
        b[1] = ld32(Qs + (nt * 8 + g) * LD + kc * 16 + 8 + 2 * tq);
        mma_16816(st[nt], a, b);
      }
    }
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int kv = k0 + rw + g + (e >= 2 ? 8 : 0);
        const int qi = nt * 8 + 2 * tq + (e & 1);
        const int q = q0 + qi;
        float p = exp2f(st[nt][e] * scale_log2 - lse_s[qi]);
        if (q >= S || kv >= S || (causal && kv > q)) p = 0.f;
        st[nt][e] = p;
      }
    }
    // dV += P^T dO
#pragma unroll
    for (int kc = 0; kc < kTile / 16; ++kc) {
      uint32_t pa[4];
      pa[0] = pack_f2(st[2 * kc][0], st[2 * kc][1]);
      pa[1] = pack_f2(st[2 * kc][2], st[2 * kc][3]);
      pa[2] = pack_f2(st[2 * kc + 1][0], st[2 * kc + 1][1]);
      pa[3] = pack_f2(st[2 * kc + 1][2], st[2 * kc + 1][3]);
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn) {
        const bf16* bp = dOs + (kc * 16 + 2 * tq) * LD + dn * 8 + g;
        uint32_t b[2];
        b[0] = pack_b2(bp[0], bp[LD]);
        b[1] = pack_b2(bp[8 * LD], bp[9 * LD]);
        mma_16816(dv[dn], pa, b);
      }
    }
    // dP^T = V dO^T
    float ds[kTile / 8][4];
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt) ds[nt][0] = ds[nt][1] = ds[nt][2] = ds[nt][3] = 0.f;
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
      uint32_t a[4];
      a[0] = ld32(Vs + (rw + g) * LD + kc * 16 + 2 * tq);
      a[1] = ld32(Vs + (rw + g + 8) * LD + kc * 16 + 2 * tq);
      a[2] = ld32(Vs + (rw + g) * LD + kc * 16 + 8 + 2 * tq);
      a[3] = ld32(Vs + (rw + g + 8) * LD + kc * 16 + 8 + 2 * tq);
#pragma unroll
      for (int nt = 0; nt < kTile / 8; ++nt) {
        uint32_t b[2];
        b[0] = ld32(dOs + (nt * 8 + g) * LD + kc * 16 + 2 * tq);
        b[1] = ld32(dOs + (nt * 8 + g) * LD + kc * 16 + 8 + 2 * tq);
        mma_16816(ds[nt], a, b);
      }
    }
    // dS^T = P^T * (dP^T - Dvec[q])
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) ds[nt][e] = st[nt][e] * (ds[nt][e] - dvec_s[nt * 8 + 2 * tq + (e & 1)]);
    }
    // dK += dS^T Q (scaled at the end)
#pragma unroll
    for (int kc = 0; kc < kTile / 16; ++kc) {
      uint32_t da[4];
      da[0] = pack_f2(ds[2 * kc][0], ds[2 * kc][1]);
      da[1] = pack_f2(ds[2 * kc][2], ds[2 * kc][3]);
      da[2] = pack_f2(ds[2 * kc + 1][0], ds[2 * kc + 1][1]);
      da[3] = pack_f2(ds[2 * kc + 1][2], ds[2 * kc + 1][3]);
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn) {
        const bf16* bp = Qs + (kc * 16 + 2 * tq) * LD + dn * 8 + g;
        uint32_t b[2];
        b[0] = pack_b2(bp[0], bp[LD]);
        b[1] = pack_b2(bp[8 * LD], bp[9 * LD]);
        mma_16816(dk[dn], da, b);
      }
    }
    // dQ needs dS = (dS^T)^T summed over all 64 keys of the block: stage dS^T.
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt) {
      *reinterpret_cast<uint32_t*>(dSs + (rw + g) * LDS + nt * 8 + 2 * tq) = pack_f2(ds[nt][0], ds[nt][1]);
      *reinterpret_cast<uint32_t*>(dSs + (rw + g + 8) * LDS + nt * 8 + 2 * tq) = pack_f2(ds[nt][2], ds[nt][3]);
    }
    __syncthreads();
    // This warp: dQ rows q0 + rw .. q0 + rw + 15 over the block's 64 keys.
    uint32_t qa[kTile / 16][4];
#pragma unroll
    for (int kc = 0; kc < kTile / 16; ++kc) {
      const bf16* p = dSs + (kc * 16 + 2 * tq) * LDS + rw + g;
      qa[kc][0] = pack_b2(p[0], p[LDS]);
      qa[kc][1] = pack_b2(p[8], p[LDS + 8]);
      qa[kc][2] = pack_b2(p[8 * LDS], p[9 * LDS]);
      qa[kc][3] = pack_b2(p[8 * LDS + 8], p[9 * LDS + 8]);
    }
    const int qr0 = q0 + rw + g, qr1 = qr0 + 8;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) {
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int kc = 0; kc < kTile / 16; ++kc) {
        const bf16* kp = Ks + (kc * 16 + 2 * tq) * LD + dn * 8 + g;
        uint32_t b[2];
        b[0] = pack_b2(kp[0], kp[LD]);
        b[1] = pack_b2(kp[8 * LD], kp[9 * LD]);
        mma_16816(acc, qa[kc], b);
      }
      const int col = dn * 8 + 2 * tq;
      if (qr0 < S) {
        atomicAdd(dQacc + head + static_cast<size_t>(qr0) * D + col, acc[0] * scale);
        atomicAdd(dQacc + head + static_cast<size_t>(qr0) * D + col + 1, acc[1] * scale);
      }
      if (qr1 < S) {
        atomicAdd(dQacc + head + static_cast<size_t>(qr1) * D + col, acc[2] * scale);
        atomicAdd(dQacc + head + static_cast<size_t>(qr1) * D + col + 1, acc[3] * scale);
      }
    }
  }
  const int r0 = k0 + rw + g, r1 = r0 + 8;
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn) {
    const int col = dn * 8 + 2 * tq;
    if (r0 < S) {
      *reinterpret_cast<uint32_t*>(dK + head + static_cast<size_t>(r0) * D + col) = pack_f2(dk[dn][0] * scale, dk[dn][1] * scale);
      *reinterpret_cast<uint32_t*>(dV + head + static_cast<size_t>(r0) * D + col) = pack_f2(dv[dn][0], dv[dn][1]);
    }
    if (r1 < S) {
      *reinterpret_cast<uint32_t*>(dK + head + static_cast<size_t>(r1) * D + col) = pack_f2(dk[dn][2] * scale, dk[dn][3] * scale);
      *reinterpret_cast<uint32_t*>(dV + head + static_cast<size_t>(r1) * D + col) = pack_f2(dv[dn][2], dv[dn][3]);
    }
  }
}

// Device tensors of one attention problem.
struct AttnBuffers {
  DeviceBuffer q, k, v, o, dout, dq, dk, dv;  // bf16 [b, h, s, d]
  DeviceBuffer lse, dvec, softmax_sum;        // fp32 [b, h, s]
  DeviceBuffer dq_accum;                      // fp32 [b, h, s, d]
  std::string allocate(const AttnConfig& c, cudaStream_t stream, uint64_t seed) {
    const size_t n = static_cast<size_t>(c.b) * c.h * c.s * c.d;
    const size_t rows = static_cast<size_t>(c.b) * c.h * c.s;
    std::string err;
    for (DeviceBuffer* t : {&q, &k, &v, &o, &dout, &dq, &dk, &dv})
      if (err.empty()) err = t->allocate(n * sizeof(bf16));
    for (DeviceBuffer* t : {&lse, &dvec, &softmax_sum})
      if (err.empty()) err = t->allocate(rows * sizeof(float));
    if (err.empty()) err = dq_accum.allocate(n * sizeof(float));
    if (err.empty()) err = fill_random(q.get(), n, DType::BF16, seed + 1, stream);
    if (err.empty()) err = fill_random(k.get(), n, DType::BF16, seed + 2, stream);
    if (err.empty()) err = fill_random(v.get(), n, DType::BF16, seed + 3, stream);
    if (err.empty()) err = fill_random(dout.get(), n, DType::BF16, seed + 4, stream);
    if (err.empty()) err = cuda_error(cudaMemsetAsync(o.get(), 0, n * sizeof(bf16), stream), "memset O");
    if (err.empty()) err = cuda_error(cudaMemsetAsync(lse.get(), 0, rows * sizeof(float), stream), "memset LSE");
    if (err.empty()) err = cuda_error(cudaStreamSynchronize(stream), "fill sync");
    return err;
  }
};

bool own_supported(const AttnConfig& c) { return (c.d == 64 || c.d == 128); }

template <int D>
std::string own_fwd_launch(const AttnConfig& c, const AttnBuffers& t, bool causal, cudaStream_t s) {
  const size_t smem = fwd_smem_bytes<D>();
  HARNESS_TRY_CUDA(cudaFuncSetAttribute(own_fwd_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  dim3 grid((c.s + kTile - 1) / kTile, c.b * c.h);
  const float scale_log2 = kLog2e / std::sqrt(static_cast<float>(c.d));
  own_fwd_kernel<D><<<grid, 128, smem, s>>>(t.q.as<bf16>(), t.k.as<bf16>(), t.v.as<bf16>(), t.o.as<bf16>(),
                                             t.lse.as<float>(), c.s, scale_log2, causal ? 1 : 0);
  return cuda_error(cudaGetLastError(), "own_fwd_kernel");
}

template <int D>
std::string own_bwd_launch(const AttnConfig& c, const AttnBuffers& t, bool causal, cudaStream_t s) {
  const size_t n = static_cast<size_t>(c.b) * c.h * c.s * c.d;
  const size_t rows = static_cast<size_t>(c.b) * c.h * c.s;
  HARNESS_TRY_CUDA(cudaMemsetAsync(t.dq_accum.get(), 0, n * sizeof(float), s));
  own_bwd_dot_kernel<D><<<static_cast<unsigned>((rows * 32 + 255) / 256), 256, 0, s>>>(t.dout.as<bf16>(), t.o.as<bf16>(),
                                                                                       t.dvec.as<float>(), rows);
  HARNESS_TRY_CUDA(cudaGetLastError());
  const size_t smem = bwd_smem_bytes<D>();
  HARNESS_TRY_CUDA(cudaFuncSetAttribute(own_bwd_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  dim3 grid((c.s + kTile - 1) / kTile, c.b * c.h);
  const float scale = 1.f / std::sqrt(static_cast<float>(c.d));
  own_bwd_kernel<D><<<grid, 128, smem, s>>>(t.q.as<bf16>(), t.k.as<bf16>(), t.v.as<bf16>(), t.dout.as<bf16>(),
                                             t.lse.as<float>(), t.dvec.as<float>(), t.dq_accum.as<float>(),
                                             t.dk.as<bf16>(), t.dv.as<bf16>(), c.s, scale, scale * kLog2e,
                                             causal ? 1 : 0);
  HARNESS_TRY_CUDA(cudaGetLastError());
  f32_to_bf16_kernel<<<1024, 256, 0, s>>>(t.dq_accum.as<float>(), t.dq.as<bf16>(), n);
  return cuda_error(cudaGetLastError(), "own bwd kernels");
}

std::string own_fwd(const AttnConfig& c, const AttnBuffers& t, bool causal, cudaStream_t s) {
  if (c.d == 64) return own_fwd_launch<64>(c, t, causal, s);
  if (c.d == 128) return own_fwd_launch<128>(c, t, causal, s);
  return "own kernel supports head_dim 64 and 128 only";
}

std::string own_bwd(const AttnConfig& c, const AttnBuffers& t, bool causal, cudaStream_t s) {
  if (c.d == 64) return own_bwd_launch<64>(c, t, causal, s);
  if (c.d == 128) return own_bwd_launch<128>(c, t, causal, s);
  return "own kernel supports head_dim 64 and 128 only";
}

// ===========================================================================
// cuDNN backend graph (dlopen'ed)
// ===========================================================================

#if HARNESS_HAVE_CUDNN

#ifndef HARNESS_CUDNN_LIB_HINT
#define HARNESS_CUDNN_LIB_HINT ""
#endif

struct CudnnApi {
  void* lib = nullptr;
  std::string error;
  std::string path;
  size_t (*GetVersion)() = nullptr;
  const char* (*GetErrorString)(cudnnStatus_t) = nullptr;
  void (*GetLastErrorString)(char*, size_t) = nullptr;
  cudnnStatus_t (*Create)(cudnnHandle_t*) = nullptr;
  cudnnStatus_t (*Destroy)(cudnnHandle_t) = nullptr;
  cudnnStatus_t (*SetStream)(cudnnHandle_t, cudaStream_t) = nullptr;
  cudnnStatus_t (*CreateDescriptor)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t*) = nullptr;
  cudnnStatus_t (*DestroyDescriptor)(cudnnBackendDescriptor_t) = nullptr;
  cudnnStatus_t (*Finalize)(cudnnBackendDescriptor_t) = nullptr;
  cudnnStatus_t (*SetAttribute)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,
                                int64_t, const void*) = nullptr;
  cudnnStatus_t (*GetAttribute)(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t,
                                cudnnBackendAttributeType_t, int64_t, int64_t*, void*) = nullptr;
  cudnnStatus_t (*Execute)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t) = nullptr;

  bool ok() const { return lib != nullptr && error.empty(); }

  void load() {
    std::vector<std::string> candidates;
    if (const char* env = getenv("HARNESS_CUDNN_LIB")) candidates.push_back(env);
    if (strlen(HARNESS_CUDNN_LIB_HINT) > 0) candidates.push_back(HARNESS_CUDNN_LIB_HINT);
    candidates.push_back("libcudnn.so.9");
    candidates.push_back("libcudnn.so");
    std::string tried;
    for (const auto& c : candidates) {
      lib = dlopen(c.c_str(), RTLD_NOW | RTLD_GLOBAL);
      if (lib) {
        path = c;
        break;
      }
      const char* e = dlerror();
      tried += c + ": " + (e ? e : "?") + "; ";
    }
    if (!lib) {
      error = "cuDNN not loadable (" + tried + ")";
      return;
    }
    auto sym = [&](const char* name) -> void* {
      void* p = dlsym(lib, name);
      if (!p && error.empty()) error = std::string("cuDNN symbol missing: ") + name;
      return p;
    };
    GetVersion = reinterpret_cast<decltype(GetVersion)>(sym("cudnnGetVersion"));
    GetErrorString = reinterpret_cast<decltype(GetErrorString)>(sym("cudnnGetErrorString"));
    GetLastErrorString = reinterpret_cast<decltype(GetLastErrorString)>(dlsym(lib, "cudnnGetLastErrorString"));
    Create = reinterpret_cast<decltype(Create)>(sym("cudnnCreate"));
    Destroy = reinterpret_cast<decltype(Destroy)>(sym("cudnnDestroy"));
    SetStream = reinterpret_cast<decltype(SetStream)>(sym("cudnnSetStream"));
    CreateDescriptor = reinterpret_cast<decltype(CreateDescriptor)>(sym("cudnnBackendCreateDescriptor"));
    DestroyDescriptor = reinterpret_cast<decltype(DestroyDescriptor)>(sym("cudnnBackendDestroyDescriptor"));
    Finalize = reinterpret_cast<decltype(Finalize)>(sym("cudnnBackendFinalize"));
    SetAttribute = reinterpret_cast<decltype(SetAttribute)>(sym("cudnnBackendSetAttribute"));
    GetAttribute = reinterpret_cast<decltype(GetAttribute)>(sym("cudnnBackendGetAttribute"));
    Execute = reinterpret_cast<decltype(Execute)>(sym("cudnnBackendExecute"));
  }

  std::string status(cudnnStatus_t st) const {
    std::string s = GetErrorString ? GetErrorString(st) : std::to_string(static_cast<int>(st));
    if (GetLastErrorString) {
      char buf[512] = {0};
      GetLastErrorString(buf, sizeof buf);
      if (buf[0]) s += std::string(" [") + buf + "]";
    }
    return s;
  }
};

CudnnApi& cudnn_api() {
  static CudnnApi api;
  static bool loaded = false;
  if (!loaded) {
    loaded = true;
    api.load();
  }
  return api;
}

// Builds a backend operation graph tensor by tensor and op by op, remembers the
// first failure, and owns every descriptor it creates.
class CudnnGraph {
 public:
  CudnnGraph(const CudnnApi& api, cudnnHandle_t handle) : api_(api), handle_(handle) {}
  ~CudnnGraph() {
    for (auto it = owned_.rbegin(); it != owned_.rend(); ++it) api_.DestroyDescriptor(*it);
  }
  CudnnGraph(const CudnnGraph&) = delete;
  CudnnGraph& operator=(const CudnnGraph&) = delete;

  void tensor(int64_t uid, cudnnDataType_t type, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
              bool is_virtual) {
    if (!ok()) return;
    cudnnBackendDescriptor_t t = create(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor");
    const int64_t align = 16;
    const bool virt = is_virtual;
    set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "tensor data type");
    set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, (int64_t)dims.size(), dims.data(), "tensor dims");
    set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, (int64_t)strides.size(), strides.data(), "tensor strides");
    set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor uid");
    set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
    set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, "tensor virtual");
    finalize(t, strprintf("tensor %lld", (long long)uid).c_str());
    tensors_[uid] = t;
  }

  // A by-value scalar (host pointer in the variant pack).
  void scalar(int64_t uid, cudnnDataType_t type) {
    if (!ok()) return;
    cudnnBackendDescriptor_t t = create(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "scalar");
    const int64_t one[4] = {1, 1, 1, 1};
    const int64_t align = 16;
    const bool by_value = true;
    set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "scalar type");
    set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, one, "scalar dims");
    set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, one, "scalar strides");
    set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "scalar uid");
    set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "scalar alignment");
    set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, "scalar by value");
    finalize(t, strprintf("scalar %lld", (long long)uid).c_str());
    tensors_[uid] = t;
  }

  void matmul(int64_t a, int64_t b, int64_t c) {
    if (!ok()) return;
    cudnnBackendDescriptor_t desc = create(CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul desc");
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    set(desc, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, "matmul comp type");
    finalize(desc, "matmul desc");
    cudnnBackendDescriptor_t op = create(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul op");
    set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a, "matmul A");
    set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b, "matmul B");
    set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c, "matmul C");
    set(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &desc, "matmul desc attr");
    finalize(op, strprintf("matmul %lld x %lld -> %lld", (long long)a, (long long)b, (long long)c).c_str());
    ops_.push_back(op);
  }

  // y = mode(x [, b [, t]]); t is the third input (BINARY_SELECT's condition).
  void pointwise(cudnnPointwiseMode_t mode, int64_t x, int64_t y, int64_t b = -1, int64_t t = -1,
                 cudnnDataType_t prec = CUDNN_DATA_FLOAT, int64_t axis = -1) {
    if (!ok()) return;
    cudnnBackendDescriptor_t desc = create(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise desc");
    set(desc, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
    set(desc, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "pointwise precision");
    if (axis >= 0) set(desc, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "pointwise axis");
    finalize(desc, "pointwise desc");
    cudnnBackendDescriptor_t op = create(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise op");
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &desc, "pointwise desc attr");
    set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x, "pointwise x");
    if (b >= 0) set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b, "pointwise b");
    if (t >= 0) set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t, "pointwise t");
    set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y, "pointwise y");
    finalize(op, strprintf("pointwise mode %d -> %lld", (int)mode, (long long)y).c_str());
    ops_.push_back(op);
  }

  void reduction(cudnnReduceTensorOp_t mode, int64_t x, int64_t y) {
    if (!ok()) return;
    cudnnBackendDescriptor_t desc = create(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction desc");
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    set(desc, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode, "reduction operator");
    set(desc, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, "reduction comp type");
    finalize(desc, "reduction desc");
    cudnnBackendDescriptor_t op = create(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction op");
    set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x, "reduction x");
    set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y, "reduction y");
    set(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &desc, "reduction desc attr");
    finalize(op, strprintf("reduction -> %lld", (long long)y).c_str());
    ops_.push_back(op);
  }

  void reshape(int64_t x, int64_t y) {
    if (!ok()) return;
    cudnnBackendDescriptor_t op = create(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "reshape op");
    set_desc(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x, "reshape x");
    set_desc(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y, "reshape y");
    finalize(op, strprintf("reshape %lld -> %lld", (long long)x, (long long)y).c_str());
    ops_.push_back(op);
  }

  // Operation graph -> heuristics (mode A, then fallback) -> first engine
  // configuration whose execution plan finalizes.
  std::string build_plan() {
    if (!ok()) return error_;
    const double t0 = now_s();
    cudnnBackendDescriptor_t graph = create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_, "graph handle");
    set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, (int64_t)ops_.size(), ops_.data(), "graph ops");
    finalize(graph, "operation graph");
    if (!ok()) return error_;
    std::string failures;
    for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      cudnnBackendDescriptor_t heur = nullptr;
      if (api_.CreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur) != CUDNN_STATUS_SUCCESS) continue;
      owned_.push_back(heur);
      cudnnStatus_t st = api_.SetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
      if (st == CUDNN_STATUS_SUCCESS) st = api_.SetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
      if (st == CUDNN_STATUS_SUCCESS) st = api_.Finalize(heur);
      if (st != CUDNN_STATUS_SUCCESS) {
        failures += strprintf("heuristics mode %d: %s; ", (int)mode, api_.status(st).c_str());
        continue;
      }
      int64_t count = 0;
      st = api_.GetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr);
      if (st != CUDNN_STATUS_SUCCESS || count <= 0) {
        failures += strprintf("heuristics mode %d: %lld results (%s); ", (int)mode, (long long)count, api_.status(st).c_str());
        continue;
      }
      std::vector<cudnnBackendDescriptor_t> cfgs(static_cast<size_t>(count), nullptr);
      for (auto& c : cfgs) {
        if (api_.CreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &c) == CUDNN_STATUS_SUCCESS) owned_.push_back(c);
      }
      int64_t returned = 0;
      st = api_.GetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &returned, cfgs.data());
      if (st != CUDNN_STATUS_SUCCESS) {
        failures += strprintf("heuristic results: %s; ", api_.status(st).c_str());
        continue;
      }
      for (int64_t i = 0; i < returned; ++i) {
        ++engines_tried_;
        cudnnBackendDescriptor_t plan = nullptr;
        if (api_.CreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) != CUDNN_STATUS_SUCCESS) continue;
        st = api_.SetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_);
        if (st == CUDNN_STATUS_SUCCESS)
          st = api_.SetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
        if (st == CUDNN_STATUS_SUCCESS) st = api_.Finalize(plan);
        if (st != CUDNN_STATUS_SUCCESS) {
          if (failures.size() < 600) failures += strprintf("plan %lld: %s; ", (long long)i, api_.status(st).c_str());
          api_.DestroyDescriptor(plan);
          continue;
        }
        owned_.push_back(plan);
        plan_ = plan;
        int64_t ws = 0, n = 0;
        if (api_.GetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws) == CUDNN_STATUS_SUCCESS)
          workspace_ = ws;
        char json[1024] = {0};
        int64_t len = 0;
        if (api_.GetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, sizeof json - 1, &len, json) ==
            CUDNN_STATUS_SUCCESS)
          plan_json_.assign(json, strnlen(json, sizeof json - 1));
        build_s_ = now_s() - t0;
        return "";
      }
    }
    build_s_ = now_s() - t0;
    return "no execution plan: " + (failures.empty() ? std::string("heuristics returned nothing") : failures);
  }

  // Binds device (or, for by-value scalars, host) pointers once; execute() reuses them.
  std::string bind(const std::vector<int64_t>& uids, const std::vector<void*>& ptrs, void* workspace) {
    if (!plan_) return "no plan";
    cudnnBackendDescriptor_t pack = create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack");
    set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, (int64_t)uids.size(), uids.data(), "pack uids");
    set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, (int64_t)ptrs.size(), ptrs.data(), "pack pointers");
    set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace, "pack workspace");
    finalize(pack, "variant pack");
    if (!ok()) return error_;
    pack_ = pack;
    return "";
  }

  std::string execute() const {
    cudnnStatus_t st = api_.Execute(handle_, plan_, pack_);
    if (st != CUDNN_STATUS_SUCCESS) return "cudnnBackendExecute: " + api_.status(st);
    return "";
  }

  double build_s() const { return build_s_; }
  int64_t workspace() const { return workspace_; }
  int engines_tried() const { return engines_tried_; }
  const std::string& plan_json() const { return plan_json_; }

 private:
  bool ok() const { return error_.empty(); }

  cudnnBackendDescriptor_t create(cudnnBackendDescriptorType_t type, const char* what) {
    cudnnBackendDescriptor_t d = nullptr;
    if (!ok()) return nullptr;
    cudnnStatus_t st = api_.CreateDescriptor(type, &d);
    if (st != CUDNN_STATUS_SUCCESS) {
      error_ = std::string("create ") + what + ": " + api_.status(st);
      return nullptr;
    }
    owned_.push_back(d);
    return d;
  }
  void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
           const void* value, const char* what) {
    if (!ok()) return;
    cudnnStatus_t st = api_.SetAttribute(d, name, type, count, value);
    if (st != CUDNN_STATUS_SUCCESS) error_ = std::string("set ") + what + ": " + api_.status(st);
  }
  void set_desc(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, int64_t uid, const char* what) {
    if (!ok()) return;
    auto it = tensors_.find(uid);
    if (it == tensors_.end()) {
      error_ = strprintf("%s: unknown tensor uid %lld", what, (long long)uid);
      return;
    }
    set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &it->second, what);
  }
  void finalize(cudnnBackendDescriptor_t d, const char* what) {
    if (!ok()) return;
    cudnnStatus_t st = api_.Finalize(d);
    if (st != CUDNN_STATUS_SUCCESS) error_ = std::string("finalize ") + what + ": " + api_.status(st);
  }

  const CudnnApi& api_;
  cudnnHandle_t handle_;
  std::string error_;
  std::map<int64_t, cudnnBackendDescriptor_t> tensors_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  std::vector<cudnnBackendDescriptor_t> owned_;
  cudnnBackendDescriptor_t plan_ = nullptr;
  cudnnBackendDescriptor_t pack_ = nullptr;
  double build_s_ = 0;
  int64_t workspace_ = 0;
  int engines_tried_ = 0;
  std::string plan_json_;
};

// Unique ids of the non-virtual tensors; virtual ones are numbered from 100.
enum : int64_t {
  kUidQ = 1, kUidK = 2, kUidV = 3, kUidO = 4, kUidStats = 5, kUidScale = 6, kUidNegInf = 7, kUidDO = 8,
  kUidDQ = 9, kUidDK = 10, kUidDV = 11, kUidSoftmaxSum = 12, kUidDQAccum = 13, kUidOne = 14,
};

struct Layouts {
  std::vector<int64_t> qdim, qstr, ktdim, ktstr, sdim, sstr, rdim, rstr;
  explicit Layouts(const AttnConfig& c) {
    const int64_t b = c.b, h = c.h, s = c.s, d = c.d;
    qdim = {b, h, s, d};
    qstr = {h * s * d, s * d, d, 1};
    // K (and V in the backward graph) enter the first matmul transposed: a
    // [b, h, d, s] view of the same memory.
    ktdim = {b, h, d, s};
    ktstr = {h * s * d, s * d, 1, d};
    sdim = {b, h, s, s};
    sstr = {h * s * s, s * s, s, 1};
    rdim = {b, h, s, 1};
    rstr = {h * s, s, 1, 1};
  }
};

// Causal mask on a [b,h,s,s] score tensor: keep where row >= column.
int64_t add_causal_mask(CudnnGraph& g, const Layouts& L, int64_t scores, int64_t& next_uid) {
  g.scalar(kUidNegInf, CUDNN_DATA_FLOAT);
  const int64_t row = next_uid++, col = next_uid++, mask = next_uid++, out = next_uid++;
  g.tensor(row, CUDNN_DATA_INT32, L.sdim, L.sstr, true);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, row, -1, -1, CUDNN_DATA_INT32, 2);
  g.tensor(col, CUDNN_DATA_INT32, L.sdim, L.sstr, true);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, col, -1, -1, CUDNN_DATA_INT32, 3);
  g.tensor(mask, CUDNN_DATA_BOOLEAN, L.sdim, L.sstr, true);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, mask, col, -1, CUDNN_DATA_BOOLEAN);
  g.tensor(out, CUDNN_DATA_FLOAT, L.sdim, L.sstr, true);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, scores, out, kUidNegInf, mask);  // mask ? scores : lowest
  return out;
}

void build_fwd_graph(CudnnGraph& g, const AttnConfig& c, bool causal) {
  const Layouts L(c);
  g.tensor(kUidQ, CUDNN_DATA_BFLOAT16, L.qdim, L.qstr, false);
  g.tensor(kUidK, CUDNN_DATA_BFLOAT16, L.ktdim, L.ktstr, false);
  g.tensor(kUidV, CUDNN_DATA_BFLOAT16, L.qdim, L.qstr, false);
  g.tensor(kUidO, CUDNN_DATA_BFLOAT16, L.qdim, L.qstr, false);
  g.tensor(kUidStats, CUDNN_DATA_FLOAT, L.rdim, L.rstr, false);
  g.scalar(kUidScale, CUDNN_DATA_FLOAT);
  int64_t v = 100;
  const int64_t s_raw = v++, s_scaled = v++;
  g.tensor(s_raw, CUDNN_DATA_FLOAT, L.sdim, L.sstr, true);
  g.matmul(kUidQ, kUidK, s_raw);
  g.tensor(s_scaled, CUDNN_DATA_FLOAT, L.sdim, L.sstr, true);
  g.pointwise(CUDNN_POINTWISE_MUL, s_raw, s_scaled, kUidScale);
  int64_t last = s_scaled;
  if (causal) last = add_causal_mask(g, L, last, v);
  // Softmax with statistics: Stats = max + log(sum(exp(S - max))).
  const int64_t mx = v++, sub = v++, ex = v++, sum = v++, lg = v++, p = v++;
  g.tensor(mx, CUDNN_DATA_FLOAT, L.rdim, L.rstr, true);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, last, mx);
  g.tensor(sub, CUDNN_DATA_FLOAT, L.sdim, L.sstr, true);
  g.pointwise(CUDNN_POINTWISE_SUB, last, sub, mx);
  g.tensor(ex, CUDNN_DATA_FLOAT, L.sdim, L.sstr, true);
  g.pointwise(CUDNN_POINTWISE_EXP, sub, ex);
  g.tensor(sum, CUDNN_DATA_FLOAT, L.rdim, L.rstr, true);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, ex, sum);
  g.tensor(lg, CUDNN_DATA_FLOAT, L.rdim, L.rstr, true);
  g.pointwise(CUDNN_POINTWISE_LOG, sum, lg);
  g.pointwise(CUDNN_POINTWISE_ADD, mx, kUidStats, lg);
  // P enters the second matmul in the I/O type.
  g.tensor(p, CUDNN_DATA_BFLOAT16, L.sdim, L.sstr, true);
  g.pointwise(CUDNN_POINTWISE_DIV, ex, p, sum);
  g.matmul(p, kUidV, kUidO);
}

// Backward graph. variant selects details the frontend has changed between
// releases, tried in turn until one gets an execution plan:
//   bit 0: the K view feeding dQ = dS K is bf16 (else fp32, the frontend default)
//   bit 1: the causal mask comes after subtracting the statistics (else before)
void build_bwd_graph(CudnnGraph& g, const AttnConfig& c, bool causal, int variant) {
  const Layouts L(c);
  const int64_t b = c.b, h = c.h, s = c.s, d = c.d;
  g.tensor(kUidQ, CUDNN_DATA_BFLOAT16, L.qdim, L.qstr, false);
  g.tensor(kUidK, CUDNN_DATA_BFLOAT16, L.ktdim, L.ktstr, false);
  g.tensor(kUidV, CUDNN_DATA_BFLOAT16, L.ktdim, L.ktstr, false);
  g.tensor(kUidO, CUDNN_DATA_BFLOAT16, L.qdim, L.qstr, false);
  g.tensor(kUidDO, CUDNN_DATA_BFLOAT16, L.qdim, L.qstr, false);
  g.tensor(kUidStats, CUDNN_DATA_FLOAT, L.rdim, L.rstr, false);
  g.tensor(kUidDQ, CUDNN_DATA_BFLOAT16, L.qdim, L.qstr, false);
  g.tensor(kUidDK, CUDNN_DATA_BFLOAT16, L.qdim, L.qstr, false);
  g.tensor(kUidDV, CUDNN_DATA_BFLOAT16, L.qdim, L.qstr, false);
  g.tensor(kUidSoftmaxSum, CUDNN_DATA_FLOAT, L.rdim, L.rstr, false);
  g.tensor(kUidDQAccum, CUDNN_DATA_FLOAT, L.qdim, L.qstr, false);
  g.scalar(kUidScale, CUDNN_DATA_FLOAT);
  g.scalar(kUidOne, CUDNN_DATA_FLOAT);
  int64_t v = 100;
  // softmax_sum = rowsum(dO * O)
  const int64_t dodo = v++, red = v++;
  g.tensor(dodo, CUDNN_DATA_FLOAT, L.qdim, {h * s * d, s * d, h * d, 1}, true);
  g.pointwise(CUDNN_POINTWISE_MUL, kUidDO, dodo, kUidO);
  g.tensor(red, CUDNN_DATA_FLOAT, L.rdim, L.rstr, true);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, dodo, red);
  g.pointwise(CUDNN_POINTWISE_MUL, red, kUidSoftmaxSum, kUidOne);
  // P = exp(scale * Q K^T - Stats), masked
  const int64_t s_raw = v++, s_scaled = v++;
  g.tensor(s_raw, CUDNN_DATA_FLOAT, L.sdim, L.sstr, true);
  g.matmul(kUidQ, kUidK, s_raw);
  g.tensor(s_scaled, CUDNN_DATA_FLOAT, L.sdim, L.sstr, true);
  g.pointwise(CUDNN_POINTWISE_MUL, s_raw, s_scaled, kUidScale);
  int64_t last = s_scaled;
  const bool mask_after_stats = (variant & 2) != 0;
  if (causal && !mask_after_stats) last = add_causal_mask(g, L, last, v);
  const int64_t centered = v++;
  g.tensor(centered, CUDNN_DATA_FLOAT, L.sdim, L.sstr, true);
  g.pointwise(CUDNN_POINTWISE_SUB, last, centered, kUidStats);
  last = centered;
  if (causal && mask_after_stats) last = add_causal_mask(g, L, last, v);
  const int64_t p = v++;
  g.tensor(p, CUDNN_DATA_FLOAT, L.sdim, L.sstr, true);
  g.pointwise(CUDNN_POINTWISE_EXP, last, p);
  // dV = P^T dO
  const std::vector<int64_t> tdim = {b, h, s, s}, tstr = {h * s * s, s * s, 1, s};
  const int64_t pt = v++;
  g.tensor(pt, CUDNN_DATA_BFLOAT16, tdim, tstr, true);
  g.reshape(p, pt);
  g.matmul(pt, kUidDO, kUidDV);
  // dS = P * (dO V^T - softmax_sum) * scale
  const int64_t dp = v++, dp_c = v++, ds_u = v++, ds = v++;
  g.tensor(dp, CUDNN_DATA_FLOAT, L.sdim, L.sstr, true);
  g.matmul(kUidDO, kUidV, dp);
  g.tensor(dp_c, CUDNN_DATA_FLOAT, L.sdim, L.sstr, true);
  g.pointwise(CUDNN_POINTWISE_SUB, dp, dp_c, kUidSoftmaxSum);
  g.tensor(ds_u, CUDNN_DATA_FLOAT, L.sdim, L.sstr, true);
  g.pointwise(CUDNN_POINTWISE_MUL, dp_c, ds_u, p);
  g.tensor(ds, CUDNN_DATA_FLOAT, L.sdim, L.sstr, true);
  g.pointwise(CUDNN_POINTWISE_MUL, ds_u, ds, kUidScale);
  // dK = dS^T Q
  const int64_t dst = v++;
  g.tensor(dst, CUDNN_DATA_BFLOAT16, tdim, tstr, true);
  g.reshape(ds, dst);
  g.matmul(dst, kUidQ, kUidDK);
  // dQ = dS K, accumulated in fp32, then converted
  const int64_t kview = v++;
  g.tensor(kview, (variant & 1) ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT, L.qdim, L.qstr, true);
  g.reshape(kUidK, kview);
  g.matmul(ds, kview, kUidDQAccum);
  g.pointwise(CUDNN_POINTWISE_IDENTITY, kUidDQAccum, kUidDQ);
}

// One cuDNN SDPA pass, planned and bound to the buffers.
struct CudnnSdpa {
  std::unique_ptr<CudnnGraph> graph;
  DeviceBuffer workspace;
  float scale = 1.f, neg = std::numeric_limits<float>::lowest(), one = 1.f;
  int variant = 0;
  std::string error;

  bool build(CudnnApi& api, cudnnHandle_t handle, const AttnConfig& c, bool causal, bool backward,
             const AttnBuffers& t) {
    scale = 1.f / std::sqrt(static_cast<float>(c.d));
    std::string errors;
    const int variants = backward ? 4 : 1;
    for (variant = 0; variant < variants; ++variant) {
      if (!causal && (variant & 2)) continue;  // bit 1 only moves the causal mask
      graph.reset(new CudnnGraph(api, handle));
      if (backward)
        build_bwd_graph(*graph, c, causal, variant);
      else
        build_fwd_graph(*graph, c, causal);
      std::string err = graph->build_plan();
      if (err.empty()) break;
      errors += strprintf("variant %d: %s | ", variant, err.c_str());
      if (errors.size() > 1500) errors.resize(1500);
    }
    if (variant == variants) {
      error = errors;
      return false;
    }
    std::string err = workspace.allocate(static_cast<size_t>(std::max<int64_t>(graph->workspace(), 0)));
    if (!err.empty()) {
      error = "workspace: " + err;
      return false;
    }
    std::vector<int64_t> uids;
    std::vector<void*> ptrs;
    auto bind = [&](int64_t uid, void* p) {
      uids.push_back(uid);
      ptrs.push_back(p);
    };
    bind(kUidQ, t.q.get());
    bind(kUidK, t.k.get());
    bind(kUidV, t.v.get());
    bind(kUidO, t.o.get());
    bind(kUidStats, t.lse.get());
    bind(kUidScale, &scale);
    if (causal) bind(kUidNegInf, &neg);
    if (backward) {
      bind(kUidDO, t.dout.get());
      bind(kUidDQ, t.dq.get());
      bind(kUidDK, t.dk.get());
      bind(kUidDV, t.dv.get());
      bind(kUidSoftmaxSum, t.softmax_sum.get());
      bind(kUidDQAccum, t.dq_accum.get());
      bind(kUidOne, &one);
    }
    err = graph->bind(uids, ptrs, workspace.get());
    if (!err.empty()) {
      error = "bind: " + err;
      return false;
    }
    return true;
  }
};

#endif  // HARNESS_HAVE_CUDNN

// ===========================================================================
// Naive fp32 reference (small problems only)
// ===========================================================================

__global__ void ref_fwd_kernel(const bf16* Q, const bf16* K, const bf16* V, float* O, float* LSE, int BH, int S, int D,
                               float scale, int causal) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= BH * S) return;
  const int bh = idx / S, q = idx % S;
  const size_t head = static_cast<size_t>(bh) * S * D;
  const int kend = causal ? q + 1 : S;
  float m = -INFINITY;
  for (int k = 0; k < kend; ++k) {
    float dot = 0.f;
    for (int d = 0; d < D; ++d) dot += __bfloat162float(Q[head + (size_t)q * D + d]) * __bfloat162float(K[head + (size_t)k * D + d]);
    m = fmaxf(m, dot * scale);
  }
  float l = 0.f;
  float acc[128];
  for (int d = 0; d < D; ++d) acc[d] = 0.f;
  for (int k = 0; k < kend; ++k) {
    float dot = 0.f;
    for (int d = 0; d < D; ++d) dot += __bfloat162float(Q[head + (size_t)q * D + d]) * __bfloat162float(K[head + (size_t)k * D + d]);
    const float p = expf(dot * scale - m);
    l += p;
    for (int d = 0; d < D; ++d) acc[d] += p * __bfloat162float(V[head + (size_t)k * D + d]);
  }
  for (int d = 0; d < D; ++d) O[head + (size_t)q * D + d] = acc[d] / l;
  LSE[idx] = m + logf(l);
}

// P[bh][q][k] and dS[bh][q][k] (fp32) from the reference statistics.
__global__ void ref_p_ds_kernel(const bf16* Q, const bf16* K, const bf16* V, const bf16* dO, const float* Oref,
                                const float* LSEref, float* P, float* dS, int BH, int S, int D, float scale, int causal) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<size_t>(BH) * S * S) return;
  const int k = idx % S;
  const int q = (idx / S) % S;
  const int bh = idx / ((size_t)S * S);
  const size_t head = static_cast<size_t>(bh) * S * D;
  float p = 0.f, dp = 0.f, dsum = 0.f;
  if (!(causal && k > q)) {
    float dot = 0.f;
    for (int d = 0; d < D; ++d) dot += __bfloat162float(Q[head + (size_t)q * D + d]) * __bfloat162float(K[head + (size_t)k * D + d]);
    p = expf(dot * scale - LSEref[(size_t)bh * S + q]);
  }
  for (int d = 0; d < D; ++d) {
    const float g = __bfloat162float(dO[head + (size_t)q * D + d]);
    dp += g * __bfloat162float(V[head + (size_t)k * D + d]);
    dsum += g * Oref[head + (size_t)q * D + d];
  }
  P[idx] = p;
  dS[idx] = p * (dp - dsum);
}

// which: 0 = dQ = scale dS K, 1 = dK = scale dS^T Q, 2 = dV = P^T dO
__global__ void ref_grad_kernel(const bf16* Q, const bf16* K, const bf16* dO, const float* P, const float* dS, float* out,
                                int BH, int S, int D, float scale, int which) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<size_t>(BH) * S * D) return;
  const int d = idx % D;
  const int r = (idx / D) % S;
  const int bh = idx / ((size_t)S * D);
  const size_t head = static_cast<size_t>(bh) * S * D;
  const size_t mat = static_cast<size_t>(bh) * S * S;
  float acc = 0.f;
  for (int j = 0; j < S; ++j) {
    if (which == 0) acc += dS[mat + (size_t)r * S + j] * __bfloat162float(K[head + (size_t)j * D + d]);
    if (which == 1) acc += dS[mat + (size_t)j * S + r] * __bfloat162float(Q[head + (size_t)j * D + d]);
    if (which == 2) acc += P[mat + (size_t)j * S + r] * __bfloat162float(dO[head + (size_t)j * D + d]);
  }
  out[idx] = which == 2 ? acc : acc * scale;
}

float bf16_bits_to_float(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

// Relative L2 error of a device bf16 tensor against a device fp32 reference; NaN if non-finite.
std::string rel_err_bf16(const void* got_dev, const void* ref_dev, size_t n, double* out) {
  std::vector<uint16_t> got(n);
  std::vector<float> ref(n);
  HARNESS_TRY_CUDA(cudaMemcpy(got.data(), got_dev, n * 2, cudaMemcpyDeviceToHost));
  HARNESS_TRY_CUDA(cudaMemcpy(ref.data(), ref_dev, n * 4, cudaMemcpyDeviceToHost));
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double g = bf16_bits_to_float(got[i]);
    if (!std::isfinite(g)) {
      *out = NAN;
      return "";
    }
    num += (g - ref[i]) * (g - ref[i]);
    den += static_cast<double>(ref[i]) * ref[i];
  }
  *out = den > 0 ? std::sqrt(num / den) : NAN;
  return "";
}

std::string max_abs_err_f32(const void* got_dev, const void* ref_dev, size_t n, double* out) {
  std::vector<float> got(n), ref(n);
  HARNESS_TRY_CUDA(cudaMemcpy(got.data(), got_dev, n * 4, cudaMemcpyDeviceToHost));
  HARNESS_TRY_CUDA(cudaMemcpy(ref.data(), ref_dev, n * 4, cudaMemcpyDeviceToHost));
  double m = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(got[i])) {
      *out = NAN;
      return "";
    }
    m = std::max(m, std::fabs(static_cast<double>(got[i]) - ref[i]));
  }
  *out = m;
  return "";
}

// ===========================================================================
// Plan and phase
// ===========================================================================

struct AttnCase {
  AttnConfig cfg;
  bool causal;
};

std::vector<AttnConfig> configs(bool quick) {
  if (quick) return {{2, 32, 4096, 128}, {4, 16, 2048, 64}};
  // Priority order (the budget may cut the tail).
  return {
      {2, 32, 4096, 128},   // 7B-class layer, 8k tokens
      {1, 64, 16384, 128},  // long context, 70B-class heads
      {4, 16, 2048, 64},    // 1B-class
      {1, 32, 8192, 128},
      {8, 16, 512, 64},     // short sequences
      {4, 32, 2048, 128},
      {1, 64, 4096, 128},
      {8, 12, 1024, 64},    // GPT-2 small
      {1, 16, 8192, 64},
      {1, 8, 16384, 128},
  };
}

std::vector<AttnCase> build_plan(bool quick) {
  std::vector<AttnCase> plan;
  for (bool causal : {true, false}) {
    if (quick && !causal) continue;
    for (const auto& c : configs(quick)) plan.push_back({c, causal});
  }
  return plan;
}

// Rough H200 rates for the budget: cuDNN fwd ~450, bwd ~300 TFLOP/s; own kernels
// assumed ~4x slower.
double predict_s(const AttnCase& a, bool backward, bool own) {
  const double rate = (backward ? 300e12 : 450e12) / (own ? 4.0 : 1.0);
  return attn_flops(a.cfg, a.causal, backward) / rate + 20e-6;
}

TimingOptions attn_timing(bool quick) {
  TimingOptions o;
  o.warmup = 2;
  o.min_reps = quick ? 3 : 10;
  o.max_reps = quick ? 5 : 20;
  o.target_total_s = quick ? 0.05 : 0.12;
  o.max_measure_s = quick ? 0.3 : 0.6;
  o.target_rep_s = 0.5e-3;
  o.max_inner = 20;
  o.allow_graph = false;  // cuDNN execution under stream capture is not relied on
  return o;
}

constexpr double kPlanBuildGuess_s = 1.0;

// The cuDNN handle of the phase (created lazily, destroyed at the end).
struct CudnnState {
#if HARNESS_HAVE_CUDNN
  cudnnHandle_t handle = nullptr;
#endif
  std::string error;  // why cuDNN cannot be used, if so
};

void init_cudnn(CudnnState& st, cudaStream_t stream) {
#if HARNESS_HAVE_CUDNN
  CudnnApi& api = cudnn_api();
  if (!api.ok()) {
    st.error = api.error;
    return;
  }
  cudnnStatus_t s = api.Create(&st.handle);
  if (s != CUDNN_STATUS_SUCCESS) {
    st.error = "cudnnCreate: " + api.status(s);
    st.handle = nullptr;
    return;
  }
  s = api.SetStream(st.handle, stream);
  if (s != CUDNN_STATUS_SUCCESS) st.error = "cudnnSetStream: " + api.status(s);
  log_msg("cuDNN %zu loaded from %s", api.GetVersion(), api.path.c_str());
#else
  (void)stream;
  st.error = "harness built without cuDNN headers";
#endif
}

void destroy_cudnn(CudnnState& st) {
#if HARNESS_HAVE_CUDNN
  if (st.handle) cudnn_api().Destroy(st.handle);
  st.handle = nullptr;
#else
  (void)st;
#endif
}

JsonObject attn_entry(const AttnCase& a, bool backward, const char* impl) {
  JsonObject e;
  e.str("kind", "attention").str("pass", backward ? "bwd" : "fwd").boolean("causal", a.causal);
  e.integer("batch", a.cfg.b).integer("heads", a.cfg.h).integer("seq", a.cfg.s).integer("head_dim", a.cfg.d);
  e.str("dtype", "bf16").str("impl", impl).str("layout", "bhsd");
  e.num("flops", attn_flops(a.cfg, a.causal, backward));
  return e;
}

void finish_entry(PhaseContext& ctx, JsonObject& e, const AttnCase& a, bool backward, const char* impl, const Timing& t) {
  add_timing(e, t);
  const double flops = attn_flops(a.cfg, a.causal, backward);
  if (t.ok) e.num("tflops", flops / t.median_s / 1e12);
  ctx.emit(e);
  if (t.ok)
    log_msg("%s %s %s b%d h%d s%d d%d: %.4f ms %.1f TFLOP/s", impl, backward ? "bwd" : "fwd", a.causal ? "causal" : "full",
         a.cfg.b, a.cfg.h, a.cfg.s, a.cfg.d, t.median_s * 1e3, flops / t.median_s / 1e12);
  else
    log_msg("%s %s b%d h%d s%d d%d: %s", impl, backward ? "bwd" : "fwd", a.cfg.b, a.cfg.h, a.cfg.s, a.cfg.d,
         t.error.c_str());
}

// Runs one implementation on a small problem and compares with the reference.
void run_check(PhaseContext& ctx, CudnnState& cst, const AttnConfig& c, bool causal, const char* impl) {
  JsonObject e;
  e.str("kind", "attention_check").str("impl", impl).boolean("causal", causal);
  e.integer("batch", c.b).integer("heads", c.h).integer("seq", c.s).integer("head_dim", c.d);
  auto run = [&]() -> std::string {
    AttnBuffers t;
    std::string err = t.allocate(c, ctx.stream, 101);
    if (!err.empty()) return err;
    const size_t n = static_cast<size_t>(c.b) * c.h * c.s * c.d;
    const size_t rows = static_cast<size_t>(c.b) * c.h * c.s;
    const size_t mat = rows * c.s;
    const int BH = c.b * c.h;
    const float scale = 1.f / std::sqrt(static_cast<float>(c.d));
    DeviceBuffer o_ref, lse_ref, p_ref, ds_ref, dq_ref, dk_ref, dv_ref;
    if (err.empty()) err = o_ref.allocate(n * 4);
    if (err.empty()) err = lse_ref.allocate(rows * 4);
    if (err.empty()) err = p_ref.allocate(mat * 4);
    if (err.empty()) err = ds_ref.allocate(mat * 4);
    if (err.empty()) err = dq_ref.allocate(n * 4);
    if (err.empty()) err = dk_ref.allocate(n * 4);
    if (err.empty()) err = dv_ref.allocate(n * 4);
    if (!err.empty()) return err;
    ref_fwd_kernel<<<(unsigned)((rows + 127) / 128), 128, 0, ctx.stream>>>(t.q.as<bf16>(), t.k.as<bf16>(), t.v.as<bf16>(),
                                                                           o_ref.as<float>(), lse_ref.as<float>(), BH, c.s,
                                                                           c.d, scale, causal);
    ref_p_ds_kernel<<<(unsigned)((mat + 255) / 256), 256, 0, ctx.stream>>>(
        t.q.as<bf16>(), t.k.as<bf16>(), t.v.as<bf16>(), t.dout.as<bf16>(), o_ref.as<float>(), lse_ref.as<float>(),
        p_ref.as<float>(), ds_ref.as<float>(), BH, c.s, c.d, scale, causal);
    for (int which = 0; which < 3; ++which) {
      DeviceBuffer* outs[3] = {&dq_ref, &dk_ref, &dv_ref};
      ref_grad_kernel<<<(unsigned)((n + 255) / 256), 256, 0, ctx.stream>>>(t.q.as<bf16>(), t.k.as<bf16>(), t.dout.as<bf16>(),
                                                                           p_ref.as<float>(), ds_ref.as<float>(),
                                                                           outs[which]->as<float>(), BH, c.s, c.d, scale, which);
    }
    HARNESS_TRY_CUDA(cudaGetLastError());
    HARNESS_TRY_CUDA(cudaStreamSynchronize(ctx.stream));

    const bool use_cudnn = strcmp(impl, "cudnn") == 0;
    // Forward, then backward from the implementation's own O and statistics.
#if HARNESS_HAVE_CUDNN
    CudnnSdpa fwd, bwd;
#endif
    if (use_cudnn) {
#if HARNESS_HAVE_CUDNN
      if (!cst.error.empty()) return "cuDNN unavailable: " + cst.error;
      if (!fwd.build(cudnn_api(), cst.handle, c, causal, false, t)) return "fwd plan: " + fwd.error;
      err = fwd.graph->execute();
      if (!err.empty()) return "fwd: " + err;
#else
      return "harness built without cuDNN";
#endif
    } else {
      err = own_fwd(c, t, causal, ctx.stream);
      if (!err.empty()) return "fwd: " + err;
    }
    HARNESS_TRY_CUDA(cudaStreamSynchronize(ctx.stream));
    double o_err = NAN, lse_err = NAN;
    if (!(err = rel_err_bf16(t.o.get(), o_ref.get(), n, &o_err)).empty()) return err;
    if (!(err = max_abs_err_f32(t.lse.get(), lse_ref.get(), rows, &lse_err)).empty()) return err;
    e.num("o_rel_err", o_err).num("lse_max_abs_err", lse_err);

    if (use_cudnn) {
#if HARNESS_HAVE_CUDNN
      if (!bwd.build(cudnn_api(), cst.handle, c, causal, true, t)) {
        e.str("bwd_error", "bwd plan: " + bwd.error);
        e.boolean("ok", std::isfinite(o_err) && o_err < 2e-2 && lse_err < 1e-2);
        return "";
      }
      e.integer("graph_variant", bwd.variant);
      err = bwd.graph->execute();
#endif
    } else {
      err = own_bwd(c, t, causal, ctx.stream);
    }
    if (!err.empty()) return "bwd: " + err;
    HARNESS_TRY_CUDA(cudaStreamSynchronize(ctx.stream));
    double dq_err = NAN, dk_err = NAN, dv_err = NAN;
    if (!(err = rel_err_bf16(t.dq.get(), dq_ref.get(), n, &dq_err)).empty()) return err;
    if (!(err = rel_err_bf16(t.dk.get(), dk_ref.get(), n, &dk_err)).empty()) return err;
    if (!(err = rel_err_bf16(t.dv.get(), dv_ref.get(), n, &dv_err)).empty()) return err;
    e.num("dq_rel_err", dq_err).num("dk_rel_err", dk_err).num("dv_rel_err", dv_err);
    const bool ok = std::isfinite(o_err) && o_err < 2e-2 && lse_err < 1e-2 && std::isfinite(dq_err) && dq_err < 5e-2 &&
                    std::isfinite(dk_err) && dk_err < 5e-2 && std::isfinite(dv_err) && dv_err < 5e-2;
    e.boolean("ok", ok);
    return "";
  };
  std::string err = run();
  if (!err.empty()) e.boolean("ok", false).str("error", err);
  ctx.emit(e);
  log_msg("check %s d%d %s: %s", impl, c.d, causal ? "causal" : "full", err.empty() ? "done" : err.c_str());
}

}  // namespace

long cudnn_runtime_version(std::string* error) {
#if HARNESS_HAVE_CUDNN
  CudnnApi& api = cudnn_api();
  if (!api.ok()) {
    if (error) *error = api.error;
    return 0;
  }
  return static_cast<long>(api.GetVersion());
#else
  if (error) *error = "harness built without cuDNN headers";
  return 0;
#endif
}

PlanSummary plan_attention(bool quick) {
  PlanSummary s;
  const TimingOptions o = attn_timing(quick);
  for (const auto& a : build_plan(quick)) {
    for (bool backward : {false, true}) {
      s.entries += 1;
      s.predicted_s += kPlanBuildGuess_s + predict_time_op_s(predict_s(a, backward, false), o);
    }
  }
  s.entries += 2;  // checks
  s.predicted_s += 2 * (2 * kPlanBuildGuess_s + 0.2) + 2.0;
  return s;
}

PlanSummary plan_attention_own(bool quick) {
  PlanSummary s;
  const TimingOptions o = attn_timing(quick);
  for (const auto& a : build_plan(quick)) {
    for (bool backward : {false, true}) {
      s.entries += 1;
      s.predicted_s += predict_time_op_s(predict_s(a, backward, true), o) + (backward ? predict_s(a, false, true) : 0);
    }
  }
  s.entries += 2;  // checks
  s.predicted_s += 1.0;
  return s;
}

int cudnn_graph_selftest() {
#if HARNESS_HAVE_CUDNN
  // Builds the forward and backward graphs up to the operation graph without a
  // GPU: tensor and operation descriptors are validated by cuDNN on the host,
  // so mistakes in attributes, types or shapes show up here. With no handle the
  // operation graph (or, on a GPU machine, a later step) is where it stops.
  CudnnApi& api = cudnn_api();
  if (!api.ok()) {
    printf("cuDNN not loadable: %s\n", api.error.c_str());
    return 1;
  }
  printf("cuDNN %zu from %s\n", api.GetVersion(), api.path.c_str());
  cudnnHandle_t handle = nullptr;
  const cudnnStatus_t cs = api.Create(&handle);
  printf("cudnnCreate: %s\n", cs == CUDNN_STATUS_SUCCESS ? "ok" : api.status(cs).c_str());
  if (cs != CUDNN_STATUS_SUCCESS) handle = nullptr;
  const AttnConfig c{1, 2, 256, 64};
  for (int pass = 0; pass < 2; ++pass)
    for (bool causal : {false, true})
      for (int variant = 0; variant < (pass ? 4 : 1); ++variant) {
        CudnnGraph g(api, handle);
        if (pass)
          build_bwd_graph(g, c, causal, variant);
        else
          build_fwd_graph(g, c, causal);
        const std::string err = g.build_plan();
        printf("%s %s variant %d: %s\n", pass ? "bwd" : "fwd", causal ? "causal" : "full", variant,
               err.empty() ? "plan ok" : err.c_str());
      }
  if (handle) api.Destroy(handle);
  return 0;
#else
  printf("built without cuDNN headers\n");
  return 1;
#endif
}

// cuDNN: correctness on small problems, then every configuration, forward then
// backward (the backward uses the forward's O and statistics).
void run_attention_phase(PhaseContext& ctx) {
  CudnnState cst;
  init_cudnn(cst, ctx.stream);
  if (!cst.error.empty()) log_msg("cuDNN unavailable: %s", cst.error.c_str());
  run_check(ctx, cst, {1, 2, 256, 128}, true, "cudnn");
  run_check(ctx, cst, {1, 2, 256, 64}, false, "cudnn");

  const TimingOptions opts = attn_timing(ctx.quick);
  for (const auto& a : build_plan(ctx.quick)) {
    if (ctx.broken) break;
    if (!ctx.budget.allows(kPlanBuildGuess_s + predict_time_op_s(predict_s(a, false, false), opts))) {
      ctx.skip();
      ctx.skip();
      continue;
    }
    AttnBuffers t;
    std::string err = t.allocate(a.cfg, ctx.stream, 1000 + a.cfg.s);
    if (!err.empty()) {
      JsonObject e = attn_entry(a, false, "cudnn");
      e.null("time_s").str("error", "allocation: " + err);
      ctx.emit(e);
      continue;
    }
    for (bool backward : {false, true}) {
      if (ctx.broken) break;
      JsonObject e = attn_entry(a, backward, "cudnn");
      if (!ctx.budget.allows(kPlanBuildGuess_s + predict_time_op_s(predict_s(a, backward, false), opts))) {
        ctx.skip();
        continue;
      }
#if HARNESS_HAVE_CUDNN
      if (!cst.error.empty()) {
        e.null("time_s").str("error", "cuDNN unavailable: " + cst.error);
        ctx.emit(e);
        continue;
      }
      CudnnSdpa sdpa;
      if (!sdpa.build(cudnn_api(), cst.handle, a.cfg, a.causal, backward, t)) {
        e.null("time_s").str("error", "plan: " + sdpa.error);
        ctx.emit(e);
        log_msg("cudnn %s: plan failed: %.300s", backward ? "bwd" : "fwd", sdpa.error.c_str());
        continue;
      }
      e.num("plan_build_s", sdpa.graph->build_s()).integer("workspace_bytes", sdpa.graph->workspace());
      e.integer("engines_tried", sdpa.graph->engines_tried());
      if (backward) e.integer("graph_variant", sdpa.variant);
      if (!sdpa.graph->plan_json().empty()) e.str("plan", sdpa.graph->plan_json().substr(0, 300));
      LaunchFn fn = [&](cudaStream_t, int) -> std::string { return sdpa.graph->execute(); };
      const Timing tm = time_op(ctx.stream, fn, opts, ctx.budget);
      finish_entry(ctx, e, a, backward, "cudnn", tm);
#else
      e.null("time_s").str("error", "harness built without cuDNN headers");
      ctx.emit(e);
#endif
    }
  }
  destroy_cudnn(cst);
}

// Own kernels: correctness, then every configuration. A separate phase (and
// process) so that a fault in these kernels cannot cost the cuDNN numbers.
void run_attention_own_phase(PhaseContext& ctx) {
  CudnnState none;
  none.error = "not used";
  run_check(ctx, none, {1, 2, 256, 128}, true, "own");
  run_check(ctx, none, {1, 2, 256, 64}, false, "own");

  const TimingOptions opts = attn_timing(ctx.quick);
  for (const auto& a : build_plan(ctx.quick)) {
    if (ctx.broken) break;
    if (!own_supported(a.cfg)) continue;
    if (!ctx.budget.allows(predict_time_op_s(predict_s(a, false, true), opts) + 0.05)) {
      ctx.skip();
      ctx.skip();
      continue;
    }
    AttnBuffers t;
    std::string err = t.allocate(a.cfg, ctx.stream, 1000 + a.cfg.s);
    if (!err.empty()) {
      JsonObject e = attn_entry(a, false, "own");
      e.null("time_s").str("error", "allocation: " + err);
      ctx.emit(e);
      continue;
    }
    for (bool backward : {false, true}) {
      if (ctx.broken) break;
      const double need = predict_time_op_s(predict_s(a, backward, true), opts) + 0.05;
      if (!ctx.budget.allows(need)) {
        ctx.skip();
        continue;
      }
      JsonObject e = attn_entry(a, backward, "own");
      // The forward leaves O and LSE behind for the backward.
      const AttnConfig cfg = a.cfg;
      const bool causal = a.causal;
      LaunchFn fn = [&, cfg, causal, backward](cudaStream_t s, int) -> std::string {
        return backward ? own_bwd(cfg, t, causal, s) : own_fwd(cfg, t, causal, s);
      };
      const Timing tm = time_op(ctx.stream, fn, opts, ctx.budget);
      finish_entry(ctx, e, a, backward, "own", tm);
    }
  }
}

}  // namespace harness
