#include "models/transformer.hpp"

#include <algorithm>

namespace scaleout {

ParamCounts count_params(const TransformerSpec& m, std::int64_t seq_len_for_positions) {
  ParamCounts p;
  const double h = double(m.hidden), f = double(m.ffn), v = double(m.vocab);
  const double q = double(m.q_width()), kv = double(m.kv_width());
  const bool gpt = m.arch == Arch::gpt;
  std::int64_t positions = m.max_positions > 0 ? m.max_positions : seq_len_for_positions;
  p.embedding = v * h + (gpt ? double(positions) * h : 0.0);
  p.lm_head = m.tied_embeddings ? 0.0 : v * h;
  double attn = h * (q + 2 * kv) + q * h + (gpt ? (q + 2 * kv) + h : 0.0);
  if (m.mla()) {
    // MLA: the query down- and up-projections (and the latent's norm) or one projection; the
    // keys' and values' latent with the shared RoPE key, its norm and up-projection; the output.
    const double H = double(m.heads), qk = double(m.qk_dim()), vd = double(m.v_dim());
    const double ql = double(m.q_lora_rank), kvl = double(m.kv_lora_rank), rope = double(m.qk_rope_dim);
    const double qproj = ql > 0 ? h * ql + ql + ql * H * qk : h * H * qk;
    attn = qproj + h * (kvl + rope) + kvl + kvl * H * (double(m.hd()) + vd) + H * vd * h;
  }
  const double mlp_one = gpt ? (2 * h * f + f + h) : m.gated_mlp() ? 3 * h * f : 2 * h * f;
  const double expert = 3 * h * double(m.expert_ffn());
  const double norms = gpt ? 4 * h : 2 * h;
  const double router = m.experts > 1 ? h * double(m.experts) : 0.0;
  const double shared = expert * double(m.shared_experts);
  const double dense = attn + mlp_one + norms;
  const double moe_all = attn + expert * double(m.experts) + shared + norms + router;
  const double moe_active = attn + expert * double(m.top_k) + shared + norms + router;
  // The mean over the layers: the first dense_layers (all of them without experts) dense.
  const double L = double(std::max<std::int64_t>(1, m.layers));
  const double d = m.experts > 1 ? double(std::min(m.dense_layers, m.layers)) : L, e = L - d;
  p.per_layer = (d * dense + e * moe_all) / L;
  p.per_layer_active = (d * dense + e * moe_active) / L;
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
  // (QK^T over qk_dim, PV over v_dim: the same 2 hd per head without MLA.)
  const double attention = 3.0 * double(m.layers) * tokens * double(seq) * double(m.heads) * double(m.qk_dim() + m.v_dim());
  return dense + attention;
}

}  // namespace scaleout
