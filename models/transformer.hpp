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

struct TransformerSpec {
  std::string name;
  std::string description;
  Arch arch = Arch::llama;
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
  double reported_params = 0;  // as the model's source states it; 0 when unknown
  std::vector<std::string> sources;
  std::string notes;

  std::int64_t hd() const { return head_dim > 0 ? head_dim : hidden / heads; }
  std::int64_t q_width() const { return heads * hd(); }
  std::int64_t kv_width() const { return kv_heads * hd(); }
};

// Parameter counts, split the way memory and FLOPs need them.
struct ParamCounts {
  double embedding = 0;      // token (+ learned positions for gpt)
  double lm_head = 0;        // zero when tied
  double per_layer = 0;      // attention + MLP (all experts) + norms
  double per_layer_active = 0;  // what one token touches (top_k experts)
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
