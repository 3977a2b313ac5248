#include "models/step_tape.hpp"

#include <initializer_list>
#include <string>
#include <utility>

namespace scaleout {
namespace {

class Builder {
 public:
  Builder(const TransformerSpec& m, const TrainingSpec& t, const StageSpec& st, bool repeat_layers)
      : m_(m), t_(t), r_(t.precision), st_(st),
        tokens_(double(t.micro_batch) * double(t.seq_len) / double(st.cp)),
        sp_tokens_(st.sequence_parallel ? tokens_ / double(st.tp) : tokens_),
        heads_(m.heads / st.tp),
        kv_heads_(m.kv_heads >= st.tp ? m.kv_heads / st.tp : 1),
        ffn_((m.ffn + st.tp - 1) / st.tp),
        moe_ffn_((m.expert_ffn() + st.tp - 1) / st.tp),
        vocab_(padded_vocab(m.vocab, t.precision, st.tp) / st.tp),
        repeat_layers_(repeat_layers) {}

  // Megatron (and NeMo) pad the vocabulary to a multiple of make_vocab_size_divisible_by (128) times
  // the TP size (_vocab_size_with_padding), so every rank's slice of the embedding and the output
  // layer is a whole number of 128-wide tiles: GPT-2's 50257 runs as 50304 on one GPU, 50688 over
  // TP 4. Other recipes (PyTorch, Hugging Face) keep the tokenizer's size, split as evenly as it goes.
  static std::int64_t padded_vocab(std::int64_t v, const PrecisionRecipe& r, std::int64_t tp) {
    const std::int64_t multiple = r.megatron ? 128 * tp : tp;
    return (v + multiple - 1) / multiple * multiple;
  }

  Tape run() {
    int x;
    if (st_.embedding) {
      const int tokens = tensor(tokens_, Dtype::fp64, false);  // int64 ids
      x = embed(tokens);
    } else {
      // The previous stage's output arrives as a tensor that needs a gradient sent back.
      x = tensor(sp_tokens_ * double(m_.hidden), r_.residual);
      tape_.input = x;
    }
    const std::int64_t last = st_.layers < 0 ? m_.layers : st_.first_layer + st_.layers;
    for (std::int64_t l = st_.first_layer; l < last; ++l) {
      layer_ = int(l);
      if (repeat_.ready) {
        x = repeat_block(x);
        continue;
      }
      const Mark before = mark();
      if (t_.recompute == Recompute::full || t_.recompute == Recompute::op) region_ = new_region(false);
      mm_count_ = 0;
      const int in = x;
      x = block(x);
      region_ = -1;
      // Every block is the same function of its input's shape and dtype: the second's ops (the
      // first's input comes from the embedding, which may differ) are those of every later block
      // whose input matches, with the tensors, parameters and regions numbered on.
      // (Past a model's dense first layers: the template must be a block like the ones after it.)
      if (repeat_layers_ && l == std::max(st_.first_layer + 1, m_.experts > 1 ? m_.dense_layers : 0) &&
          learn_repeat(before, in, x)) {
        // Room for the blocks to come (and the head's few ops).
        const auto more = std::size_t(last - l - 1);
        tape_.tensors.reserve(tape_.tensors.size() + more * (repeat_.to.tensors - repeat_.from.tensors) + 16);
        dtype_.reserve(tape_.tensors.capacity());
        elems_.reserve(tape_.tensors.capacity());
        tape_.params.reserve(tape_.params.size() + more * (repeat_.to.params - repeat_.from.params) + 4);
        tape_.ops.reserve(tape_.ops.size() + more * (repeat_.to.ops - repeat_.from.ops) + 16);
        tape_.copy_of.reserve(tape_.ops.capacity());
      }
    }
    layer_ = -1;
    if (st_.head) {
      head_and_loss(x);
    } else {
      tape_.output = x;
    }
    return std::move(tape_);
  }

 private:
  // ---- tensors ---------------------------------------------------------------------------------
  int tensor(double elems, Dtype d, bool requires_grad = true) {
    const int id = tape_.add_tensor(elems * dtype_bytes(d), requires_grad);
    dtype_.resize(tape_.tensors.size());
    elems_.resize(tape_.tensors.size());
    dtype_[id] = d;
    elems_[id] = elems;
    return id;
  }
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

  static Kernel comm_kernel(std::string name, CollectiveKind kind, CommGroup group, double bytes) {
    Kernel k;
    k.kind = KernelKind::collective;
    k.coll = kind;
    k.group = group;
    k.bytes = bytes;
    k.name = std::move(name);
    return k;
  }
  bool tp() const { return st_.tp > 1; }
  bool sp() const { return st_.tp > 1 && st_.sequence_parallel; }

  int push(OpRec op) {
    op.layer = layer_;
    op.region = region_;
    return tape_.add_op(std::move(op));
  }

  // An elementwise or reduction op run as its own memory-bound kernel (eager PyTorch). Backward
  // reads the output's gradient and what was saved, and writes a gradient per input needing one.
  int ew(const std::string& name, std::initializer_list<int> ins, double out_elems, Dtype out_dtype,
         std::initializer_list<int> saved_ins = {}, bool save_out = false, int kernels = 1) {
    const int out = tensor(out_elems, out_dtype);
    OpRec op;
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
    // Each eager kernel of the op is a full pass over its tensors (scale, then masked_fill_;
    // add eps, then rsqrt), forward and backward.
    const bool red = is_reduction(name);
    for (int k = 0; k < kernels; ++k) {
      op.fwd.push_back(mem_kernel(name, fwd, out_dtype));
      op.fwd.back().reduction = red;
      if (any_grad) {
        op.bwd.push_back(mem_kernel(name + "_bwd", bwd, out_dtype));
        op.bwd.back().reduction = red;
      }
    }
    tape_.tensors[out].requires_grad = any_grad;
    push(std::move(op));
    return out;
  }

  // Kernels that reduce along rows (and so stream less well than elementwise ones).
  static bool is_reduction(const std::string& name) {
    for (const char* r : {"softmax", "mean", "log_softmax", "cross_entropy", "scale_mask_softmax"})
      if (name.find(r) != std::string::npos) return true;
    return false;
  }

