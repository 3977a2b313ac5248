#include "models/step_tape.hpp"

#include <initializer_list>
#include <string>
#include <utility>

namespace scaleout {
namespace {

class Builder {
 public:
  Builder(const TransformerSpec& m, const TrainingSpec& t)
      : m_(m), t_(t), r_(t.precision), tokens_(double(t.micro_batch) * double(t.seq_len)) {}

  Tape run() {
    const int tokens = tensor("tokens", tokens_, Dtype::fp64, false);  // int64 ids
    int x = embed(tokens);
    for (std::int64_t l = 0; l < m_.layers; ++l) {
      layer_ = int(l);
      if (t_.recompute == Recompute::full) region_ = tape_.regions++;
      x = block(x);
      region_ = -1;
    }
    layer_ = -1;
    head_and_loss(x);
    return std::move(tape_);
  }

 private:
  // ---- tensors ---------------------------------------------------------------------------------
  int tensor(std::string name, double elems, Dtype d, bool requires_grad = true) {
    const int id = tape_.add_tensor(prefix() + name, elems * dtype_bytes(d), requires_grad);
    dtype_.resize(tape_.tensors.size());
    elems_.resize(tape_.tensors.size());
    dtype_[id] = d;
    elems_[id] = elems;
    return id;
  }
  std::string prefix() const { return layer_ >= 0 ? "L" + std::to_string(layer_) + "." : ""; }
  double bytes(int t) const { return tape_.tensors[t].bytes; }
  bool needs_grad(int t) const { return tape_.tensors[t].requires_grad; }

  static Kernel mem_kernel(std::string name, double bytes, Dtype d) {
    Kernel k;
    k.kind = KernelKind::memory;
    k.bytes = bytes;
    k.dtype = d;
    k.name = std::move(name);
    return k;
  }
  static Kernel gemm_kernel(std::string name, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch, Dtype d) {
    Kernel g;
    g.kind = KernelKind::gemm;
    g.gemm = GemmShape{m, n, k, batch};
    g.dtype = d;
    g.name = std::move(name);
    return g;
  }

  int push(OpRec op) {
    op.layer = layer_;
    op.region = region_;
    op.name = prefix() + op.name;
    return tape_.add_op(std::move(op));
  }

  // An elementwise or reduction op run as its own memory-bound kernel (eager PyTorch). Backward
  // reads the output's gradient and what was saved, and writes a gradient per input needing one.
  int ew(const std::string& name, std::initializer_list<int> ins, double out_elems, Dtype out_dtype,
         std::initializer_list<int> saved_ins = {}, bool save_out = false, int kernels = 1) {
    const int out = tensor(name, out_elems, out_dtype);
    OpRec op;
    op.name = name;
    op.inputs.assign(ins);
    op.outputs = {out};
    op.saved.assign(saved_ins);
    if (save_out) op.saved.push_back(out);
    double fwd = bytes(out), bwd = bytes(out);
    bool any_grad = false;
    for (int i : ins) {
      fwd += bytes(i);
      if (needs_grad(i)) {
        bwd += bytes(i);
        any_grad = true;
      }
    }
    for (int s : op.saved) bwd += bytes(s);
    for (int k = 0; k < kernels; ++k) op.fwd.push_back(mem_kernel(name, fwd / kernels, out_dtype));
    if (any_grad) op.bwd.push_back(mem_kernel(name + "_bwd", bwd, out_dtype));
    tape_.tensors[out].requires_grad = any_grad;
    push(std::move(op));
    return out;
  }

  int cast(int x, Dtype d) {
    if (dtype_[x] == d) return x;
    return ew("to_" + std::string(to_string(d)), {x}, elems_[x], d);
  }

