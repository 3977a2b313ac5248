// GEMM phase: cuBLASLt matrix products over a transformer-shaped grid.
//
// Semantics are row-major: C[m,n] = A[m,k] * B[k,n] ("nn"), or with the second
// operand stored transposed as W[n,k] ("nt", the nn.Linear weight layout; FP8
// needs it). cuBLASLt is column-major, and a row-major X[r,c] is the column-major
// X^T[c,r], so we ask cuBLASLt for C^T[n,m] = B^T[n,k] * A^T[k,m]:
//   cuBLAS M=n, N=m, K=k;  cuBLAS A := our B, cuBLAS B := our A, cuBLAS D := our C.
//   nn: cuBLAS A is column-major n x k (ld n), op N; our A is k x m (ld k), op N.
//   nt: cuBLAS A is column-major k x n (ld k), op T ("TN", required by FP8).
//   D is column-major n x m with ld n, i.e. row-major [m, n].
#include <cublasLt.h>
#include <cublas_api.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>
#include <utility>

#include "lt_ids.h"
#include "phases.h"

namespace harness {
namespace {

constexpr size_t kWorkspaceBytes = 32ull << 20;  // 32 MiB, as frameworks configure it

struct GemmCase {
  DType type;   // input type (output: bf16 for bf16/fp8, fp16 for fp16, fp32 for tf32)
  bool nt;      // second operand stored as [n,k]
  int64_t m, n, k;
  std::string tag;
  // FP8 only: cuBLASLt's fast accumulation (CUBLASLT_MATMUL_DESC_FAST_ACCUM). Off, the tensor
  // cores' partial sums are promoted to fp32 registers as the reduction goes (Transformer Engine's
  // "split accumulator", its default for the dgrad and wgrad GEMMs).
  bool fast_accum = true;
};

const char* gemm_dtype_name(DType t) {
  switch (t) {
    case DType::BF16: return "bf16";
    case DType::FP16: return "fp16";
    case DType::FP32: return "tf32";
    case DType::FP8_E4M3: return "fp8";
  }
  return "?";
}

DType output_type(DType in) {
  switch (in) {
    case DType::FP16: return DType::FP16;
    case DType::FP32: return DType::FP32;
    default: return DType::BF16;  // bf16 -> bf16, fp8 -> bf16 output
  }
}

int64_t swiglu_ffn(int64_t h) {
  int64_t f = 8 * h / 3;
  return (f + 255) / 256 * 256;
}

void add_layer(std::vector<GemmCase>& v, DType t, bool nt, int64_t h, int64_t tok) {
  v.push_back({t, nt, tok, 3 * h, h, "qkv"});
  v.push_back({t, nt, tok, h, h, "attn_out"});
  v.push_back({t, nt, tok, 4 * h, h, "mlp_up"});
  v.push_back({t, nt, tok, h, 4 * h, "mlp_down"});
  v.push_back({t, nt, tok, 2 * swiglu_ffn(h), h, "swiglu_up"});
}

// The plan, in priority order: if the budget runs short the tail is skipped.
// Skinny (decode-like, bandwidth-bound) products: 1 to 128 rows against five weight shapes.
void add_skinny(std::vector<GemmCase>& out, DType t, bool nt) {
  for (int64_t m : {1, 8, 64, 128})
    for (auto [n, k] : {std::pair<int64_t, int64_t>{4096, 4096}, {12288, 4096}, {4096, 16384}, {8192, 8192}, {128256, 4096}})
      out.push_back({t, nt, m, n, k, "skinny"});
}

std::vector<GemmCase> build_plan(bool quick) {
  std::vector<GemmCase> bf16, others;
  const DType B = DType::BF16;
  const std::vector<int64_t> hs = {768, 1024, 2048, 2560, 4096, 5120, 8192};
  const std::vector<int64_t> ts = {512, 2048, 4096, 8192, 16384};
  const std::vector<int64_t> squares = {256, 512, 1024, 2048, 4096, 8192, 16384};
  if (quick) {
    for (int64_t s : {1024, 4096, 8192}) bf16.push_back({B, false, s, s, s, "square"});
    add_layer(bf16, B, false, 4096, 4096);
    bf16.push_back({B, false, 1, 4096, 4096, "skinny"});
    bf16.push_back({B, false, 1000, 3000, 777, "odd"});
    bf16.push_back({B, true, 4096, 4096, 4096, "square"});
    for (DType t : {DType::FP8_E4M3, DType::FP16, DType::FP32}) {
      const bool nt = t == DType::FP8_E4M3;
      others.push_back({t, nt, 4096, 4096, 4096, "square"});
      others.push_back({t, nt, 8192, 8192, 8192, "square"});
      others.push_back({t, nt, 4096, 3 * 4096, 4096, "qkv"});
    }
  } else {
    // bf16 on the full grid.
    for (int64_t s : squares) bf16.push_back({B, false, s, s, s, "square"});
    for (int64_t h : hs)
      for (int64_t t : ts) add_layer(bf16, B, false, h, t);
    // LM heads (GPT-2 vocabulary and Llama-3 vocabulary).
    for (int64_t t : {4096, 16384}) {
      for (int64_t h : {768, 2048, 4096}) bf16.push_back({B, false, t, 50257, h, "lm_head"});
      for (int64_t h : {4096, 8192}) bf16.push_back({B, false, t, 128256, h, "lm_head"});
    }
    // Backward-shaped products. dgrad of a layer (t, n, h) is (t, h, n); most are
    // already in the forward grid (mlp_down is mlp_up's dgrad and vice versa), the
    // QKV one is not. wgrad is (in, out, t): k = tokens.
    for (int64_t h : {1024, 4096, 8192}) {
      for (int64_t t : {4096, 16384}) {
        bf16.push_back({B, false, t, h, 3 * h, "dgrad_qkv"});
        bf16.push_back({B, false, h, 3 * h, t, "wgrad_qkv"});
        bf16.push_back({B, false, h, h, t, "wgrad_attn_out"});
        bf16.push_back({B, false, h, 4 * h, t, "wgrad_mlp_up"});
        bf16.push_back({B, false, 4 * h, h, t, "wgrad_mlp_down"});
      }
    }
    // Skinny (decode-like) products.
    add_skinny(bf16, B, false);
    // Sizes that are not multiples of 8 or 64 (padding / slow-path behaviour).
    const int64_t odd[][3] = {{1000, 3000, 777}, {777, 1000, 3000}, {2047, 2047, 2047}, {4095, 4097, 4093},
                              {8191, 8193, 1023}, {1023, 50257, 1025}, {3001, 3001, 3001}, {127, 4099, 4096}};
    for (const auto& o : odd) bf16.push_back({B, false, o[0], o[1], o[2], "odd"});
    // Layout comparison: the same products with the weight stored [n,k].
    for (int64_t s : {1024, 4096, 16384}) bf16.push_back({B, true, s, s, s, "square"});
    add_layer(bf16, B, true, 4096, 8192);

    // fp8 / fp16 / tf32 on a subset of ~40 shapes.
    for (DType t : {DType::FP8_E4M3, DType::FP16, DType::FP32}) {
      const bool nt = t == DType::FP8_E4M3;  // cuBLASLt FP8 on Hopper supports only "TN"
      for (int64_t s : {1024, 2048, 4096, 8192, 16384}) others.push_back({t, nt, s, s, s, "square"});
      for (int64_t h : {2048, 4096, 8192})
        for (int64_t tok : {4096, 16384}) add_layer(others, t, nt, h, tok);
      // The skinny grid of bf16: cuBLASLt runs different kernel families for these per dtype
      // (GEMV-like for a row or a few, tiled tensor-core kernels from 64 rows).
      add_skinny(others, t, nt);
      others.push_back({t, nt, 4096, 16384, 16384, "wgrad_mlp_up"});
      others.push_back({t, nt, 4096, 50257, 4096, "lm_head"});
      others.push_back({t, nt, 1000, 3000, 777, "odd"});
    }
  }
  // Drop exact duplicates (a wgrad shape can coincide with a forward one).
  std::vector<GemmCase> plan;
  std::set<std::tuple<int, bool, int64_t, int64_t, int64_t>> seen;
  for (auto* list : {&bf16, &others})
    for (const auto& c : *list)
      if (seen.insert({static_cast<int>(c.type), c.nt, c.m, c.n, c.k}).second) plan.push_back(c);
  return plan;
}

// Products whose kernel cuBLASLt picks from several close candidates: few output tiles over a
// long reduction, where split-K, the tile and the number of SMs used decide the time. Each is
// timed with every algorithm of the heuristic's list (up to kVariants) and with the first one
// re-cut into other split-K counts, so that the model's choice can be told from the library's.
constexpr int kVariants = 8;
std::vector<GemmCase> build_variant_plan(bool quick) {
  std::vector<GemmCase> v;
  if (quick) {
    v.push_back({DType::BF16, false, 128, 4096, 16384, "variants"});
    return v;
  }
  for (DType t : {DType::BF16, DType::FP8_E4M3})
    for (int64_t m : {64, 128, 256})
      for (auto [n, k] : {std::pair<int64_t, int64_t>{4096, 4096}, {4096, 16384}, {8192, 8192}, {1024, 8192}})
        v.push_back({t, t == DType::FP8_E4M3, m, n, k, "variants"});
  return v;
}
constexpr int kSplitSweep[] = {1, 2, 3, 4, 6, 8, 12, 16};

// Shapes of none of the grids above, to check a profile on products it was never fitted near:
// the layers of models with grouped-query attention and the feed-forward sizes they ship
// (Llama-3-8B/70B, Qwen2-7B, GPT-NeoX-20B, Mixtral's experts), whole and cut by tensor
// parallelism, at token counts the grid does not use, with their weight and input gradients,
// fp8 forward products, and decode-like products of 32, 96 and 200 rows.
std::vector<GemmCase> build_novel_plan(bool quick) {
  struct Model {
    const char* name;
    int64_t h, qkv, ffn, tp;
  };
  const Model models[] = {{"llama3-8b", 4096, 6144, 14336, 1},   {"llama3-70b-tp8", 8192, 10240, 28672, 8},
                          {"qwen2-7b", 3584, 4608, 18944, 1},    {"gpt-neox-20b-tp2", 6144, 18432, 24576, 2},
                          {"llama3-70b-tp4", 8192, 10240, 28672, 4}, {"mixtral-expert", 4096, 6144, 14336, 1}};
  std::vector<GemmCase> v;
  const DType B = DType::BF16;
  for (const Model& md : models) {
    const std::string tag = std::string("novel:") + md.name;
    const bool expert = std::string(md.name) == "mixtral-expert";
    for (int64_t t : expert ? std::vector<int64_t>{1536, 5120} : std::vector<int64_t>{3072, 12288}) {
      if (!expert) {
        v.push_back({B, false, t, md.qkv / md.tp, md.h, tag + ":qkv"});
        v.push_back({B, false, t, md.h, md.h / md.tp, tag + ":attn_out"});
      }
      v.push_back({B, false, t, 2 * md.ffn / md.tp, md.h, tag + ":gate_up"});
      v.push_back({B, false, t, md.h, md.ffn / md.tp, tag + ":down"});
      v.push_back({B, false, md.h, 2 * md.ffn / md.tp, t, tag + ":wgrad_gate_up"});
      v.push_back({B, false, t, md.ffn / md.tp, md.h, tag + ":dgrad_down"});
      if (quick) return v;
    }
  }
  // fp8 forward products (Transformer Engine's recipe: weights stored [n,k]).
  for (const Model& md : models)
    if (md.tp <= 2 && std::string(md.name) != "mixtral-expert")
      for (int64_t t : {3072, 12288}) {
        const std::string tag = std::string("novel:") + md.name;
        v.push_back({DType::FP8_E4M3, true, t, md.qkv / md.tp, md.h, tag + ":qkv"});
        v.push_back({DType::FP8_E4M3, true, t, 2 * md.ffn / md.tp, md.h, tag + ":gate_up"});
        v.push_back({DType::FP8_E4M3, true, t, md.h, md.ffn / md.tp, tag + ":down"});
      }
  // Decode-like products against Llama-3-8B's weights, bf16 and fp8, and fp16 for a few.
  for (int64_t m : {32, 96, 200})
    for (auto [n, k] : {std::pair<int64_t, int64_t>{6144, 4096}, {28672, 4096}, {4096, 14336}}) {
      v.push_back({B, false, m, n, k, "novel:decode"});
      v.push_back({DType::FP8_E4M3, true, m, n, k, "novel:decode"});
      if (m == 96) v.push_back({DType::FP16, false, m, n, k, "novel:decode"});
    }
  // Two models can share a product (70B cut by 8 up-projects what 70B cut by 4 back-projects):
  // each once.
  std::vector<GemmCase> plan;
  std::set<std::tuple<int, bool, int64_t, int64_t, int64_t>> seen;
  for (const auto& c : v)
    if (seen.insert({static_cast<int>(c.type), c.nt, c.m, c.n, c.k}).second) plan.push_back(c);
  return plan;
}

// FP8 products with and without fast accumulation, in pairs: the forward, input-gradient and
// weight-gradient products of the layers of FP8 runs that Transformer Engine trains (Megatron's
// column- and row-parallel qkv, attention output, gate/up and down projections, cut by tensor
// parallelism, at a micro-batch's tokens: a 8192 sequence cut by context parallelism 2, GPT-3's
// 2048), and three squares. Transformer Engine runs the forward products with fast accumulation
// and the two gradients' without (module/base.py: _2X_ACC_FPROP False, _2X_ACC_DGRAD and
// _2X_ACC_WGRAD True); the pairs measure what that costs. Rows: kind "gemm_fp8acc".
std::vector<GemmCase> build_fp8acc_plan(bool quick) {
  struct Model {
    const char* name;
    int64_t h, qkv, ffn_in, ffn_out, tp, tokens;  // ffn_in: the up projection's width (gate and up)
  };
  const Model models[] = {{"llama3.1-8b", 4096, 6144, 2 * 14336, 14336, 1, 4096},
                          {"llama3.1-70b-tp4", 8192, 10240, 2 * 28672, 28672, 4, 4096},
                          {"llama3.1-405b-tp8", 16384, 18432, 2 * 53248, 53248, 8, 4096},
                          {"gpt3-175b-tp4", 12288, 3 * 12288, 4 * 12288, 4 * 12288, 4, 2048},
                          {"nemotron4-15b-tp4", 6144, 6144 + 2 * 1024, 24576, 24576, 4, 4096}};
  std::vector<GemmCase> base;
  const DType F = DType::FP8_E4M3;
  for (const Model& md : models) {
    const std::string tag = std::string("fp8acc:") + md.name;
    const int64_t t = md.tokens;
    // (in, out) of each linear on this rank
    const std::pair<int64_t, int64_t> linears[] = {
        {md.h, md.qkv / md.tp}, {md.h / md.tp, md.h}, {md.h, md.ffn_in / md.tp}, {md.ffn_out / md.tp, md.h}};
    for (auto [in, out] : linears) {
      base.push_back({F, true, t, out, in, tag + ":fprop"});
      base.push_back({F, true, t, in, out, tag + ":dgrad"});
      base.push_back({F, true, out, in, t, tag + ":wgrad"});
    }
    if (quick) break;
  }
  for (int64_t s : {2048, 4096, 8192}) base.push_back({F, true, s, s, s, "fp8acc:square"});
  std::vector<GemmCase> plan;
  std::set<std::tuple<int64_t, int64_t, int64_t>> seen;
  for (const auto& c : base)
    if (seen.insert({c.m, c.n, c.k}).second)
      for (bool fast : {true, false}) {
        GemmCase x = c;
        x.fast_accum = fast;
        plan.push_back(x);
      }
  return plan;
}

// Rough H200 rates, for budget checks and --list only.
double predict_op_s(const GemmCase& c) {
  double rate = 700e12;
  if (c.type == DType::FP8_E4M3) rate = 1200e12;
  if (c.type == DType::FP32) rate = 350e12;
  const double flops = 2.0 * c.m * c.n * c.k;
  const double bytes = (double)dtype_size(c.type) * (c.m * c.k + c.k * c.n) + (double)dtype_size(output_type(c.type)) * c.m * c.n;
  return std::max(flops / rate, bytes / 3.5e12) + 5e-6;
}

TimingOptions gemm_timing(bool quick) {
  TimingOptions o;
  o.warmup = 2;
  o.min_reps = quick ? 5 : 10;
  o.max_reps = quick ? 10 : 30;
  o.target_total_s = quick ? 0.03 : 0.08;
  o.max_measure_s = quick ? 0.3 : 0.6;
  o.target_rep_s = 0.5e-3;
  o.max_inner = 256;  // a captured batch walks through up to 256 rotation sets
  return o;
}

#define LT_TRY(expr)                                                                         \
  do {                                                                                       \
    cublasStatus_t lt_s_ = (expr);                                                           \
    if (lt_s_ != CUBLAS_STATUS_SUCCESS) return std::string(#expr) + ": " + cublasGetStatusName(lt_s_); \
  } while (0)

struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulHeuristicResult_t heur{};
  ~LtDescs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::BF16: return CUDA_R_16BF;
    case DType::FP16: return CUDA_R_16F;
    case DType::FP32: return CUDA_R_32F;
    case DType::FP8_E4M3: return CUDA_R_8F_E4M3;
  }
  return CUDA_R_32F;
}

// Builds the descriptors of one case and asks the heuristic for the best algorithm.
std::string setup_case(cublasLtHandle_t lt, const GemmCase& c, const float* d_one, LtDescs& d) {
  const cudaDataType_t in_t = cuda_type(c.type);
  const cudaDataType_t out_t = cuda_type(output_type(c.type));
  const cublasComputeType_t comp = c.type == DType::FP32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  LT_TRY(cublasLtMatmulDescCreate(&d.op, comp, CUDA_R_32F));
  const cublasOperation_t ta = c.nt ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = CUBLAS_OP_N;
  LT_TRY(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  LT_TRY(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  if (c.type == DType::FP8_E4M3) {
    // Per-tensor scales are mandatory pointers for FP8 inputs (value 1.0 here).
    LT_TRY(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &d_one, sizeof d_one));
    LT_TRY(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &d_one, sizeof d_one));
    // Fast accumulation: what Transformer Engine uses for the forward GEMMs (the fp8_acc phase
    // also times them without it).
    const int8_t fast = c.fast_accum ? 1 : 0;
    LT_TRY(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
  }
  const uint64_t m = c.m, n = c.n, k = c.k;
  if (c.nt)
    LT_TRY(cublasLtMatrixLayoutCreate(&d.a, in_t, k, n, static_cast<int64_t>(k)));
  else
    LT_TRY(cublasLtMatrixLayoutCreate(&d.a, in_t, n, k, static_cast<int64_t>(n)));
  LT_TRY(cublasLtMatrixLayoutCreate(&d.b, in_t, k, m, static_cast<int64_t>(k)));
  LT_TRY(cublasLtMatrixLayoutCreate(&d.c, out_t, n, m, static_cast<int64_t>(n)));
  LT_TRY(cublasLtMatrixLayoutCreate(&d.d, out_t, n, m, static_cast<int64_t>(n)));
  LT_TRY(cublasLtMatmulPreferenceCreate(&d.pref));
  const uint64_t ws = kWorkspaceBytes;
  LT_TRY(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  int returned = 0;
  LT_TRY(cublasLtMatmulAlgoGetHeuristic(lt, d.op, d.a, d.b, d.c, d.d, d.pref, 1, &d.heur, &returned));
  if (returned == 0) return "cublasLtMatmulAlgoGetHeuristic: no algorithm for this case";
  if (d.heur.state != CUBLAS_STATUS_SUCCESS) return std::string("heuristic state: ") + cublasGetStatusName(d.heur.state);
  return "";
}

// The configuration of an algorithm, in our orientation: cuBLAS's tile M runs along our n and its
// N along our m (the mapping at the top), so tile_m x tile_n is the output block of one CTA as
// the simulator's GEMM model counts it. Attributes the library does not report are left out.
void add_algo_config(JsonObject& e, const cublasLtMatmulAlgo_t& algo) {
  auto get = [&](cublasLtMatmulAlgoConfigAttributes_t attr, auto& value) {
    size_t written = 0;
    return cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value, sizeof value, &written) == CUBLAS_STATUS_SUCCESS;
  };
  int32_t id = -1;
  if (get(CUBLASLT_ALGO_CONFIG_ID, id)) e.integer("algo_id", id);
  uint32_t tile = 0;
  if (get(CUBLASLT_ALGO_CONFIG_TILE_ID, tile)) {
    e.integer("tile_id", tile);
    for (const LtTileShape& t : kLtTiles)
      if (t.id == tile) e.integer("tile_m", t.n).integer("tile_n", t.m);
  }
  int32_t split = 0;
  if (get(CUBLASLT_ALGO_CONFIG_SPLITK_NUM, split)) e.integer("split_k", split);
  uint32_t u = 0;
  if (get(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, u)) e.integer("reduction_scheme", u);
  if (get(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, u)) e.integer("cta_swizzling", u);
  if (get(CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, u)) e.integer("custom_option", u);
  if (get(CUBLASLT_ALGO_CONFIG_STAGES_ID, u)) e.integer("stages_id", u);
  uint16_t h = 0;
  if (get(CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, h)) e.integer("inner_shape_id", h);
  if (get(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, h)) {
    e.integer("cluster_shape_id", h);
    for (const LtClusterShape& c : kLtClusters)
      if (c.id == h) e.str("cluster_lt", std::to_string(c.x) + "x" + std::to_string(c.y) + "x" + std::to_string(c.z));
  }
}

struct Arenas {
  DeviceBuffer a, b, c, workspace, one;
};

struct CaseLayout {
  size_t a_bytes, b_bytes, c_bytes, a_stride, b_stride, c_stride;
  int sets;
};

CaseLayout layout_of(const GemmCase& c, size_t l2_bytes) {
  CaseLayout l{};
  l.a_bytes = dtype_size(c.type) * c.m * c.k;
  l.b_bytes = dtype_size(c.type) * c.k * c.n;
  l.c_bytes = dtype_size(output_type(c.type)) * c.m * c.n;
  l.a_stride = align_up(l.a_bytes, 256);
  l.b_stride = align_up(l.b_bytes, 256);
  l.c_stride = align_up(l.c_bytes, 256);
  l.sets = rotation_sets(l.a_bytes + l.b_bytes + l.c_bytes, l2_bytes, 256);
  return l;
}

// ---- correctness check against a naive fp32 product ------------------------

template <typename T> __device__ __forceinline__ float to_f(T v) { return static_cast<float>(v); }
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ float to_f<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_f<__nv_fp8_e4m3>(__nv_fp8_e4m3 v) { return static_cast<float>(v); }

template <typename T>
__global__ void ref_gemm_kernel(const T* A, const T* Bm, bool nt, int m, int n, int k, float* C) {
  const int i = blockIdx.y * blockDim.y + threadIdx.y;
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= m || j >= n) return;
  float acc = 0.f;
  for (int p = 0; p < k; ++p) {
    const float b = nt ? to_f(Bm[(size_t)j * k + p]) : to_f(Bm[(size_t)p * n + j]);
    acc += to_f(A[(size_t)i * k + p]) * b;
  }
  C[(size_t)i * n + j] = acc;
}

template <typename T>
__global__ void to_float_kernel(const T* in, float* out, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) out[i] = to_f(in[i]);
}

