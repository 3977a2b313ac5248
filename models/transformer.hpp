#pragma once
// What is trained: a decoder-only transformer. arch gpt: LayerNorm with bias, GELU MLP
// (h -> ffn -> h), learned absolute positions, biases on linear layers. arch llama: RMSNorm,
// SwiGLU MLP (three ffn-wide matrices), RoPE, no biases, grouped-query attention via kv_heads.
// MoE: `experts` > 1 replaces every MLP by `experts` MLPs of width ffn with top_k routing.
#include <cstdint>
#include <string>
#include <vector>

namespace scaleout {

enum class Arch : std::uint8_t { gpt, llama };
// The MLP's activation under arch llama: swiglu (gated: gate and up h -> ffn, down ffn -> h), or
// a plain h -> ffn -> h MLP with squared ReLU (Nemotron-4) or GELU. arch gpt is always gelu.
enum class Activation : std::uint8_t { swiglu, squared_relu, gelu };

struct TransformerSpec {
  std::string name;
  std::string description;
  Arch arch = Arch::llama;
  Activation activation = Activation::swiglu;
  std::int64_t layers = 0;
  std::int64_t hidden = 0;
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 0;  // 0: hidden / heads
  std::int64_t ffn = 0;
  std::int64_t vocab = 0;
  bool tied_embeddings = false;
  std::int64_t max_positions = 0;
  std::int64_t experts = 1;
  std::int64_t top_k = 1;
  // DeepSeek-style MoE (DeepSeekMoE, DeepSeek-V2/V3): each expert moe_ffn wide (0: ffn), shared
  // experts every token goes through beside its top_k routed ones, and the first dense_layers
  // layers with a dense MLP of width ffn instead.
  std::int64_t moe_ffn = 0;
  std::int64_t shared_experts = 0;
  std::int64_t dense_layers = 0;
  // Multi-head latent attention (DeepSeek-V2/V3), on when kv_lora_rank > 0: keys and values come
  // up from a compressed latent of kv_lora_rank (plus a qk_rope_dim RoPE key shared by the
  // heads), queries through a q_lora_rank bottleneck (0: a full projection); each head's query and
  // key are head_dim (no RoPE) + qk_rope_dim wide, its value v_head_dim.
  std::int64_t q_lora_rank = 0;
  std::int64_t kv_lora_rank = 0;
  std::int64_t qk_rope_dim = 0;
  std::int64_t v_head_dim = 0;
  double reported_params = 0;  // as the model's source states it; 0 when unknown
  std::vector<std::string> sources;
  std::string notes;

  std::int64_t hd() const { return head_dim > 0 ? head_dim : hidden / heads; }
  std::int64_t q_width() const { return heads * hd(); }
  std::int64_t kv_width() const { return kv_heads * hd(); }
  bool mla() const { return kv_lora_rank > 0; }
  std::int64_t qk_dim() const { return hd() + (mla() ? qk_rope_dim : 0); }       // a query/key head
  std::int64_t v_dim() const { return mla() && v_head_dim > 0 ? v_head_dim : hd(); }  // a value head
  std::int64_t expert_ffn() const { return moe_ffn > 0 ? moe_ffn : ffn; }
  bool gated_mlp() const { return arch == Arch::llama && activation == Activation::swiglu; }
  bool moe_layer(std::int64_t layer) const { return experts > 1 && layer >= dense_layers; }
};

// Parameter counts, split the way memory and FLOPs need them.
struct ParamCounts {
  double embedding = 0;      // token (+ learned positions for gpt)
  double lm_head = 0;        // zero when tied
  double per_layer = 0;      // attention + MLP (all experts) + norms (the mean over layers)
  double per_layer_active = 0;  // what one token touches (top_k experts; the mean over layers)
  double final_norm = 0;
  std::int64_t layers = 0;
  double total() const { return embedding + lm_head + per_layer * double(layers) + final_norm; }
  double active() const { return embedding + lm_head + per_layer_active * double(layers) + final_norm; }
};

ParamCounts count_params(const TransformerSpec& m, std::int64_t seq_len_for_positions = 0);

// Model FLOPs of one forward and backward pass over `tokens` tokens in sequences of `seq`
// (6 per active parameter per token in the matmuls, plus causal attention), without recompute.
double model_flops(const TransformerSpec& m, double tokens, std::int64_t seq);

}  // namespace scaleout