  // nn.Linear (or a column/row slice of one under tensor parallelism). Under autocast the input
  // and the fp32 weight are cast to the compute dtype; the weight cast is cached for the rest of
  // the forward and saved for backward, its gradient cast back and accumulated into the fp32 grad.
  int linear(const std::string& name, int x, std::int64_t in, std::int64_t out, bool bias) {
    const int param = tape_.add_param(prefix() + name, double(in) * double(out) + (bias ? double(out) : 0.0),
                                      trainable(name));
    const Dtype c = r_.compute == Dtype::fp8 ? Dtype::bf16 : r_.compute;  // fp8: operands quantised in the GEMM
    const bool frozen = !tape_.params[param].trainable;
    int xc = r_.autocast ? cast(x, c) : x;
    OpRec op;
    op.name = name;
    op.inputs = {xc};
    op.saved = {xc};
    if (frozen && t_.lora && t_.lora->nf4_base) {
      // QLoRA: the NF4 weight is dequantised to bf16 for each GEMM, forward and backward (dgrad).
      OpRec dq;
      dq.name = name + ".dequant";
      const int wd = tensor(name + ".w_dequant", double(in) * double(out), c, false);
      dq.outputs = {wd};
      dq.fwd.push_back(mem_kernel(dq.name, double(in) * double(out) * (0.5 + 2.0), c));
      push(std::move(dq));
      op.inputs.push_back(wd);
      op.bwd.push_back(mem_kernel(name + ".dequant_bwd", double(in) * double(out) * (0.5 + 2.0), c));
    } else if (frozen) {
      // A frozen base stored in the compute dtype: autocast has nothing to cast.
    } else if (r_.autocast) {
      OpRec wc;
      wc.name = name + ".w_cast";
      const int w = tensor(name + ".w_" + std::string(to_string(c)), double(in) * double(out), c);
      tape_.tensors[w].hold_until_forward_end = true;
      wc.outputs = {w};
      wc.fwd.push_back(mem_kernel(wc.name, double(in) * double(out) * (dtype_bytes(r_.param) + dtype_bytes(c)), c));
      wc.param = param;
      wc.bwd.push_back(mem_kernel(wc.name + "_bwd", double(in) * double(out) * (dtype_bytes(c) + 2 * dtype_bytes(r_.grad)), c));
      push(std::move(wc));
      op.inputs.push_back(w);
      op.saved.push_back(w);
    } else {
      op.param = param;
    }
    const int y = tensor(name, tokens_ * double(out), c);
    op.outputs = {y};
    const auto t = static_cast<std::int64_t>(tokens_);
    op.fwd.push_back(gemm_kernel(name, t, out, in, 1, r_.compute));
    if (needs_grad(xc)) op.bwd.push_back(gemm_kernel(name + "_dgrad", t, in, out, 1, r_.compute));
    if (!frozen) {
      op.bwd.push_back(gemm_kernel(name + "_wgrad", out, in, t, 1, r_.compute));
      if (bias) op.bwd.push_back(mem_kernel(name + "_bgrad", tokens_ * double(out) * dtype_bytes(c), c));
    }
    tape_.tensors[y].requires_grad = !frozen || needs_grad(xc);
    push(std::move(op));
    if (t_.lora && lora_target(name)) return lora(name, x, y, in, out);
    return y;
  }

  bool lora_target(const std::string& name) const {
    if (!t_.lora) return false;
    const bool attn = name == "q" || name == "k" || name == "v" || name == "o" || name == "qkv" || name == "proj";
    const bool mlp = name == "gate" || name == "up" || name == "down" || name == "fc1" || name == "fc2";
    return attn || (t_.lora->all_linear && mlp);
  }
  bool trainable(const std::string& name) const { return !t_.lora; (void)name; }

  // LoRA adapter beside a frozen linear: y + B(A(x)) * scale, A: in -> r, B: r -> out, trained.
  int lora(const std::string& name, int x, int y, std::int64_t in, std::int64_t out) {
    const std::int64_t rank = t_.lora->rank;
    const bool saved_lora = lora_depth_;
    lora_depth_ = true;
    const auto saved_lora_spec = t_.lora;
    t_.lora.reset();  // the adapters themselves train
    const int a = linear(name + ".lora_a", x, in, rank, false);
    const int b = linear(name + ".lora_b", a, rank, out, false);
    t_.lora = saved_lora_spec;
    lora_depth_ = saved_lora;
    return ew(name + ".lora_add", {y, b}, elems_[y], dtype_[y]);
  }