std::string launch_ref(DType t, const void* A, const void* B, bool nt, int m, int n, int k, float* C, cudaStream_t s) {
  dim3 block(16, 16), grid((n + 15) / 16, (m + 15) / 16);
  switch (t) {
    case DType::BF16: ref_gemm_kernel<<<grid, block, 0, s>>>((const __nv_bfloat16*)A, (const __nv_bfloat16*)B, nt, m, n, k, C); break;
    case DType::FP16: ref_gemm_kernel<<<grid, block, 0, s>>>((const __half*)A, (const __half*)B, nt, m, n, k, C); break;
    case DType::FP32: ref_gemm_kernel<<<grid, block, 0, s>>>((const float*)A, (const float*)B, nt, m, n, k, C); break;
    case DType::FP8_E4M3: ref_gemm_kernel<<<grid, block, 0, s>>>((const __nv_fp8_e4m3*)A, (const __nv_fp8_e4m3*)B, nt, m, n, k, C); break;
  }
  return cuda_error(cudaGetLastError(), "ref_gemm_kernel");
}

std::string output_to_float(DType out, const void* D, float* F, size_t n, cudaStream_t s) {
  switch (out) {
    case DType::BF16: to_float_kernel<<<256, 256, 0, s>>>((const __nv_bfloat16*)D, F, n); break;
    case DType::FP16: to_float_kernel<<<256, 256, 0, s>>>((const __half*)D, F, n); break;
    case DType::FP32: to_float_kernel<<<256, 256, 0, s>>>((const float*)D, F, n); break;
    default: return "unsupported output type";
  }
  return cuda_error(cudaGetLastError(), "to_float_kernel");
}