  // `elems`: how much of x is cast (an expert's linear casts only the rows routed to it).
  int cast(int x, Dtype d, double elems = 0) {
    const Dtype from = dtype_[x];
    if (from == d) return x;
    const bool whole = elems <= 0 || elems >= elems_[x];
    const int out = ew("to_" + std::string(to_string(d)), {x}, whole ? elems_[x] : elems, d);
    OpRec& op = tape_.ops.back();
    if (!whole) {
      // It reads only that slice of x (and backward writes only its gradient).
      const double read = elems * dtype_bytes(from);
      for (Kernel& k : op.fwd) k.bytes = bytes(out) + read;
      for (Kernel& k : op.bwd) k.bytes = bytes(out) + read;
    }
    // Eager ATen copies vectorize only fp32 -> bf16/fp16 (Copy.cu's bfloat16_copy_kernel_cuda and
    // float16_copy_kernel_cuda); any other conversion, an upcast above all, runs the element-by-
    // element dynamic-casting loop. Backward converts the other way.
    if (!r_.fused_kernels) {
      auto access = [](Dtype a, Dtype b) {
        return a == Dtype::fp32 && (b == Dtype::bf16 || b == Dtype::fp16) ? Kernel::Access::vectorized : Kernel::Access::unrolled;
      };
      for (Kernel& k : op.fwd) k.access = access(from, d);
      for (Kernel& k : op.bwd) k.access = access(d, from);
    }
    return out;
  }

  enum class Par { none, column, row };

  // nn.Linear (or a column/row slice of one under tensor parallelism). Under autocast the input
  // and the fp32 weight are cast to the compute dtype; the weight cast is cached for the rest of
  // the forward and saved for backward, its gradient cast back and accumulated into the fp32 grad.
  // Tensor parallelism (Megatron): a column-parallel linear sees the whole sequence (all-gathered
  // from s/tp under sequence parallelism, re-gathered in backward instead of saved) and all-reduces
  // (or reduce-scatters) its input gradient; a row-parallel one all-reduces (or reduce-scatters)
  // its partial output. `in` and `out` are this rank's widths.
  int linear(const std::string& name, int x, std::int64_t in, std::int64_t out, bool bias, Par par = Par::none) {
    // group_ > 1: the same linear for each of that many experts, run as one grouped GEMM.
    const double nb = double(group_), wn = double(in) * double(out) * nb;
    const int param = tape_.add_param(wn + (bias ? double(out) * nb : 0.0), trainable(name), layer_, split_);
    const Dtype c = r_.compute == Dtype::fp8 ? Dtype::bf16 : r_.compute;  // fp8: operands quantised in the GEMM
    const bool frozen = !tape_.params[param].trainable;
    // An expert's linear sees only its rows of the dispatched tokens (rows_override_), and
    // autocast casts that slice, once per linear: not the whole buffer of every local expert.
    const double x_elems = rows_override_ > 0 ? rows_override_ * double(in) * nb : elems_[x];
    int xc = r_.autocast ? cast(x, c, x_elems) : x;
    OpRec op;
    op.inputs = {xc};
    op.saved = {xc};
    if (frozen && t_.lora && t_.lora->nf4_base) {
      // QLoRA: the NF4 weight is dequantised to bf16 for each GEMM, forward and backward (dgrad).
      OpRec dq;
      const int wd = tensor(wn, c, false);
      dq.outputs = {wd};
      dq.fwd.push_back(mem_kernel(name + ".dequant", wn * (0.5 + 2.0), c));
      push(std::move(dq));
      op.inputs.push_back(wd);
      op.bwd.push_back(mem_kernel(name + ".dequant_bwd", wn * (0.5 + 2.0), c));
    } else if (frozen) {
      // A frozen base stored in the compute dtype: autocast has nothing to cast.
    } else if (r_.autocast && !st_.weights_gathered_in_compute_dtype) {
      OpRec wc;
      const int w = tensor(wn, c);
      tape_.tensors[w].hold_until_forward_end = true;
      wc.outputs = {w};
      wc.fwd.push_back(mem_kernel(name + ".w_cast", wn * (dtype_bytes(r_.param) + dtype_bytes(c)), c));
      wc.param = param;
      wc.weight_from = 0;  // casting the weight's gradient back: part of the weight gradient
      wc.bwd.push_back(mem_kernel(name + ".w_cast_bwd", wn * (dtype_bytes(c) + 2 * dtype_bytes(r_.grad)), c));
      push(std::move(wc));
      op.inputs.push_back(w);
      op.saved.push_back(w);
    } else {
      op.param = param;
    }
    const bool col = par == Par::column && tp(), row = par == Par::row && tp();
    const double base_rows = rows_override_ > 0 ? rows_override_ : elems_[xc] / double(in);
    const double out_tokens = row && sp() ? sp_tokens_ : (col ? tokens_ : base_rows);
    const int y = tensor(out_tokens * double(out) * nb, c);
    op.outputs = {y};
    const auto t = static_cast<std::int64_t>(col ? tokens_ : base_rows);
    const double act = dtype_bytes(c);
    if (r_.compute == Dtype::fp8 && !frozen) {
      // Transformer Engine's FP8 linear casts its input to FP8 with its transpose (for the weight
      // gradient) unless a LayerNormLinear made it so in the norm (Megatron's qkv and fc1), and in
      // backward the output's gradient likewise (fp8_cast_transpose): memory-bound passes reading
      // 16 bits and writing 8 twice. (The weights' casts are cached across micro-batches.)
      if (xc != norm_out_) op.fwd.push_back(mem_kernel(name + ".fp8_cast", x_elems * (act + 2.0), Dtype::fp8));
      op.bwd.push_back(mem_kernel(name + ".fp8_cast_bwd", out_tokens * double(out) * nb * (act + 2.0), Dtype::fp8));
    }
    // Transformer Engine's userbuffers (Megatron --tp-comm-overlap, NeMo ub_tp_comm_overlap) hide
    // SP's collectives behind the linear's own GEMMs, as Megatron-Core's TransformerConfig turns
    // them on by default: forward, the all-gather runs chunk by chunk with the column GEMM
    // (tp_comm_overlap_ag) and the row GEMM's output is reduce-scattered in pipelined chunks
    // (tp_comm_overlap_rs); backward, the row layer's gradient all-gather overlaps its dgrad the
    // same way (ub_overlap_ag), the column layer's input re-gather runs in bulk beside its dgrad
    // GEMM (tp_comm_bulk_dgrad) and its dgrad's reduce-scatter beside its wgrad GEMM
    // (tp_comm_bulk_wgrad; tp_comm_overlap_rs_dgrad is off by default). `overlaps` points from the
    // collective to that GEMM.
    const bool ub = sp() && st_.tp_comm_overlap;
    using O = Kernel::Overlap;
    auto overlapped = [ub](Kernel k, int offset, O how) {
      if (ub) {
        k.overlaps = std::int8_t(offset);
        k.overlap = how;
      }
      return k;
    };
    if (col && sp()) {
      op.fwd.push_back(overlapped(comm_kernel(name + "_allgather", CollectiveKind::all_gather, CommGroup::tp, tokens_ * double(in) * act), +1, O::ring_exchange));
      op.fwd_workspace_bytes = tokens_ * double(in) * act;
    }
    op.fwd.push_back(gemm_kernel(name, t, out, in, group_, r_.compute));
    if (row) {
      op.fwd.push_back(overlapped(comm_kernel(name + (sp() ? "_reducescatter" : "_allreduce"),
                                              sp() ? CollectiveKind::reduce_scatter : CollectiveKind::all_reduce, CommGroup::tp,
                                              tokens_ * double(out) * act),
                                  -1, O::pipeline));
      if (sp()) op.fwd_workspace_bytes = tokens_ * double(out) * act;
      if (sp()) {
        // (Its dgrad follows when the input needs a gradient; else nothing to hide it behind.)
        op.bwd.push_back(overlapped(comm_kernel(name + "_grad_allgather", CollectiveKind::all_gather, CommGroup::tp, tokens_ * double(out) * act),
                                    needs_grad(xc) ? +1 : 0, O::ring_exchange));
        op.bwd_workspace_bytes = tokens_ * double(out) * act;
      }
    }
    if (col && sp()) {
      op.bwd.push_back(overlapped(comm_kernel(name + "_regather", CollectiveKind::all_gather, CommGroup::tp, tokens_ * double(in) * act),
                                  needs_grad(xc) ? +1 : 0, O::bulk));
      op.bwd_workspace_bytes = 2 * tokens_ * double(in) * act;
    }
    // Transformer Engine runs FP8's gradient products with the split accumulator (module/base.py:
    // _2X_ACC_DGRAD and _2X_ACC_WGRAD True, _2X_ACC_FPROP False).
    const bool split_acc = r_.compute == Dtype::fp8;
    if (needs_grad(xc)) {
      op.bwd.push_back(gemm_kernel(name + "_dgrad", t, in, out, group_, r_.compute));
      op.bwd.back().gemm.split_accumulate = split_acc;
    }
    if (col && needs_grad(xc))
      op.bwd.push_back(overlapped(comm_kernel(name + (sp() ? "_grad_reducescatter" : "_grad_allreduce"),
                                              sp() ? CollectiveKind::reduce_scatter : CollectiveKind::all_reduce, CommGroup::tp,
                                              tokens_ * double(in) * act),
                                  frozen ? 0 : +1, O::bulk));
    if (!frozen) {
      op.weight_from = int(op.bwd.size());
      op.bwd.push_back(gemm_kernel(name + "_wgrad", out, in, t, group_, r_.compute));
      op.bwd.back().gemm.a_transposed = true;
      op.bwd.back().gemm.split_accumulate = split_acc;
      if (bias) op.bwd.push_back(mem_kernel(name + "_bgrad", out_tokens * double(out) * nb * act, c));
    }
    tape_.tensors[y].requires_grad = !frozen || needs_grad(xc);
    // torchtitan's op policy stores every second aten.mm's output of a block, counted from the
    // first (the experts' grouped GEMMs and FP8's scaled GEMMs are not aten.mm: recomputed).
    if (t_.recompute == Recompute::op && region_ >= 0 && split_ != ParamSplit::expert && r_.compute != Dtype::fp8)
      op.keep_output = ++mm_count_ % 2 == 1;
    push(std::move(op));
    if (t_.lora && lora_target(name)) return lora(name, x, y, in, out);
    return y;
  }