  int norm(const std::string& name, int x) {
    const double elems = elems_[x];
    const double rows = tokens_;
    if (r_.fused_kernels || m_.arch == Arch::gpt) {
      // One fused kernel (F.layer_norm, or Apex/TE fused RMSNorm): saves its input and the
      // per-row statistics; under autocast it runs in fp32.
      const Dtype od = r_.autocast ? Dtype::fp32 : dtype_[x];
      const int xin = r_.autocast ? cast(x, Dtype::fp32) : x;
      const int stats = tensor(name + ".stats", 2 * rows, Dtype::fp32, false);
      const int y = tensor(name, elems, od);
      OpRec op;
      op.name = name;
      op.inputs = {xin};
      op.outputs = {y, stats};
      op.saved = {xin, stats};
      op.param = tape_.add_param(prefix() + name, double(m_.hidden) * (m_.arch == Arch::gpt ? 2 : 1), !t_.lora);
      if (!tape_.params[op.param].trainable) op.param = -1;
      op.fwd.push_back(mem_kernel(name, bytes(xin) + bytes(y), od));
      op.bwd.push_back(mem_kernel(name + "_bwd", bytes(y) + 2 * bytes(xin), od));
      push(std::move(op));
      return y;
    }
    // Llama RMSNorm as Hugging Face writes it, op by op in eager mode:
    // xf = x.float(); n = xf * rsqrt(mean(xf^2) + eps); y = w * n.to(x.dtype)
    const int xf = cast(x, Dtype::fp32);
    const int sq = ew(name + ".pow", {xf}, elems, Dtype::fp32, {xf});
    const int ms = ew(name + ".mean", {sq}, rows, Dtype::fp32);
    const int rs = ew(name + ".rsqrt", {ms}, rows, Dtype::fp32, {}, true, 2);
    const int n = ew(name + ".mul", {xf, rs}, elems, Dtype::fp32, {xf, rs});
    const int nc = cast(n, dtype_[x]);
    const Dtype od = r_.autocast ? Dtype::fp32 : dtype_[x];
    const int y = ew(name + ".weight", {nc}, elems, od, {nc});
    OpRec& last = tape_.ops.back();
    last.param = tape_.add_param(prefix() + name, double(m_.hidden), !t_.lora);
    if (!tape_.params[last.param].trainable) last.param = -1;
    return y;
  }

  int embed(int tokens) {
    const Dtype d = r_.autocast ? r_.param : r_.residual;
    const double h = double(m_.hidden);
    emb_param_ = tape_.add_param("embedding", double(m_.vocab) * h, !t_.lora);
    const int e = tensor("embed", tokens_ * h, d);
    OpRec op;
    op.name = "embedding";
    op.inputs = {tokens};
    op.outputs = {e};
    op.saved = {tokens};
    op.fwd.push_back(mem_kernel("embedding", bytes(e) * 2, d));
    if (!t_.lora) {
      op.param = emb_param_;
      // Dense embedding backward: zero the vocab x h gradient, then index-add the token rows.
      op.bwd.push_back(mem_kernel("embedding_bwd", double(m_.vocab) * h * dtype_bytes(r_.grad) + 2 * bytes(e), d));
    }
    push(std::move(op));
    if (m_.arch != Arch::gpt) return e;
    const int pos_param = tape_.add_param("position_embedding",
                                          double(m_.max_positions > 0 ? m_.max_positions : t_.seq_len) * h, !t_.lora);
    const int p = tensor("pos_embed", double(t_.seq_len) * h, d);
    OpRec pop;
    pop.name = "position_embedding";
    pop.outputs = {p};
    pop.fwd.push_back(mem_kernel("position_embedding", bytes(p) * 2, d));
    if (!t_.lora) {
      pop.param = pos_param;
      pop.bwd.push_back(mem_kernel("position_embedding_bwd", 2 * bytes(e), d));
    }
    push(std::move(pop));
    return ew("embed_add", {e, p}, tokens_ * h, d);
  }

