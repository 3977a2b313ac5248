#pragma once
// How a model is trained: the precision recipe, optimizer, recompute, attention kernel, LoRA.
#include <cstdint>
#include <optional>
#include <string>

#include "hardware/dtype.hpp"

namespace scaleout {

// none; selective: Megatron's (core attention, or its --recompute-modules); full: every block
// checkpointed, its input kept; op: torch's selective activation checkpointing with torchtitan's
// op policy (every block checkpointed, but the outputs of flash attention and of every second
// matmul, the 1st, 3rd, ... of the block, stored by the forward and handed to the recompute).
enum class Recompute : std::uint8_t { none, selective, full, op };
inline const char* recompute_name(Recompute r) {
  return r == Recompute::none ? "none" : r == Recompute::selective ? "selective" : r == Recompute::full ? "full" : "op";
}
enum class AttentionImpl : std::uint8_t { flash, naive };
enum class Optimizer : std::uint8_t { adamw, sgd, adafactor, adamw_8bit };
enum class OptimizerImpl : std::uint8_t { foreach_, fused };
// How MoE tokens reach their experts' ranks. alltoall: Megatron-Core's all-to-all dispatcher,
// which permutes the tokens by expert first and sends one row per (token, expert); deepep:
// DeepEP's dispatch (Megatron's flex dispatcher, NeMo AutoModel), one row per (token, destination
// rank), expanded to the rank's experts on arrival, and its combine sums a rank's experts for a
// token before sending one row back.
enum class MoeDispatcher : std::uint8_t { alltoall, deepep };
// Which experts a token goes to. learned: a trained router, balanced (each token's top_k experts
// spread as a uniform random choice); fake_balanced: NeMo AutoModel's benchmark gate, round robin
// over aligned blocks of top_k consecutive experts (a token's experts share as few ranks as can be).
enum class MoeRouter : std::uint8_t { learned, fake_balanced };
// Megatron-Core's recompute modules (transformer_config.py recompute_modules): core_attn, mlp, moe
// and shared_experts are checkpointed submodules (their inputs kept); layernorm, moe_act and
// mla_up_proj keep neither their output nor anything inside, and recompute it for backward.
enum RecomputeModule : unsigned {
  kRecomputeCoreAttn = 1,
  kRecomputeLayernorm = 2,
  kRecomputeMlaUpProj = 4,
  kRecomputeMoeAct = 8,
  kRecomputeMlp = 16,
  kRecomputeMoe = 32,
  kRecomputeSharedExperts = 64,
};

// A precision recipe: where each tensor lives and in what format (DESIGN.md "precision").
struct PrecisionRecipe {
  std::string name;
  Dtype param = Dtype::fp32;       // the weights the model computes from, as stored on the GPU
  Dtype grad = Dtype::fp32;        // .grad / main_grad
  Dtype state = Dtype::fp32;       // optimizer moments
  Dtype compute = Dtype::bf16;     // GEMM operands
  Dtype residual = Dtype::fp32;    // the residual stream between layers
  bool autocast = false;           // PyTorch autocast: per-op casts, weight copies per forward
  bool master_copy = false;        // an fp32 master copy beside low-precision params (Megatron)
  // Bytes a parameter's master copy takes: 4 (fp32), or 2 where the optimizer keeps only the low
  // 16 bits of each fp32 master weight, the bf16 parameter being its high half (NeMo's distributed
  // Adam: store_param_remainders).
  double master_bytes = 4.0;
  bool fused_kernels = false;      // Megatron-style fused norm, bias-GELU, softmax, cross-entropy
  // Megatron-LM / NeMo as the framework: the vocabulary padded to 128 x TP, a fused Adam,
  // reentrant activation checkpointing (each region's backward frees its recomputed tensors).
  bool megatron = false;

  // Weights stored wider than the GEMMs take them, with neither autocast nor Megatron's casts:
  // only an FSDP gather in the compute dtype (FSDP2's MixedPrecisionPolicy, fsdp-bf16) casts them.
  bool weights_cast_by_fsdp() const { return !autocast && !megatron && param != compute; }
};

std::optional<PrecisionRecipe> precision_recipe(const std::string& name);

struct LoraSpec {
  std::int64_t rank = 16;
  bool all_linear = true;   // false: attention projections only
  bool nf4_base = false;    // QLoRA: frozen base in 4-bit NF4 with blockwise constants
};

struct TrainingSpec {
  std::int64_t seq_len = 2048;
  std::int64_t micro_batch = 1;
  std::int64_t global_batch = 1;
  PrecisionRecipe precision;
  Optimizer optimizer = Optimizer::adamw;
  OptimizerImpl optimizer_impl = OptimizerImpl::foreach_;
  Recompute recompute = Recompute::none;
  AttentionImpl attention = AttentionImpl::flash;
  double dropout = 0.0;
  // MoE: tokens an expert processes, as a multiple of its even share (padding to capacity in
  // GShard/Switch-style routers; 1.0 for dropless routing).
  double moe_capacity_factor = 1.0;
  MoeDispatcher moe_dispatcher = MoeDispatcher::alltoall;
  MoeRouter moe_router = MoeRouter::learned;
  // The experts' GEMMs as one grouped GEMM per projection (Megatron's --moe-grouped-gemm,
  // TEGroupedMLP; AutoModel's grouped_gemm / TE GroupedLinear): one kernel over the rank's
  // experts writing one output buffer, instead of a GEMM per expert and a copy of its output.
  bool moe_grouped_gemm = false;
  // Under selective recompute, what is recomputed (Megatron-Core's --recompute-modules), a mask of
  // RecomputeModule bits; core_attn alone by default (Megatron's selective recompute).
  unsigned recompute_modules = 1;
  // Without autocast, the logits cast to fp32 before the loss (torchtitan, Hugging Face's loss).
  bool upcast_logits = false;
  std::optional<LoraSpec> lora;
};

// Optimizer state in bytes per trained parameter (moments; the master copy is the recipe's).
double optimizer_state_bytes(Optimizer o, Dtype state);

}  // namespace scaleout
