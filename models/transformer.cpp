#include "models/transformer.hpp"

namespace scaleout {

ParamCounts count_params(const TransformerSpec& m, std::int64_t seq_len_for_positions) {
  ParamCounts p;
  const double h = double(m.hidden), f = double(m.ffn), v = double(m.vocab);
  const double q = double(m.q_width()), kv = double(m.kv_width());
  const bool gpt = m.arch == Arch::gpt;
  std::int64_t positions = m.max_positions > 0 ? m.max_positions : seq_len_for_positions;
  p.embedding = v * h + (gpt ? double(positions) * h : 0.0);
  p.lm_head = m.tied_embeddings ? 0.0 : v * h;
  const double attn = h * (q + 2 * kv) + q * h + (gpt ? (q + 2 * kv) + h : 0.0);
  const double mlp_one = gpt ? (2 * h * f + f + h) : 3 * h * f;
  const double norms = gpt ? 4 * h : 2 * h;
  const double router = m.experts > 1 ? h * double(m.experts) : 0.0;
  p.per_layer = attn + mlp_one * double(m.experts) + norms + router;
  p.per_layer_active = attn + mlp_one * double(m.experts > 1 ? m.top_k : 1) + norms + router;
  p.final_norm = gpt ? 2 * h : h;
  p.layers = m.layers;
  return p;
}

double model_flops(const TransformerSpec& m, double tokens, std::int64_t seq) {
  const ParamCounts p = count_params(m, seq);
  // Matmul parameters: everything but embeddings lookups and norms; the LM head always multiplies
  // (tied or not).
  const double h = double(m.hidden), v = double(m.vocab);
  const double norms = (m.arch == Arch::gpt ? 4 * h : 2 * h);
  const double matmul_params = (p.per_layer_active - norms) * double(m.layers) + v * h;
  const double dense = 6.0 * matmul_params * tokens;
  // Causal attention: QK^T and PV, 2 * 2 * s * d per token per head forward, halved by the mask.
  const double attention = 3.0 * 2.0 * double(m.layers) * tokens * double(seq) * double(m.q_width());
  return dense + attention;
}

}  // namespace scaleout