  int dropout(const std::string& name, int x) {
    if (t_.dropout <= 0) return x;
    const int mask = tensor(name + ".mask", elems_[x], Dtype::int8, false);
    OpRec m;
    m.name = name + ".mask";
    m.outputs = {mask};
    m.fwd.push_back(mem_kernel(m.name, bytes(mask), Dtype::int8));
    push(std::move(m));
    return ew(name, {x, mask}, elems_[x], dtype_[x], {mask});
  }

  int attention(int q, int k, int v) {
    const double b = double(t_.micro_batch), s = double(t_.seq_len);
    const double heads = double(m_.heads), hd = double(m_.hd());
    const Dtype c = dtype_[q];
    const bool selective = t_.recompute == Recompute::selective;
    const int outer_region = region_;
    if (selective) region_ = tape_.regions++;
    int o;
    if (t_.attention == AttentionImpl::flash) {
      o = tensor("attn", tokens_ * heads * hd, c);
      const int lse = tensor("attn.lse", b * heads * s, Dtype::fp32, false);
      OpRec op;
      op.name = "attn";
      op.inputs = {q, k, v};
      op.outputs = {o, lse};
      op.saved = {q, k, v, o, lse};
      Kernel kf;
      kf.kind = KernelKind::attention_fwd;
      kf.dtype = c;
      kf.attn = AttentionShape{t_.micro_batch, m_.heads, t_.seq_len, m_.hd(), true};
      kf.name = "flash_fwd";
      Kernel kb = kf;
      kb.kind = KernelKind::attention_bwd;
      kb.name = "flash_bwd";
      op.fwd.push_back(kf);
      op.bwd.push_back(kb);
      // FlashAttention-2's backward accumulates dQ in fp32 and keeps a row statistic per query.
      op.bwd_workspace_bytes = tokens_ * heads * hd * 4 + b * heads * s * 4;
      push(std::move(op));
    } else {
      // PyTorch's math path: scores and probabilities materialised per head.
      const double ss = b * heads * s * s;
      const auto bh = static_cast<std::int64_t>(b * heads);
      const auto si = static_cast<std::int64_t>(s);
      const auto hdi = m_.hd();
      const int scores = tensor("scores", ss, c);
      OpRec qk;
      qk.name = "qk";
      qk.inputs = {q, k};
      qk.outputs = {scores};
      qk.saved = {q, k};
      qk.fwd.push_back(gemm_kernel("qk", si, si, hdi, bh, c));
      qk.bwd.push_back(gemm_kernel("qk_dgrad_q", si, hdi, si, bh, c));
      qk.bwd.push_back(gemm_kernel("qk_dgrad_k", si, hdi, si, bh, c));
      push(std::move(qk));
      const int scaled = ew("scale_mask", {scores}, ss, c, {}, false, 2);
      const int sf = cast(scaled, Dtype::fp32);
      const int p = ew("softmax", {sf}, ss, Dtype::fp32, {}, true);
      int pc = cast(p, c);
      pc = dropout("attn_dropout", pc);
      const int ob = tensor("pv", tokens_ * heads * hd, c);
      OpRec pv;
      pv.name = "pv";
      pv.inputs = {pc, v};
      pv.outputs = {ob};
      pv.saved = {pc, v};
      pv.fwd.push_back(gemm_kernel("pv", si, hdi, si, bh, c));
      pv.bwd.push_back(gemm_kernel("pv_dgrad_p", si, si, hdi, bh, c));
      pv.bwd.push_back(gemm_kernel("pv_dgrad_v", si, hdi, si, bh, c));
      push(std::move(pv));
      o = ew("attn_transpose", {ob}, tokens_ * heads * hd, c);
    }
    region_ = outer_region;
    return o;
  }