// Runs one small product through cuBLASLt with the same mapping as the timed
// runs and compares it with the naive kernel: catches a wrong operand mapping
// that would otherwise produce plausible timings of a different product.
void check_case(PhaseContext& ctx, cublasLtHandle_t lt, const float* d_one, void* ws, DType type, bool nt) {
  const GemmCase c{type, nt, 384, 256, 512, "check"};
  JsonObject e;
  e.str("kind", "gemm_check").str("dtype", gemm_dtype_name(type)).str("layout", nt ? "nt" : "nn");
  e.integer("m", c.m).integer("n", c.n).integer("k", c.k);
  auto run = [&]() -> std::string {
    DeviceBuffer A, B, D, R, F;
    const size_t es = dtype_size(type), os = dtype_size(output_type(type));
    std::string err;
    if (!(err = A.allocate(es * c.m * c.k)).empty()) return err;
    if (!(err = B.allocate(es * c.k * c.n)).empty()) return err;
    if (!(err = D.allocate(os * c.m * c.n)).empty()) return err;
    if (!(err = R.allocate(4 * c.m * c.n)).empty()) return err;
    if (!(err = F.allocate(4 * c.m * c.n)).empty()) return err;
    if (!(err = fill_random(A.get(), c.m * c.k, type, 11, ctx.stream)).empty()) return err;
    if (!(err = fill_random(B.get(), c.k * c.n, type, 12, ctx.stream)).empty()) return err;
    LtDescs d;
    if (!(err = setup_case(lt, c, d_one, d)).empty()) return err;
    const float alpha = 1.f, beta = 0.f;
    LT_TRY(cublasLtMatmul(lt, d.op, &alpha, B.get(), d.a, A.get(), d.b, &beta, D.get(), d.c, D.get(), d.d, &d.heur.algo, ws,
                          kWorkspaceBytes, ctx.stream));
    if (!(err = launch_ref(type, A.get(), B.get(), nt, c.m, c.n, c.k, R.as<float>(), ctx.stream)).empty()) return err;
    if (!(err = output_to_float(output_type(type), D.get(), F.as<float>(), c.m * c.n, ctx.stream)).empty()) return err;
    std::vector<float> got(c.m * c.n), ref(c.m * c.n);
    HARNESS_TRY_CUDA(cudaMemcpyAsync(got.data(), F.get(), 4 * got.size(), cudaMemcpyDeviceToHost, ctx.stream));
    HARNESS_TRY_CUDA(cudaMemcpyAsync(ref.data(), R.get(), 4 * ref.size(), cudaMemcpyDeviceToHost, ctx.stream));
    HARNESS_TRY_CUDA(cudaStreamSynchronize(ctx.stream));
    double num = 0, den = 0;
    bool finite = true;
    for (size_t i = 0; i < got.size(); ++i) {
      if (!std::isfinite(got[i])) finite = false;
      num += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
      den += double(ref[i]) * ref[i];
    }
    const double rel = den > 0 ? std::sqrt(num / den) : INFINITY;
    e.num("rel_err", finite ? rel : NAN);
    e.boolean("ok", finite && rel < 2e-2);
    return "";
  };
  std::string err = run();
  if (!err.empty()) e.boolean("ok", false).str("error", err);
  ctx.emit(e);
  log_msg("check %s %s: %s", gemm_dtype_name(type), nt ? "nt" : "nn", err.empty() ? "done" : err.c_str());
}

}  // namespace