  bool lora_target(const std::string& name) const {
    if (!t_.lora) return false;
    const bool attn = name == "q" || name == "k" || name == "v" || name == "o" || name == "qkv" || name == "proj";
    const bool mlp = name == "gate" || name == "up" || name == "gate_up" || name == "down" || name == "fc1" || name == "fc2";
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

  // A new checkpointed region (see Tape::region_discards).
  int new_region(bool discards) {
    tape_.region_discards.push_back(discards ? 1 : 0);
    return tape_.regions++;
  }
  // Whether a recompute module is on: under selective recompute, and where no region is open (a
  // module inside another module's region is recomputed with it).
  bool module(unsigned m) const { return t_.recompute == Recompute::selective && (t_.recompute_modules & m) && region_ < 0; }
  // f() inside a region of its own when module m is on.
  template <class F>
  int in_module(unsigned m, bool discards, F&& f) {
    if (!module(m)) return f();
    region_ = new_region(discards);
    const int y = f();
    region_ = -1;
    return y;
  }

  // `width`: the normalised dimension (0: hidden; MLA's latents are narrower).
  int norm(const std::string& name, int x, std::int64_t width = 0) {
    const double w = double(width > 0 ? width : m_.hidden);
    const double elems = elems_[x];
    const double rows = elems / w;
    if (r_.fused_kernels || m_.arch == Arch::gpt) {
      // One fused kernel (F.layer_norm, or Apex/TE fused RMSNorm): saves its input and the
      // per-row statistics; under autocast it runs in fp32.
      const Dtype od = r_.autocast ? Dtype::fp32 : dtype_[x];
      const int xin = r_.autocast ? cast(x, Dtype::fp32) : x;
      const int stats = tensor(2 * rows, Dtype::fp32, false);
      const int y = tensor(elems, od);
      OpRec op;
      op.inputs = {xin};
      op.outputs = {y, stats};
      op.saved = {xin, stats};
      op.param = tape_.add_param(w * (m_.arch == Arch::gpt ? 2 : 1), !t_.lora, layer_, ParamSplit::replicated);
      if (!tape_.params[op.param].trainable) op.param = -1;
      op.fwd.push_back(mem_kernel(name, bytes(xin) + bytes(y), od));
      op.fwd.back().reduction = true;
      op.bwd.push_back(mem_kernel(name + "_bwd", bytes(y) + 2 * bytes(xin), od));
      op.bwd.back().reduction = true;
      push(std::move(op));
      norm_out_ = y;
      return y;
    }
    // Llama RMSNorm as Hugging Face writes it, op by op in eager mode:
    // xf = x.float(); n = xf * rsqrt(mean(xf^2) + eps); y = w * n.to(x.dtype)
    const int xf = cast(x, Dtype::fp32);
    const int sq = ew(name + ".pow", {xf}, elems, Dtype::fp32, {xf});
    const int ms = ew(name + ".mean", {sq}, rows, Dtype::fp32);
    const int rs = ew(name + ".rsqrt", {ms}, rows, Dtype::fp32, {}, true, 2);
    // xf * rs and w * n multiply by a broadcast operand (a statistic per row, a weight per
    // column): ATen's strided loop forward. (Backward's two products each, one broadcast and one
    // not, stay one vectorized kernel here.)
    const int n = ew(name + ".mul", {xf, rs}, elems, Dtype::fp32, {xf, rs});
    tape_.ops.back().fwd.front().access = Kernel::Access::strided;
    const int nc = cast(n, dtype_[x]);
    const Dtype od = r_.autocast ? Dtype::fp32 : dtype_[x];
    const int y = ew(name + ".weight", {nc}, elems, od, {nc});
    tape_.ops.back().fwd.front().access = Kernel::Access::strided;
    OpRec& last = tape_.ops.back();
    last.param = tape_.add_param(w, !t_.lora, layer_, ParamSplit::replicated);
    if (!tape_.params[last.param].trainable) last.param = -1;
    norm_out_ = y;
    return y;
  }

  int embed(int tokens) {
    const Dtype d = r_.autocast ? r_.param : r_.residual;
    const double h = double(m_.hidden);
    emb_param_ = tape_.add_param(double(vocab_) * h, !t_.lora);
    const int e = tensor((tp() ? sp_tokens_ : tokens_) * h, d);
    OpRec op;
    op.inputs = {tokens};
    op.outputs = {e};
    op.saved = {tokens};
    op.fwd.push_back(mem_kernel("embedding", tokens_ * h * dtype_bytes(d) * 2, d));
    if (tp()) {
      // Vocabulary-parallel: each rank looks up its slice, the partial rows are summed.
      op.fwd.push_back(comm_kernel("embedding_allreduce", sp() ? CollectiveKind::reduce_scatter : CollectiveKind::all_reduce,
                                   CommGroup::tp, tokens_ * h * dtype_bytes(d)));
      if (sp()) op.fwd_workspace_bytes = tokens_ * h * dtype_bytes(d);
    }
    if (!t_.lora) {
      op.param = emb_param_;
      // Dense embedding backward: zero the vocab x h gradient, then index-add the token rows.
      op.bwd.push_back(mem_kernel("embedding_bwd", double(vocab_) * h * dtype_bytes(r_.grad) + 2 * tokens_ * h * dtype_bytes(d), d));
    }
    push(std::move(op));
    if (m_.arch != Arch::gpt) return e;
    const int pos_param =
        tape_.add_param(double(m_.max_positions > 0 ? m_.max_positions : t_.seq_len) * h, !t_.lora, -1, ParamSplit::replicated);
    const int p = tensor(double(t_.seq_len) / double(st_.cp) / (sp() ? double(st_.tp) : 1.0) * h, d);
    OpRec pop;
    pop.outputs = {p};
    pop.fwd.push_back(mem_kernel("position_embedding", bytes(p) * 2, d));
    if (!t_.lora) {
      pop.param = pos_param;
      pop.bwd.push_back(mem_kernel("position_embedding_bwd", 2 * bytes(e), d));
    }
    push(std::move(pop));
    return ew("embed_add", {e, p}, elems_[e], d);
  }

  int dropout(const std::string& name, int x) {
    if (t_.dropout <= 0) return x;
    const int mask = tensor(elems_[x], Dtype::int8, false);
    OpRec m;
    m.outputs = {mask};
    m.fwd.push_back(mem_kernel(name + ".mask", bytes(mask), Dtype::int8));
    push(std::move(m));
    return ew(name, {x, mask}, elems_[x], dtype_[x], {mask});
  }

  int attention(int q, int k, int v) {
    const double b = double(t_.micro_batch), s = double(t_.seq_len) / double(st_.cp);
    // (Under MLA a query/key head is qk_dim wide and a value head v_dim: the kernel is given
    // their mean, which keeps its FLOPs, 2 s^2 (qk + v) per head.)
    const double heads = double(heads_), hd = double(m_.v_dim());
    const std::int64_t mean_hd = (m_.qk_dim() + m_.v_dim()) / 2;
    const Dtype c = dtype_[q];
    const bool selective = module(kRecomputeCoreAttn);
    const int outer_region = region_;
    if (selective) region_ = new_region(false);
    int o;
    if (t_.attention == AttentionImpl::flash) {
      o = tensor(tokens_ * heads * hd, c);
      const int lse = tensor(b * heads * s, Dtype::fp32, false);
      OpRec op;
      op.inputs = {q, k, v};
      op.outputs = {o, lse};
      op.saved = {q, k, v, o, lse};
      Kernel kf;
      kf.kind = KernelKind::attention_fwd;
      kf.dtype = c;
      kf.attn = AttentionShape{t_.micro_batch, heads_, t_.seq_len / st_.cp, mean_hd, true,
                               st_.cp > 1 ? t_.seq_len : 0};
      kf.name = "flash_fwd";
      Kernel kb = kf;
      kb.kind = KernelKind::attention_bwd;
      kb.name = "flash_bwd";
      if (st_.cp > 1) {
        // Ring attention: every rank's keys and values pass around the context-parallel group
        // (overlapped with the blocks of attention in practice; counted exposed here), and their
        // gradients come back the same way.
        const double kv = tokens_ * double(kv_heads_) * double(m_.qk_dim() + m_.v_dim()) * dtype_bytes(c);
        op.fwd.push_back(comm_kernel("cp_kv_allgather", CollectiveKind::all_gather, CommGroup::cp, kv * double(st_.cp)));
        op.bwd.push_back(comm_kernel("cp_kv_allgather", CollectiveKind::all_gather, CommGroup::cp, kv * double(st_.cp)));
        op.bwd.push_back(comm_kernel("cp_dkv_reducescatter", CollectiveKind::reduce_scatter, CommGroup::cp, kv * double(st_.cp)));
        op.fwd_workspace_bytes = kv * double(st_.cp);
      }
      op.fwd.push_back(kf);
      op.bwd.push_back(kb);
      // (torchtitan's op policy stores flash attention's outputs.)
      op.keep_output = t_.recompute == Recompute::op && region_ >= 0;
      // FlashAttention-2's backward accumulates dQ in fp32 and keeps a row statistic per query.
      op.bwd_workspace_bytes += tokens_ * heads * double(m_.qk_dim()) * 4 + b * heads * s * 4;
      push(std::move(op));
    } else {
      // PyTorch's math path: scores and probabilities materialised per head.
      const double ss = b * heads * s * s;
      const auto bh = static_cast<std::int64_t>(b * heads);
      const auto si = static_cast<std::int64_t>(s);
      const auto hdi = mean_hd;
      const int scores = tensor(ss, c);
      OpRec qk;
      qk.inputs = {q, k};
      qk.outputs = {scores};
      qk.saved = {q, k};
      qk.fwd.push_back(gemm_kernel("qk", si, si, hdi, bh, c));
      qk.bwd.push_back(gemm_kernel("qk_dgrad_q", si, hdi, si, bh, c));
      qk.bwd.push_back(gemm_kernel("qk_dgrad_k", si, hdi, si, bh, c));
      push(std::move(qk));
      int pc;
      if (r_.fused_kernels) {
        // Megatron's FusedScaleMaskSoftmax: one kernel, the probabilities kept in 16 bits.
        pc = ew("scale_mask_softmax", {scores}, ss, c, {}, true);
      } else {
        const int scaled = ew("scale_mask", {scores}, ss, c, {}, false, 2);
        // The second kernel is masked_fill_ with the s x s mask broadcast over batch and heads:
        // ATen's strided loop, forward and backward (grad.masked_fill(mask, 0)).
        for (auto* ks : {&tape_.ops.back().fwd, &tape_.ops.back().bwd})
          if (ks->size() == 2) (*ks)[1].access = Kernel::Access::strided;
        const int sf = cast(scaled, Dtype::fp32);
        const int p = ew("softmax", {sf}, ss, Dtype::fp32, {}, true);
        // ATen's CUDA softmax backward multiplies the gradient by the output in a kernel of its
        // own first (SoftMax.cu, softmax_backward_cuda_out: tmp = grad * output), then reduces.
        if (auto& bwd = tape_.ops.back().bwd; !bwd.empty())
          bwd.insert(bwd.begin(), mem_kernel("softmax_bwd_mul", 3 * bytes(p), Dtype::fp32));
        pc = cast(p, c);
      }
      pc = dropout("attn_dropout", pc);
      const int ob = tensor(tokens_ * heads * hd, c);
      OpRec pv;
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
    // q * cos + rotate_half(q) * sin, eagerly: four kernels, nothing large saved. The two
    // products multiply by a (seq, head_dim) table broadcast over batch and heads (and q is a
    // transposed view): ATen's strided loop, forward and backward.
    auto strided = [this](int out) {
      for (auto* ks : {&tape_.ops.back().fwd, &tape_.ops.back().bwd})
        for (Kernel& k : *ks) k.access = Kernel::Access::strided;
      return out;
    };
    const int a = strided(ew(name + ".rope_cos", {x}, elems_[x], dtype_[x]));
    const int rh = ew(name + ".rotate_half", {x}, elems_[x], dtype_[x], {}, false, 2);
    const int b = strided(ew(name + ".rope_sin", {rh}, elems_[x], dtype_[x]));
    return ew(name + ".rope_add", {a, b}, elems_[x], dtype_[x]);
  }

  int block(int x) {
    const std::int64_t h = m_.hidden, f = ffn_;
    const Dtype rd = dtype_[x];
    const std::int64_t qw = heads_ * m_.hd(), kvw = kv_heads_ * m_.hd();
    if (m_.arch == Arch::gpt) {
      const int n1 = in_module(kRecomputeLayernorm, true, [&] { return norm("ln1", x); });
      const int qkv = linear("qkv", n1, h, qw + 2 * kvw, true, Par::column);
      // q, k and v are views of the fused projection: attention saves the one tensor.
      const int o = attention(qkv, qkv, qkv);
      int pr = linear("proj", o, qw, h, true, Par::row);
      pr = dropout("proj_dropout", pr);
      const int x2 = ew("residual1", {x, pr}, elems_[x], rd);
      const int n2 = in_module(kRecomputeLayernorm, true, [&] { return norm("ln2", x2); });
      int f2 = in_module(kRecomputeMlp, false, [&] {
        const int f1 = linear("fc1", n2, h, f, true, Par::column);
        const int g = r_.fused_kernels ? ew("bias_gelu", {f1}, elems_[f1], dtype_[f1], {f1})
                                       : ew("gelu", {f1}, elems_[f1], dtype_[f1], {f1});
        return linear("fc2", g, f, h, true, Par::row);
      });
      f2 = dropout("mlp_dropout", f2);
      return ew("residual2", {x2, f2}, elems_[x], rd);
    }
    const int n1 = in_module(kRecomputeLayernorm, true, [&] { return norm("norm1", x); });
    int q, k, v;
    if (m_.mla()) {
      mla_qkv(n1, q, k, v);
    } else if (r_.megatron) {
      // Megatron: one fused QKV projection; q, k, v are views of it.
      const int qkv = linear("qkv", n1, h, qw + 2 * kvw, false, Par::column);
      q = rope("q", qkv);
      k = v = q;
    } else {
      // Hugging Face, torchtitan, NeMo AutoModel: q, k and v projected apart (with fused kernels
      // too: those fuse the elementwise ops, not the GEMMs).
      q = linear("q", n1, h, qw, false, Par::column);
      k = linear("k", n1, h, kvw, false, Par::column);
      v = linear("v", n1, h, kvw, false, Par::column);
      q = rope("q", q);
      k = rope("k", k);
      if (kv_heads_ < heads_ && !r_.fused_kernels) {
        // Eager GQA (Hugging Face repeat_kv): k and v expanded to every query head.
        k = ew("k.repeat_kv", {k}, tokens_ * double(qw), dtype_[k]);
        v = ew("v.repeat_kv", {v}, tokens_ * double(qw), dtype_[v]);
      }
    }
    const int o = attention(q, k, v);
    int op = linear("o", o, heads_ * m_.v_dim(), h, false, Par::row);
    op = dropout("o_dropout", op);
    const int x2 = ew("residual1", {x, op}, elems_[x], rd);
    const int n2 = in_module(kRecomputeLayernorm, true, [&] { return norm("norm2", x2); });
    if (m_.moe_layer(layer_)) return in_module(kRecomputeMoe, false, [&] { return moe(x2, n2); });
    int d = in_module(kRecomputeMlp, false, [&] {
      int a;
      if (!m_.gated_mlp()) {
        // A plain MLP (Nemotron-4's squared ReLU, or GELU): one up-projection, its activation
        // saving its input, the down-projection.
        const int f1 = linear("fc1", n2, h, f, false, Par::column);
        const char* act = m_.activation == Activation::squared_relu ? "squared_relu" : "gelu";
        a = ew(act, {f1}, elems_[f1], dtype_[f1], {f1}, false, r_.fused_kernels ? 1 : (m_.activation == Activation::squared_relu ? 2 : 1));
        return linear("fc2", a, f, h, false, Par::row);
      }
      if (r_.megatron) {
        // Megatron's linear_fc1: gate and up as one GEMM.
        const int gu = linear("gate_up", n2, h, 2 * f, false, Par::column);
        a = r_.fused_kernels ? ew("swiglu", {gu}, elems_[gu] / 2, dtype_[gu], {gu})
                             : ew("swiglu_mul", {gu}, elems_[gu] / 2, dtype_[gu], {gu}, false, 3);
      } else {
        const int g = linear("gate", n2, h, f, false, Par::column);
        const int u = linear("up", n2, h, f, false, Par::column);
        if (r_.fused_kernels) {
          a = ew("swiglu", {g, u}, elems_[g], dtype_[g], {g, u});
        } else {
          const int sg = ew("silu", {g}, elems_[g], dtype_[g], {g});
          a = ew("swiglu_mul", {sg, u}, elems_[g], dtype_[g], {sg, u});
        }
      }
      return linear("down", a, f, h, false, Par::row);
    });
    d = dropout("mlp_dropout", d);
    return ew("residual2", {x2, d}, elems_[x], rd);
  }

  // Rows of a token that cross the EP all-to-all: one per expert with the all-to-all dispatcher;
  // with DeepEP one per rank holding any of its experts: under a learned (balanced) router the
  // expected number of the ep ranks (of `local` experts each) that top_k experts drawn uniformly
  // without repeats touch, ep (1 - C(E - local, k) / C(E, k)); under AutoModel's fake balanced
  // gate, an aligned block of k consecutive experts, ceil(k / local) ranks.
  double rows_per_token(std::int64_t local) const {
    const std::int64_t k = m_.top_k, e = m_.experts, ep = std::max<std::int64_t>(1, st_.ep);
    if (t_.moe_dispatcher == MoeDispatcher::alltoall || ep == 1) return double(k);
    if (t_.moe_router == MoeRouter::fake_balanced) return double(std::min(ep, (k + local - 1) / local));
    double none = 1.0;  // P(a given rank holds none of the token's experts)
    for (std::int64_t i = 0; i < k; ++i) none *= e - local - i > 0 ? double(e - local - i) / double(e - i) : 0.0;
    return double(ep) * (1.0 - none);
  }

  // Mixture of experts (Megatron-Core's all-to-all token dispatcher): a router, then each token
  // through top_k experts; each expert's GEMMs see its share of the routed tokens (balanced
  // routing, times the capacity factor). Expert parallelism: experts / ep experts per rank, the
  // routed tokens reaching them by an all-to-all (dispatch) and coming back by another (combine),
  // forward and backward. Under tensor parallelism each expert is split like the dense MLP
  // (column-parallel gate and up, row-parallel down: Megatron's expert tensor-parallel size
  // defaults to the TP size): with sequence parallelism every TP rank routes its s/tp tokens, the
  // dispatched tokens are all-gathered over the TP group and the experts' partial outputs
  // reduce-scattered back (backward: the reverse); without it every TP rank routes the whole
  // sequence, the partial outputs are all-reduced and so is the experts' input gradient.
  int moe(int x2, int n2) {
    const std::int64_t h = m_.hidden, e = m_.experts, local = std::max<std::int64_t>(1, e / st_.ep);
    const std::int64_t f = moe_ffn_;
    const double act = dtype_bytes(dtype_[n2]);
    split_ = ParamSplit::replicated;  // the router: a copy on every TP rank
    const int logits = linear("router", n2, h, e, false);
    split_ = ParamSplit::tensor;
    const int probs = ew("router_softmax", {logits}, elems_[logits], Dtype::fp32, {}, true);
    const double routed = elems_[n2] / double(h) * double(m_.top_k);
    int disp = ew("dispatch", {n2, probs}, routed * double(h), dtype_[n2]);
    // Rows a token puts on the wire: one per expert (the all-to-all dispatcher), or one per
    // destination rank (DeepEP).
    const double wire = elems_[n2] / double(h) * rows_per_token(local);
    if (st_.ep > 1) {
      const double b = wire * double(h) * dtype_bytes(dtype_[disp]);
      tape_.ops.back().fwd.push_back(comm_kernel("moe_dispatch_alltoall", CollectiveKind::all_to_all, CommGroup::ep, b));
      tape_.ops.back().bwd.push_back(comm_kernel("moe_dispatch_alltoall_bwd", CollectiveKind::all_to_all, CommGroup::ep, b));
    }
    double rows = routed;  // tokens (with repeats) this rank's local experts see
    if (sp()) {
      rows *= double(st_.tp);
      disp = tp_comm("moe_tp_allgather", disp, rows * double(h), CollectiveKind::all_gather, CollectiveKind::reduce_scatter,
                     rows * double(h) * act);
    } else if (tp()) {
      tape_.ops.back().bwd.push_back(comm_kernel("moe_grad_allreduce", CollectiveKind::all_reduce, CommGroup::tp, bytes(disp)));
    }
    rows_override_ = rows / double(local) * t_.moe_capacity_factor;
    split_ = ParamSplit::expert;
    int acc = -1;
    // A grouped GEMM runs every local expert in one kernel per projection, into one buffer.
    const std::int64_t n = t_.moe_grouped_gemm ? 1 : local;
    group_ = t_.moe_grouped_gemm ? local : 1;
    for (std::int64_t i = 0; i < n; ++i) {
      const std::string p = t_.moe_grouped_gemm ? std::string("experts.") : "expert" + std::to_string(i) + ".";
      const int g = linear(p + "gate", disp, h, f, false);
      const int u = linear(p + "up", disp, h, f, false);
      const int a = in_module(kRecomputeMoeAct, true, [&] {
        const int sg = ew(p + "silu", {g}, elems_[g], dtype_[g], {g});
        return ew(p + "mul", {sg, u}, elems_[g], dtype_[g], {sg, u});
      });
      const int d = linear(p + "down", a, f, h, false);
      acc = acc < 0 ? d : ew(p + "gather", {acc, d}, elems_[d], dtype_[d]);
    }
    group_ = 1;
    split_ = ParamSplit::tensor;
    rows_override_ = 0;
    if (sp()) {
      acc = tp_comm("moe_tp_reducescatter", acc, routed * double(h), CollectiveKind::reduce_scatter, CollectiveKind::all_gather,
                    rows * double(h) * dtype_bytes(dtype_[acc]));
    } else if (tp()) {
      tape_.ops.back().fwd.push_back(comm_kernel("moe_allreduce", CollectiveKind::all_reduce, CommGroup::tp, bytes(acc)));
    }
    int comb = ew("combine", {acc, probs}, elems_[n2], dtype_[acc], {probs});
    if (st_.ep > 1) {
      const double b = wire * double(h) * dtype_bytes(dtype_[acc]);
      tape_.ops.back().fwd.push_back(comm_kernel("moe_combine_alltoall", CollectiveKind::all_to_all, CommGroup::ep, b));
      tape_.ops.back().bwd.push_back(comm_kernel("moe_combine_alltoall_bwd", CollectiveKind::all_to_all, CommGroup::ep, b));
    }
    if (m_.shared_experts > 0) {
      // Shared experts (DeepSeekMoE): a dense SwiGLU MLP of shared_experts x moe_ffn every token
      // goes through, split over TP like the dense MLP, added to the routed experts' output.
      const std::int64_t sf = f * m_.shared_experts;
      const int d = in_module(kRecomputeSharedExperts, false, [&] {
        const int g = linear("shared.gate", n2, h, sf, false, Par::column);
        const int u = linear("shared.up", n2, h, sf, false, Par::column);
        const int sg = ew("shared.silu", {g}, elems_[g], dtype_[g], {g});
        const int a = ew("shared.mul", {sg, u}, elems_[g], dtype_[g], {sg, u});
        return linear("shared.down", a, sf, h, false, Par::row);
      });
      comb = ew("shared_add", {comb, d}, elems_[comb], dtype_[comb]);
    }
    return ew("residual2", {x2, comb}, elems_[x2], dtype_[x2]);
  }

  // Multi-head latent attention (DeepSeek-V2/V3, Megatron-Core's MLASelfAttention): queries through
  // a down-projection, its norm and a column-parallel up-projection (or one projection), keys and
  // values up from a compressed latent (kv_lora_rank, normed) with a RoPE key shared by the heads.
  // The down-projections are whole on every TP rank (duplicated) and run on this rank's tokens;
  // under sequence parallelism the up-projections gather their (narrow) latent inputs over TP,
  // and the RoPE key is gathered beside them. Each head's query and key: head_dim + qk_rope_dim,
  // its value v_head_dim.
  void mla_qkv(int n1, int& q, int& k, int& v) {
    const std::int64_t h = m_.hidden, ql = m_.q_lora_rank, kvl = m_.kv_lora_rank, rope_d = m_.qk_rope_dim;
    const std::int64_t qk = m_.qk_dim(), nope = m_.hd(), vd = m_.v_dim();
    const ParamSplit outer = split_;
    split_ = ParamSplit::replicated;
    const int qa = ql > 0 ? linear("q_down", n1, h, ql, false) : -1;
    const int kva = linear("kv_down", n1, h, kvl + rope_d, false);
    split_ = outer;
    const double rows = elems_[kva] / double(kvl + rope_d);
    const int qn = ql > 0 ? norm("q_norm", qa, ql) : n1;
    const int kvn = norm("kv_norm", ew("kv_latent.split", {kva}, rows * double(kvl), dtype_[kva]), kvl);
    int kr = ew("k_rope.split", {kva}, rows * double(rope_d), dtype_[kva]);
    if (sp())
      kr = tp_comm("k_rope_allgather", kr, tokens_ * double(rope_d), CollectiveKind::all_gather, CollectiveKind::reduce_scatter,
                   tokens_ * double(rope_d) * dtype_bytes(dtype_[kr]));
    // The up-projections (Megatron's mla_up_proj recompute module: their outputs, the heads' q, k
    // and v, dropped after the attention's forward and made again for its backward).
    const bool up_module = module(kRecomputeMlaUpProj);
    if (up_module) region_ = new_region(true);
    q = ql > 0 ? linear("q_up", qn, ql, heads_ * qk, false, Par::column) : linear("q", n1, h, heads_ * qk, false, Par::column);
    q = rope("q", q);
    const int kvu = linear("kv_up", kvn, kvl, heads_ * (nope + vd), false, Par::column);
    kr = rope("k_rope", kr);
    // The RoPE key broadcast to every head beside its no-RoPE part; the values a view.
    k = ew("k.cat", {kvu, kr}, tokens_ * double(heads_ * qk), dtype_[kvu]);
    v = ew("v.split", {kvu}, tokens_ * double(heads_ * vd), dtype_[kvu]);
    if (up_module) region_ = -1;
  }

  // A collective of the TP group as an op of its own: its output a new tensor of `out_elems`
  // (gathered or scattered), its backward the opposite collective on the gradient. `bytes`: the
  // gathered (whole) buffer, as for every collective kernel.
  int tp_comm(const std::string& name, int x, double out_elems, CollectiveKind fwd, CollectiveKind bwd, double bytes) {
    const int y = tensor(out_elems, dtype_[x]);
    OpRec op;
    op.inputs = {x};
    op.outputs = {y};
    op.fwd.push_back(comm_kernel(name, fwd, CommGroup::tp, bytes));
    if (needs_grad(x)) op.bwd.push_back(comm_kernel(name + "_bwd", bwd, CommGroup::tp, bytes));
    tape_.tensors[y].requires_grad = needs_grad(x);
    push(std::move(op));
    return y;
  }

  void head_and_loss(int x) {
    const int n = norm(m_.arch == Arch::gpt ? "ln_f" : "norm_f", x);
    const double v = double(vocab_);
    const std::int64_t h = m_.hidden;
    int logits;
    if (m_.tied_embeddings && st_.embedding) {
      // The LM head multiplies by the embedding matrix: its gradient accumulates into the same
      // parameter, so no second parameter is counted.
      const int before = int(tape_.params.size());
      logits = linear("lm_head", n, h, vocab_, false, Par::column);
      tape_.params[before].count = 0;
      for (auto& op : tape_.ops)
        if (op.param == before) op.param = emb_param_;
    } else {
      // Untied, or tied across pipeline stages: the last stage holds its own copy of the matrix
      // (Megatron keeps both copies and all-reduces their gradients).
      if (m_.tied_embeddings) split_ = ParamSplit::tied_copy;
      logits = linear("lm_head", n, h, vocab_, false, Par::column);
      split_ = ParamSplit::tensor;
    }
    const bool upcast = t_.upcast_logits && !r_.autocast;
    if ((r_.fused_kernels || tp()) && !upcast) {
      // Megatron's (vocabulary-parallel) cross-entropy: the fp32 softmax is kept for backward,
      // whose gradient is written in place of it; max, sum and target logit are all-reduced.
      const int sm = tensor(tokens_ * v, Dtype::fp32, false);
      const int loss = tensor(1, Dtype::fp32);
      OpRec ce;
      ce.inputs = {logits};
      ce.outputs = {loss, sm};
      ce.saved = {sm};
      ce.fwd.push_back(mem_kernel("cross_entropy", bytes(logits) + 2 * bytes(sm), Dtype::fp32));
      if (tp())
        for (const char* what : {"ce_max_allreduce", "ce_sum_allreduce", "ce_target_allreduce"})
          ce.fwd.push_back(comm_kernel(what, CollectiveKind::all_reduce, CommGroup::tp, tokens_ * 4));
      ce.bwd.push_back(mem_kernel("cross_entropy_bwd", bytes(sm) + bytes(logits), Dtype::fp32));
      push(std::move(ce));
      return;
    }
    // F.cross_entropy = log_softmax + nll_loss. Autocast runs log_softmax with dtype=float32 on
    // the bf16 logits (no separate fp32 copy); its backward writes the bf16 gradient directly
    // (_log_softmax_backward_data's input_dtype). Without autocast some frameworks upcast the
    // logits first (torchtitan's loss: cross_entropy(pred.float(), ...); Hugging Face's
    // ForCausalLMLoss: logits.float()), an fp32 copy the log-softmax reads: upcast_logits. (Over
    // a vocabulary split by TP, torch's loss_parallel: the same ops on each rank's slice, max, sum
    // and target logit all-reduced.)
    if (upcast) logits = cast(logits, Dtype::fp32);
    const Dtype ld = r_.autocast ? Dtype::fp32 : dtype_[logits];
    const int ls = ew("log_softmax", {logits}, tokens_ * v, ld, {}, true);
    if (tp())
      for (const char* what : {"ce_max_allreduce", "ce_sum_allreduce", "ce_target_allreduce"})
        tape_.ops.back().fwd.push_back(comm_kernel(what, CollectiveKind::all_reduce, CommGroup::tp, tokens_ * 4));
    ew("nll_loss", {ls}, 1, Dtype::fp32);
    // nll_loss gathers one log-probability a row (nll_loss_forward_reduce_cuda_kernel_2d), not the
    // whole row; its backward writes the whole gradient (zeros, then -1/N at each target).
    for (Kernel& k : tape_.ops.back().fwd) k.bytes = tokens_ * dtype_bytes(dtype_[ls]) + 4;
  }

  // ---- repeating a block -------------------------------------------------------------------------
  struct Mark {
    std::size_t tensors, params, ops;
    int regions;
  };
  Mark mark() const { return {tape_.tensors.size(), tape_.params.size(), tape_.ops.size(), tape_.regions}; }
  struct Repeat {
    bool ready = false;
    Mark from, to;  // the template block's tensors, parameters, ops and regions: [from, to)
    int in = -1, out = -1;
  };

  bool same_tensor(int a, int b) const {
    const TensorRec &x = tape_.tensors[std::size_t(a)], &y = tape_.tensors[std::size_t(b)];
    return x.bytes == y.bytes && x.category == y.category && x.requires_grad == y.requires_grad &&
           x.hold_until_forward_end == y.hold_until_forward_end && dtype_[std::size_t(a)] == dtype_[std::size_t(b)] &&
           elems_[std::size_t(a)] == elems_[std::size_t(b)];
  }

  // The block just built over [from, mark()) from input `in` to output `out` is a template when its
  // output is like its input (so the next block sees the same) and it reads nothing made before it
  // but its input (nothing of the block before).
  bool learn_repeat(Mark from, int in, int out) {
    const Mark to = mark();
    if (!same_tensor(in, out) || tape_.input == out) return false;
    for (std::size_t i = from.ops; i < to.ops; ++i) {
      const OpRec& op = tape_.ops[i];
      for (const SmallVec<int, 4>* ts : {&op.inputs, &op.outputs, &op.saved})
        for (int t : *ts)
          if (t != in && std::size_t(t) < from.tensors) return false;
      if (op.param >= 0 && std::size_t(op.param) < from.params) return false;
    }
    repeat_ = Repeat{true, from, to, in, out};
    return true;
  }

  // The template block again, on input `x`, for layer layer_.
  int repeat_block(int x) {
    const Repeat& rp = repeat_;
    const Mark now = mark();
    const int dt = int(now.tensors - rp.from.tensors), dp = int(now.params - rp.from.params),
              dop = int(now.ops - rp.from.ops), dr = now.regions - rp.from.regions;
    auto tensor_of = [&](int t) { return t == rp.in ? x : t + dt; };
    for (std::size_t t = rp.from.tensors; t < rp.to.tensors; ++t) {
      TensorRec rec = tape_.tensors[t];
      if (rec.producer >= 0) rec.producer += dop;
      tape_.tensors.push_back(rec);
      dtype_.push_back(dtype_[t]);
      elems_.push_back(elems_[t]);
    }
    for (std::size_t p = rp.from.params; p < rp.to.params; ++p) {
      ParamRec rec = tape_.params[p];
      rec.layer = layer_;
      tape_.params.push_back(rec);
    }
    for (std::size_t i = rp.from.ops; i < rp.to.ops; ++i) {
      OpRec op = tape_.ops[i];
      op.layer = layer_;
      if (op.region >= 0) op.region += dr;
      for (SmallVec<int, 4>* ts : {&op.inputs, &op.outputs, &op.saved})
        for (int& t : *ts) t = tensor_of(t);
      if (op.param >= 0) op.param += dp;
      tape_.ops.push_back(std::move(op));
      tape_.copy_of.push_back(int(i));
    }
    for (int rg = rp.from.regions; rg < rp.to.regions; ++rg) tape_.region_discards.push_back(tape_.region_discards[std::size_t(rg)]);
    tape_.regions += rp.to.regions - rp.from.regions;
    return tensor_of(rp.out);
  }

  const TransformerSpec& m_;
  TrainingSpec t_;
  const PrecisionRecipe& r_ = t_.precision;
  StageSpec st_;
  double tokens_;     // tokens of this rank's sequence slice (micro_batch * seq / cp)
  double sp_tokens_;  // tokens in the sequence-parallel regions (tokens_ / tp with SP)
  std::int64_t heads_, kv_heads_, ffn_, moe_ffn_, vocab_;  // this rank's share under tensor parallelism
  double rows_override_ = 0;  // tokens an expert's linears see (MoE)
  std::int64_t group_ = 1;    // experts a linear stands for (a grouped GEMM)
  int norm_out_ = -1;         // the last norm's output (an FP8 LayerNormLinear casts it there)
  ParamSplit split_ = ParamSplit::tensor;  // how the next linear's weight is split (MoE: router, experts)
  Tape tape_;
  std::vector<Dtype> dtype_;
  std::vector<double> elems_;
  int layer_ = -1;
  int region_ = -1;
  int mm_count_ = 0;  // aten.mm calls in this block so far (torchtitan's op policy)
  int emb_param_ = -1;
  bool lora_depth_ = false;
  bool repeat_layers_ = true;
  Repeat repeat_;
};

}  // namespace

Tape build_step_tape(const TransformerSpec& model, const TrainingSpec& training, StageSpec stage, bool repeat_layers) {
  return Builder(model, training, stage, repeat_layers).run();
}

}  // namespace scaleout