  int rope(const std::string& name, int x) {
    if (r_.fused_kernels) return ew(name + ".rope", {x}, elems_[x], dtype_[x]);
    // q * cos + rotate_half(q) * sin, eagerly: four kernels, nothing large saved.
    const int a = ew(name + ".rope_cos", {x}, elems_[x], dtype_[x]);
    const int rh = ew(name + ".rotate_half", {x}, elems_[x], dtype_[x], {}, false, 2);
    const int b = ew(name + ".rope_sin", {rh}, elems_[x], dtype_[x]);
    return ew(name + ".rope_add", {a, b}, elems_[x], dtype_[x]);
  }

  int block(int x) {
    const std::int64_t h = m_.hidden, f = m_.ffn;
    const Dtype rd = dtype_[x];
    if (m_.arch == Arch::gpt) {
      const int n1 = norm("ln1", x);
      const int qkv = linear("qkv", n1, h, m_.q_width() + 2 * m_.kv_width(), true);
      // q, k and v are views of the fused projection: attention saves the one tensor.
      const int o = attention(qkv, qkv, qkv);
      int pr = linear("proj", o, m_.q_width(), h, true);
      pr = dropout("proj_dropout", pr);
      const int x2 = ew("residual1", {x, pr}, elems_[x], rd);
      const int n2 = norm("ln2", x2);
      const int f1 = linear("fc1", n2, h, f, true);
      const int g = r_.fused_kernels ? ew("bias_gelu", {f1}, elems_[f1], dtype_[f1], {f1})
                                     : ew("gelu", {f1}, elems_[f1], dtype_[f1], {f1});
      int f2 = linear("fc2", g, f, h, true);
      f2 = dropout("mlp_dropout", f2);
      return ew("residual2", {x2, f2}, elems_[x], rd);
    }
    const int n1 = norm("norm1", x);
    int q = linear("q", n1, h, m_.q_width(), false);
    int k = linear("k", n1, h, m_.kv_width(), false);
    int v = linear("v", n1, h, m_.kv_width(), false);
    q = rope("q", q);
    k = rope("k", k);
    if (m_.kv_heads < m_.heads && !r_.fused_kernels) {
      // Eager GQA (Hugging Face repeat_kv): k and v expanded to every query head.
      k = ew("k.repeat_kv", {k}, tokens_ * double(m_.q_width()), dtype_[k]);
      v = ew("v.repeat_kv", {v}, tokens_ * double(m_.q_width()), dtype_[v]);
    }
    const int o = attention(q, k, v);
    int op = linear("o", o, m_.q_width(), h, false);
    op = dropout("o_dropout", op);
    const int x2 = ew("residual1", {x, op}, elems_[x], rd);
    const int n2 = norm("norm2", x2);
    if (m_.experts > 1) return moe(x2, n2);
    const int g = linear("gate", n2, h, f, false);
    const int u = linear("up", n2, h, f, false);
    int a;
    if (r_.fused_kernels) {
      a = ew("swiglu", {g, u}, elems_[g], dtype_[g], {g, u});
    } else {
      const int sg = ew("silu", {g}, elems_[g], dtype_[g], {g});
      a = ew("swiglu_mul", {sg, u}, elems_[g], dtype_[g], {sg, u});
    }
    int d = linear("down", a, f, h, false);
    d = dropout("mlp_dropout", d);
    return ew("residual2", {x2, d}, elems_[x], rd);
  }