namespace {
// Entries and predicted seconds of a plan and its variant shapes (each of those timed with up
// to kVariants algorithms and the split sweep).
PlanSummary summarize(const std::vector<GemmCase>& plan, const std::vector<GemmCase>& variants, bool quick) {
  PlanSummary s;
  const TimingOptions o = gemm_timing(quick);
  for (const auto& c : plan) {
    ++s.entries;
    s.predicted_s += predict_time_op_s(predict_op_s(c), o) + 2e-3;
  }
  for (const auto& c : variants) {
    s.entries += kVariants + static_cast<int>(std::size(kSplitSweep)) - 1;
    s.predicted_s += (kVariants + std::size(kSplitSweep)) * (predict_time_op_s(predict_op_s(c), o) + 2e-3);
  }
  s.entries += 5;  // correctness checks
  s.predicted_s += 2.0;  // handle creation, arena allocation and fills
  return s;
}
}  // namespace

PlanSummary plan_gemm(bool quick) { return summarize(build_plan(quick), build_variant_plan(quick), quick); }
PlanSummary plan_gemm_novel(bool quick) { return summarize(build_novel_plan(quick), {}, quick); }
PlanSummary plan_fp8acc(bool quick) { return summarize(build_fp8acc_plan(quick), {}, quick); }