  // Mixture of experts on one GPU: a router, then each token through top_k experts. The expert
  // GEMMs see tokens*top_k/experts rows each (balanced routing).
  int moe(int x2, int n2) {
    const std::int64_t h = m_.hidden, f = m_.ffn, e = m_.experts;
    const int logits = linear("router", n2, h, e, false);
    const int probs = ew("router_softmax", {logits}, elems_[logits], Dtype::fp32, {}, true);
    const double routed = tokens_ * double(m_.top_k);
    const int disp = ew("dispatch", {n2, probs}, routed * double(h), dtype_[n2]);
    const double saved_tokens = tokens_;
    tokens_ = routed / double(e);
    int acc = -1;
    for (std::int64_t i = 0; i < e; ++i) {
      const std::string p = "expert" + std::to_string(i) + ".";
      const int g = linear(p + "gate", disp, h, f, false);
      const int u = linear(p + "up", disp, h, f, false);
      const int sg = ew(p + "silu", {g}, elems_[g], dtype_[g], {g});
      const int a = ew(p + "mul", {sg, u}, elems_[g], dtype_[g], {sg, u});
      const int d = linear(p + "down", a, f, h, false);
      acc = acc < 0 ? d : ew(p + "gather", {acc, d}, elems_[d], dtype_[d]);
    }
    tokens_ = saved_tokens;
    const int comb = ew("combine", {acc, probs}, tokens_ * double(h), dtype_[acc], {probs});
    return ew("residual2", {x2, comb}, elems_[x2], dtype_[x2]);
  }

  void head_and_loss(int x) {
    const int n = norm(m_.arch == Arch::gpt ? "ln_f" : "norm_f", x);
    const double v = double(m_.vocab);
    const std::int64_t h = m_.hidden;
    int logits;
    if (m_.tied_embeddings) {
      // The LM head multiplies by the embedding matrix: its gradient accumulates into the same
      // parameter, so no second parameter is counted.
      const int before = int(tape_.params.size());
      logits = linear("lm_head", n, h, m_.vocab, false);
      tape_.params[before].count = 0;
      for (auto& op : tape_.ops)
        if (op.param == before) op.param = emb_param_;
    } else {
      logits = linear("lm_head", n, h, m_.vocab, false);
    }
    if (r_.fused_kernels) {
      // Megatron's cross-entropy: the fp32 softmax is kept for backward, whose gradient is written
      // in place of it.
      const int sm = tensor("softmax_fp32", tokens_ * v, Dtype::fp32, false);
      const int loss = tensor("loss", 1, Dtype::fp32);
      OpRec ce;
      ce.name = "cross_entropy";
      ce.inputs = {logits};
      ce.outputs = {loss, sm};
      ce.saved = {sm};
      ce.fwd.push_back(mem_kernel("cross_entropy", bytes(logits) + 2 * bytes(sm), Dtype::fp32));
      ce.bwd.push_back(mem_kernel("cross_entropy_bwd", bytes(sm) + bytes(logits), Dtype::fp32));
      push(std::move(ce));
      return;
    }
    // F.cross_entropy = log_softmax + nll_loss. Autocast runs log_softmax with dtype=float32 on
    // the bf16 logits (no separate fp32 copy); its backward writes the bf16 gradient directly
    // (_log_softmax_backward_data's input_dtype).
    const Dtype ld = r_.autocast ? Dtype::fp32 : dtype_[logits];
    const int ls = ew("log_softmax", {logits}, tokens_ * v, ld, {}, true);
    ew("nll_loss", {ls}, 1, Dtype::fp32);
  }

  const TransformerSpec& m_;
  TrainingSpec t_;
  const PrecisionRecipe& r_ = t_.precision;
  double tokens_;
  Tape tape_;
  std::vector<Dtype> dtype_;
  std::vector<double> elems_;
  int layer_ = -1;
  int region_ = -1;
  int emb_param_ = -1;
  bool lora_depth_ = false;
};

}  // namespace

Tape build_step_tape(const TransformerSpec& model, const TrainingSpec& training, ShardSpec shard) {
  (void)shard;
  return Builder(model, training).run();
}

}  // namespace scaleout