namespace {
void run_gemm_cases(PhaseContext& ctx, const char* kind, const std::vector<GemmCase>& plan,
                    const std::vector<GemmCase>& variants);
}  // namespace

void run_gemm_phase(PhaseContext& ctx) {
  run_gemm_cases(ctx, "gemm", build_plan(ctx.quick), build_variant_plan(ctx.quick));
}
// Its rows are kind "gemm_novel": scaleout calibrate check reads them, the fit never does.
void run_gemm_novel_phase(PhaseContext& ctx) { run_gemm_cases(ctx, "gemm_novel", build_novel_plan(ctx.quick), {}); }
// Its rows are kind "gemm_fp8acc": scaleout calibrate fit reads their pairs (fast accumulation on
// and off), not their times.
void run_fp8acc_phase(PhaseContext& ctx) { run_gemm_cases(ctx, "gemm_fp8acc", build_fp8acc_plan(ctx.quick), {}); }

namespace {
void run_gemm_cases(PhaseContext& ctx, const char* kind, const std::vector<GemmCase>& plan,
                    const std::vector<GemmCase>& variants) {
  log_msg("%zu GEMM cases", plan.size());

  cublasLtHandle_t lt = nullptr;
  {
    cublasStatus_t st = cublasLtCreate(&lt);
    if (st != CUBLAS_STATUS_SUCCESS) {
      JsonObject e;
      e.str("kind", "gemm").str("error", std::string("cublasLtCreate: ") + cublasGetStatusName(st));
      ctx.emit(e);
      return;
    }
  }
  struct LtGuard {
    cublasLtHandle_t h;
    ~LtGuard() { cublasLtDestroy(h); }
  } guard{lt};

  // Arenas sized for the largest case including its rotation sets.
  size_t need_a = 0, need_b = 0, need_c = 0;
  for (const auto* list : {&plan, &variants})
  for (const auto& c : *list) {
    const CaseLayout l = layout_of(c, ctx.dev.l2_bytes);
    need_a = std::max(need_a, l.a_stride * l.sets);
    need_b = std::max(need_b, l.b_stride * l.sets);
    need_c = std::max(need_c, l.c_stride * l.sets);
  }
  Arenas ar;
  std::string err;
  if (err.empty()) err = ar.a.allocate(need_a);
  if (err.empty()) err = ar.b.allocate(need_b);
  if (err.empty()) err = ar.c.allocate(need_c);
  if (err.empty()) err = ar.workspace.allocate(kWorkspaceBytes);
  if (err.empty()) err = ar.one.allocate(sizeof(float));
  if (err.empty()) {
    const float one = 1.0f;
    err = cuda_error(cudaMemcpy(ar.one.get(), &one, sizeof one, cudaMemcpyHostToDevice), "cudaMemcpy(one)");
  }
  if (!err.empty()) {
    JsonObject e;
    e.str("kind", "gemm").str("error", "arena allocation: " + err);
    ctx.emit(e);
    return;
  }
  log_msg("arenas: A %.2f GB, B %.2f GB, C %.2f GB", need_a / 1e9, need_b / 1e9, need_c / 1e9);
  const float* d_one = ar.one.as<float>();

  // Correctness of the operand mapping, once per dtype and layout.
  check_case(ctx, lt, d_one, ar.workspace.get(), DType::BF16, false);
  check_case(ctx, lt, d_one, ar.workspace.get(), DType::BF16, true);
  check_case(ctx, lt, d_one, ar.workspace.get(), DType::FP16, false);
  check_case(ctx, lt, d_one, ar.workspace.get(), DType::FP32, false);
  check_case(ctx, lt, d_one, ar.workspace.get(), DType::FP8_E4M3, true);
  if (ctx.broken) return;

  const TimingOptions opts = gemm_timing(ctx.quick);
  bool filled = false;
  DType filled_type = DType::BF16;
  // Random inputs of the case's type over the whole arena (a few ms), when the type changes.
  auto fill_for = [&](const GemmCase& c) -> std::string {
    if (filled && filled_type == c.type) return "";
    const size_t es = dtype_size(c.type);
    std::string ferr = fill_random(ar.a.get(), need_a / es, c.type, 1, ctx.stream);
    if (ferr.empty()) ferr = fill_random(ar.b.get(), need_b / es, c.type, 2, ctx.stream);
    if (ferr.empty()) ferr = cuda_error(cudaStreamSynchronize(ctx.stream), "fill sync");
    if (!ferr.empty()) return "fill: " + ferr;
    filled = true;
    filled_type = c.type;
    return "";
  };
  auto row = [&](const char* kind, const GemmCase& c) {
    JsonObject e;
    e.str("kind", kind).str("dtype", gemm_dtype_name(c.type)).str("layout", c.nt ? "nt" : "nn").str("tag", c.tag);
    e.integer("m", c.m).integer("n", c.n).integer("k", c.k);
    e.str("out_dtype", dtype_name(output_type(c.type)));
    if (c.type == DType::FP8_E4M3) e.boolean("fast_accum", c.fast_accum);
    return e;
  };
  // Times one case with one algorithm into e (timing, config, workspace and waves).
  auto time_algo = [&](const GemmCase& c, const LtDescs& d, const cublasLtMatmulAlgo_t& algo, size_t workspace,
                       float waves, JsonObject& e) {
    const CaseLayout l = layout_of(c, ctx.dev.l2_bytes);
    char* base_a = ar.a.as<char>();
    char* base_b = ar.b.as<char>();
    char* base_c = ar.c.as<char>();
    void* ws = ar.workspace.get();
    const float alpha = 1.f, beta = 0.f;
    LaunchFn fn = [&](cudaStream_t s, int iter) -> std::string {
      const size_t set = static_cast<size_t>(iter % l.sets);
      const void* a = base_a + set * l.a_stride;
      const void* b = base_b + set * l.b_stride;
      void* cc = base_c + set * l.c_stride;
      // cuBLAS A := our B, cuBLAS B := our A (see the mapping at the top).
      LT_TRY(cublasLtMatmul(lt, d.op, &alpha, b, d.a, a, d.b, &beta, cc, d.c, cc, d.d, &algo, ws, kWorkspaceBytes, s));
      return "";
    };
    const Timing t = time_op(ctx.stream, fn, opts, ctx.budget);
    add_timing(e, t);
    if (t.ok) e.num("tflops", 2.0 * c.m * c.n * c.k / t.median_s / 1e12);
    e.integer("rotation_sets", l.sets);
    add_algo_config(e, algo);
    e.integer("workspace_bytes", static_cast<int64_t>(workspace));
    e.num("waves", waves);
    return t;
  };
  auto log_row = [&](const GemmCase& c, const Timing& t, const std::string& what) {
    if (t.ok)
      log_msg("%s %s %s %lldx%lldx%lld%s: %.4f ms %.1f TFLOP/s", gemm_dtype_name(c.type), c.nt ? "nt" : "nn", c.tag.c_str(),
              (long long)c.m, (long long)c.n, (long long)c.k, what.c_str(), t.median_s * 1e3,
              2.0 * c.m * c.n * c.k / t.median_s / 1e12);
    else
      log_msg("%s %s %lldx%lldx%lld%s: %s", gemm_dtype_name(c.type), c.tag.c_str(), (long long)c.m, (long long)c.n,
              (long long)c.k, what.c_str(), t.error.c_str());
  };

  for (const auto& c : plan) {
    if (ctx.broken) break;
    const double predicted = predict_time_op_s(predict_op_s(c), opts) + 0.01;
    if (!ctx.budget.allows(predicted)) {
      ctx.skip();
      continue;
    }
    JsonObject e = row(kind, c);
    if (std::string ferr = fill_for(c); !ferr.empty()) {
      ctx.emit(e.null("time_s").str("error", ferr));
      continue;
    }
    LtDescs d;
    std::string serr = setup_case(lt, c, d_one, d);
    if (!serr.empty()) {
      e.null("time_s").str("error", serr);
      ctx.emit(e);
      log_msg("%s %s %lldx%lldx%lld: %s", gemm_dtype_name(c.type), c.tag.c_str(), (long long)c.m, (long long)c.n,
              (long long)c.k, serr.c_str());
      continue;
    }
    const Timing t = time_algo(c, d, d.heur.algo, d.heur.workspaceSize, d.heur.wavesCount, e);
    ctx.emit(e);
    log_row(c, t, "");
  }

  // The variants: the heuristic's list, then its first algorithm with other split-K counts.
  for (const auto& c : variants) {
    if (ctx.broken) break;
    const double predicted = (kVariants + std::size(kSplitSweep)) * (predict_time_op_s(predict_op_s(c), opts) + 0.01);
    if (!ctx.budget.allows(predicted)) {
      ctx.skip();
      continue;
    }
    JsonObject head = row("gemm_variant", c);
    if (std::string ferr = fill_for(c); !ferr.empty()) {
      ctx.emit(head.null("time_s").str("error", ferr));
      continue;
    }
    LtDescs d;
    std::string serr = setup_case(lt, c, d_one, d);
    cublasLtMatmulHeuristicResult_t list[kVariants] = {};
    int returned = 0;
    if (serr.empty()) {
      const cublasStatus_t st =
          cublasLtMatmulAlgoGetHeuristic(lt, d.op, d.a, d.b, d.c, d.d, d.pref, kVariants, list, &returned);
      if (st != CUBLAS_STATUS_SUCCESS) serr = std::string("cublasLtMatmulAlgoGetHeuristic: ") + cublasGetStatusName(st);
    }
    if (!serr.empty()) {
      ctx.emit(head.null("time_s").str("error", serr));
      continue;
    }
    for (int i = 0; i < returned && !ctx.broken; ++i) {
      JsonObject e = row("gemm_variant", c);
      e.str("variant", "heuristic").integer("rank", i);
      if (list[i].state != CUBLAS_STATUS_SUCCESS) {
        ctx.emit(e.null("time_s").str("error", std::string("heuristic state: ") + cublasGetStatusName(list[i].state)));
        continue;
      }
      const Timing t = time_algo(c, d, list[i].algo, list[i].workspaceSize, list[i].wavesCount, e);
      ctx.emit(e);
      log_row(c, t, " heuristic #" + std::to_string(i));
    }
    int32_t own_split = 1;
    size_t written = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&d.heur.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &own_split, sizeof own_split, &written);
    uint32_t own_scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
    cublasLtMatmulAlgoConfigGetAttribute(&d.heur.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &own_scheme, sizeof own_scheme,
                                         &written);
    for (int split : kSplitSweep) {
      if (ctx.broken) break;
      if (split == own_split) continue;
      JsonObject e = row("gemm_variant", c);
      e.str("variant", "split").integer("rank", 0);
      cublasLtMatmulAlgo_t algo = d.heur.algo;
      const uint32_t scheme = split == 1 ? CUBLASLT_REDUCTION_SCHEME_NONE
                              : own_scheme != CUBLASLT_REDUCTION_SCHEME_NONE ? own_scheme
                                                                             : CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
      cublasLtMatmulHeuristicResult_t checked{};
      cublasStatus_t st = cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split, sizeof split);
      if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof scheme);
      if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulAlgoCheck(lt, d.op, d.a, d.b, d.c, d.d, &algo, &checked);
      if (st != CUBLAS_STATUS_SUCCESS || checked.workspaceSize > kWorkspaceBytes) {
        e.integer("split_k", split).null("time_s");
        e.str("error", st != CUBLAS_STATUS_SUCCESS ? std::string("cublasLtMatmulAlgoCheck: ") + cublasGetStatusName(st)
                                                   : "needs more workspace than 32 MiB");
        ctx.emit(e);
        continue;
      }
      const Timing t = time_algo(c, d, algo, checked.workspaceSize, checked.wavesCount, e);
      ctx.emit(e);
      log_row(c, t, " split " + std::to_string(split));
    }
  }
}
}  // namespace

}  // namespace harness
