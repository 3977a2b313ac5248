#include "sim/training/planner.hpp"

#include <algorithm>
#include <cmath>

#include "sim/engine/check.hpp"

namespace scaleout {

ChunkPlanner::ChunkPlanner(const Tape& tape, const TrainingSpec& training, ShardPlan shard, std::shared_ptr<Book> book, bool memory,
                           bool grads_done)
    : tape_(tape), tr_(training), shard_(shard), memory_(memory), grads_done_(memory || grads_done),
      book_(book ? std::move(book) : std::make_shared<Book>()) {
  for (const ParamRec& p : tape_.params) {
    (p.trainable ? trainable_ : frozen_) += p.count;
    if (p.split == ParamSplit::expert) (p.trainable ? expert_trainable_ : expert_frozen_) += p.count;
  }
  first_op_of_region_.assign(tape_.regions, -1);
  ops_of_region_.assign(tape_.regions, {});
  for (std::size_t i = 0; i < tape_.ops.size(); ++i) {
    const int rg = tape_.ops[i].region;
    if (rg >= 0 && first_op_of_region_[rg] < 0) first_op_of_region_[rg] = int(i);
    if (rg >= 0) ops_of_region_[rg].push_back(int(i));
  }
  // Discarding regions' outputs that something outside keeps for backward.
  discarded_.assign(tape_.tensors.size(), false);
  outside_saves_.assign(tape_.tensors.size(), 0);
  auto discards = [&](int rg) { return rg >= 0 && std::size_t(rg) < tape_.region_discards.size() && tape_.region_discards[std::size_t(rg)]; };
  std::vector<std::vector<int>> region_keeps(std::size_t(tape_.regions));
  for (const OpRec& op : tape_.ops) {
    if (op.region < 0) {
      for (int t : op.saved)
        if (discards(region_of(t))) {
          discarded_[t] = true;
          ++outside_saves_[t];
        }
    } else {
      auto& keep = region_keeps[std::size_t(op.region)];
      for (int t : op.inputs)
        if (region_input(op, t) && discards(region_of(t)) && std::find(keep.begin(), keep.end(), t) == keep.end()) {
          keep.push_back(t);
          discarded_[t] = true;
          ++outside_saves_[t];
        }
    }
  }
  param_grad_alive_.assign((tape_.params.size() + 63) / 64, 0);
  if (shard_.persistent_grads)
    for (std::size_t i = 0; i < tape_.params.size(); ++i) set_grad_alive(int(i));
  for (const ParamRec& p : tape_.params) {
    layer_params_[p.layer] += p.count;
    if (p.split == ParamSplit::expert) layer_expert_params_[p.layer] += p.count;
  }
  // Tensors a W pass needs (what the ops with a separate weight gradient saved), and the first op
  // (in tape order; the last in backward order) that needs each.
  weight_needs_.assign(tape_.tensors.size(), false);
  last_weight_op_.assign(tape_.tensors.size(), -1);
  for (std::size_t i = tape_.ops.size(); i-- > 0;)
    if (tape_.ops[i].weight_from >= 0)
      for (int t : tape_.ops[i].saved) {
        weight_needs_[t] = true;
        last_weight_op_[t] = int(i);
      }
}

ChunkPlanner::Pass ChunkPlanner::forward_pass(int mb) {
  if (!book_->fwd) {
    book_->fwd = std::make_shared<const std::vector<PlanItem>>(forward(mb));
    book_->fwd_state = mbs_.at(mb);
    return book_->fwd;
  }
  SCALEOUT_CHECK(!mbs_.count(mb) && !templated_.count(mb), "forward of a micro-batch already in flight");
  templated_[mb] = true;
  return book_->fwd;
}

ChunkPlanner::Pass ChunkPlanner::backward_pass(int mb, bool last_micro_batch, Pass* weight) {
  static const std::vector<std::uint64_t> any_grads;
  const bool last = grads_done_ && last_micro_batch;  // (as a key: the plan itself is made as asked)
  const std::tuple<bool, bool, const std::vector<std::uint64_t>&> key{last, weight != nullptr, memory_ ? param_grad_alive_ : any_grads};
  const auto tmpl = templated_.find(mb);
  const auto found = book_->bwd.find(key);
  if (found != book_->bwd.end()) {
    SCALEOUT_CHECK(tmpl != templated_.end() || mbs_.count(mb), "backward of a micro-batch that had no forward");
    if (tmpl != templated_.end()) templated_.erase(tmpl);
    else mbs_.erase(mb);
    param_grad_alive_ = found->second.grads_after;
    if (weight) *weight = found->second.weight;
    return found->second.items;
  }
  if (tmpl != templated_.end()) {
    SCALEOUT_CHECK(bool(book_->fwd), "a templated micro-batch without the book's forward");
    mbs_[mb] = book_->fwd_state;
    templated_.erase(tmpl);
  }
  std::vector<std::uint64_t> key_grads = memory_ ? param_grad_alive_ : any_grads;  // (backward changes them)
  std::vector<PlanItem> w;
  Pass items = std::make_shared<const std::vector<PlanItem>>(backward(mb, last_micro_batch, weight ? &w : nullptr));
  Pass wp = weight ? std::make_shared<const std::vector<PlanItem>>(std::move(w)) : nullptr;
  book_->bwd.emplace(std::make_tuple(last, weight != nullptr, std::move(key_grads)), Book::Bwd{items, wp, param_grad_alive_});
  if (weight) *weight = wp;
  return items;
}

PlanItem ChunkPlanner::persistent() const {
  const PrecisionRecipe& r = tr_.precision;
  PlanItem init;
  const double frozen_bytes = tr_.lora && tr_.lora->nf4_base
                                  ? 0.5 + 0.5 / 64.0 + 4.0 / (64.0 * 256.0)
                                  : dtype_bytes(r.compute == Dtype::fp8 ? Dtype::bf16 : r.compute);
  init.allocs.push_back({MemCategory::params, share(true, shard_.params, shard_.expert_params) * dtype_bytes(r.param) +
                                                 share(false, shard_.params, shard_.expert_params) * frozen_bytes});
  init.allocs.push_back({MemCategory::optimizer, share(true, shard_.optimizer, shard_.expert_optimizer) *
                                                    (optimizer_state_bytes(tr_.optimizer, r.state) + (r.master_copy ? r.master_bytes : 0.0))});
  if (shard_.persistent_grads)
    init.allocs.push_back({MemCategory::grads, share(true, shard_.grads, shard_.expert_grads) * dtype_bytes(r.grad)});
  // Inputs produced before the step (token ids) are alive from the start.
  std::vector<bool> seen(tape_.tensors.size(), false);
  for (const OpRec& op : tape_.ops)
    for (int t : op.inputs)
      if (tape_.tensors[t].producer < 0 && t != tape_.input && !seen[t]) {
        seen[t] = true;
        init.allocs.push_back({tcat(t), tbytes(t)});
      }
  return init;
}

void ChunkPlanner::alloc(MbState& st, PlanItem& it, int t) const {
  if (st.alive[t]) return;
  st.alive[t] = true;
  it.allocs.push_back({tcat(t), tbytes(t)});
}

void ChunkPlanner::maybe_free(MbState& st, PlanItem& it, int t) const {
  if (!st.alive[t] || st.uses[t] > 0 || st.saved[t] > 0 || st.held[t]) return;
  // Token ids stay (the data loader's batch); only tensors made in the step are freed.
  if (tape_.tensors[t].producer < 0 && t != tape_.input) return;
  st.alive[t] = false;
  it.frees.push_back({tcat(t), tbytes(t)});
}

bool ChunkPlanner::region_input(const OpRec& op, int t) const {
  const int p = tape_.tensors[t].producer;
  return p < 0 || tape_.ops[p].region != op.region;
}

// One op of a forward pass or of a recompute replay: outputs allocated, inputs used up, saved
// tensors counted (in a first forward, a checkpointed region keeps only its inputs, as
// non-reentrant torch.utils.checkpoint does), and what nothing needs any more freed. `replay_held`
// collects autocast's cached weight casts made during a replay.
PlanItem ChunkPlanner::run_forward_op(MbState& st, const OpRec& op, Phase phase, std::vector<int>* replay_held) const {
  PlanItem it;
  it.phase = phase;
  it.tape_kernels = op.fwd;
  it.from_tape = true;
  it.layer = op.layer;
  if (op.fwd_workspace_bytes > 0) {
    it.allocs.push_back({MemCategory::other, op.fwd_workspace_bytes});
    it.frees.push_back({MemCategory::other, op.fwd_workspace_bytes});
  }
  for (int t : op.outputs) {
    alloc(st, it, t);
    if (tape_.tensors[t].hold_until_forward_end) {
      st.held[t] = true;
      if (replay_held) replay_held->push_back(t);
    }
  }
  for (int t : op.inputs) --st.uses[t];
  // (A discarding region's output is not kept by what saves it outside the region: its recompute
  // counts those back in, ensure().)
  if (replay_held || op.region < 0) {
    for (int t : op.saved)
      if (replay_held || !discarded_[t]) ++st.saved[t];
  } else {
    auto& keep = st.region_inputs[op.region];
    for (int t : op.inputs)
      if (region_input(op, t) && std::find(keep.begin(), keep.end(), t) == keep.end()) {
        keep.push_back(t);
        if (!discarded_[t]) ++st.saved[t];
      }
    // What the selective checkpoint's policy stores stays with the region's inputs.
    if (op.keep_output)
      for (int t : op.outputs) {
        keep.push_back(t);
        ++st.saved[t];
      }
  }
  // The stage output is sent on; the planner releases it when the pass ends.
  for (int t : op.inputs) maybe_free(st, it, t);
  for (int t : op.outputs)
    if (replay_held || t != tape_.output) maybe_free(st, it, t);
  return it;
}

std::vector<PlanItem> ChunkPlanner::forward(int mb) {
  SCALEOUT_CHECK(!mbs_.count(mb), "forward of a micro-batch already in flight");
  MbState& st = mbs_[mb];
  const std::size_t nt = tape_.tensors.size();
  st.alive.assign(nt, false);
  st.held.assign(nt, false);
  st.grad_alive.assign(nt, false);
  st.uses.assign(nt, 0);
  st.saved.assign(nt, 0);
  st.replayed.assign(tape_.regions, false);
  st.region_inputs.assign(tape_.regions, {});
  for (const OpRec& op : tape_.ops)
    for (int t : op.inputs) ++st.uses[t];
  for (std::size_t t = 0; t < nt; ++t)
    if (tape_.tensors[t].producer < 0 && int(t) != tape_.input) st.alive[t] = true;
  std::vector<PlanItem> out;
  out.reserve(tape_.ops.size() + 2);
  if (tape_.input >= 0) {
    // The activation received from the previous stage.
    PlanItem recv;
    alloc(st, recv, tape_.input);
    out.push_back(std::move(recv));
  }
  for (const OpRec& op : tape_.ops) out.push_back(run_forward_op(st, op, Phase::forward, nullptr));
  // Leaving autocast drops its cache of weight casts; the sent output is released.
  PlanItem end;
  end.phase = Phase::forward;
  for (std::size_t t = 0; t < nt; ++t)
    if (st.held[t]) {
      st.held[t] = false;
      maybe_free(st, end, int(t));
    }
  if (tape_.output >= 0) maybe_free(st, end, tape_.output);
  out.push_back(std::move(end));
  return out;
}

void ChunkPlanner::ensure(MbState& st, int t, std::vector<PlanItem>& out) const {
  if (!discarded_[t]) return;
  const int rg = region_of(t);
  if (st.replayed[rg]) return;
  st.replayed[rg] = true;
  // Every output of the region kept outside it, kept again (before the replay makes them, so
  // that it does not free them).
  for (int i : ops_of_region_[rg])
    for (int o : tape_.ops[i].outputs)
      if (discarded_[o]) st.saved[o] += outside_saves_[o];
  replay(st, rg, out);
}

void ChunkPlanner::replay(MbState& st, int region, std::vector<PlanItem>& out) const {
  const std::vector<int>& ops = ops_of_region_[region];
  for (int i : ops)
    for (int t : tape_.ops[i].inputs)
      if (region_input(tape_.ops[i], t)) ensure(st, t, out);
  // An op whose outputs the forward stored is not run again (nor are its inputs used up), but its
  // backward still needs what it saves, which the replay makes: counted before the replay starts.
  for (int i : ops) {
    const OpRec& op = tape_.ops[i];
    if (op.keep_output) {
      for (int t : op.saved) ++st.saved[t];
    } else {
      for (int t : op.inputs) ++st.uses[t];
    }
  }
  std::vector<int> held;
  for (int i : ops)
    if (!tape_.ops[i].keep_output) out.push_back(run_forward_op(st, tape_.ops[i], Phase::recompute, &held));
  for (int t : held) {
    st.held[t] = false;
    maybe_free(st, out.back(), t);
  }
}

std::vector<PlanItem> ChunkPlanner::backward(int mb, bool last_micro_batch, std::vector<PlanItem>* weight) {
  auto found = mbs_.find(mb);
  SCALEOUT_CHECK(found != mbs_.end(), "backward of a micro-batch that had no forward");
  MbState& st = found->second;
  std::vector<PlanItem> out;
  out.reserve(2 * tape_.ops.size() + 2);  // with replays
  const PrecisionRecipe& r = tr_.precision;
  if (tape_.output >= 0) {
    // The gradient of the stage output, received from the next stage.
    PlanItem recv;
    st.grad_alive[tape_.output] = true;
    recv.allocs.push_back({MemCategory::activations, tbytes(tape_.output)});
    out.push_back(std::move(recv));
  }
  // Split (zero-bubble): what only the parameters' gradients need (a linear layer's input, the
  // gradient of its output) stays until the W pass, which frees it.
  const bool split = weight != nullptr;
  std::vector<PlanItem> w_items;
  std::vector<int> w_ops;
  auto release = [&](PlanItem& item, int t) {
    if (split && weight_needs_[t]) return;
    maybe_free(st, item, t);
  };
  for (int i = int(tape_.ops.size()) - 1; i >= 0; --i) {
    const OpRec& op = tape_.ops[i];
    for (int t : op.saved) ensure(st, t, out);
    if (op.region >= 0 && !st.replayed[op.region]) {
      st.replayed[op.region] = true;
      replay(st, op.region, out);
    }
    PlanItem it;
    it.phase = Phase::backward;
    it.tape_kernels = op.bwd;
    it.from_tape = true;
    it.layer = op.layer;
    const bool has_w = split && op.weight_from >= 0;
    PlanItem w;
    if (has_w) {
      it.tape_kernels = std::span<const Kernel>(op.bwd).first(std::size_t(op.weight_from));
      w.phase = Phase::backward;
      w.tape_kernels = std::span<const Kernel>(op.bwd).subspan(std::size_t(op.weight_from));
      w.from_tape = true;
      w.layer = op.layer;
    }
    PlanItem& g = has_w ? w : it;  // where the parameter's gradient is made
    for (int t : op.inputs)
      if (tape_.tensors[t].requires_grad && !st.grad_alive[t]) {
        st.grad_alive[t] = true;
        it.allocs.push_back({MemCategory::activations, tbytes(t)});
      }
    if (op.param >= 0 && tape_.params[op.param].count > 0) {
      const double full = tape_.params[op.param].count * dtype_bytes(r.grad);
      const double shards = grad_shards(op.param);
      if (shards > 1 && !shard_.persistent_grads) {
        // Sharded gradients (ZeRO-2/3, FSDP without no_sync): every micro-batch's full gradient
        // lives until it is reduce-scattered; the shard stays and accumulates.
        g.allocs.push_back({MemCategory::grads, grad_alive(op.param) ? full - full / shards : full});
        g.frees.push_back({MemCategory::grads, full - full / shards});
        set_grad_alive(op.param);
        g.grads_done.push_back(op.param);
      } else {
        if (!grad_alive(op.param)) {
          set_grad_alive(op.param);
          g.allocs.push_back({MemCategory::grads, full});
        }
        if (last_micro_batch) g.grads_done.push_back(op.param);
      }
    }
    if (op.bwd_workspace_bytes > 0) {
      it.allocs.push_back({MemCategory::other, op.bwd_workspace_bytes});
      it.frees.push_back({MemCategory::other, op.bwd_workspace_bytes});
    }
    for (int t : op.outputs)
      if (st.grad_alive[t]) {
        st.grad_alive[t] = false;
        g.frees.push_back({MemCategory::activations, tbytes(t)});  // the W pass needs it too
      }
    // torch.utils.checkpoint (non-reentrant) keeps what the replay recomputed in its frame until
    // the whole region's backward is done; other saved tensors go as their node finishes, and so
    // do recomputed ones under Megatron's reentrant checkpoint (an inner backward per region).
    const bool defer = op.region >= 0 && !tr_.precision.megatron;
    if (!defer) {
      for (int t : op.saved) {
        --st.saved[t];
        release(it, t);
      }
    }
    for (int t : op.outputs) release(it, t);
    if (op.region >= 0 && first_op_of_region_[op.region] == i) {
      for (std::size_t j = std::size_t(i); defer && j < tape_.ops.size() && tape_.ops[j].region == op.region; ++j)
        for (int t : tape_.ops[j].saved) {
          --st.saved[t];
          release(it, t);
        }
      for (int t : st.region_inputs[op.region]) {
        --st.saved[t];
        release(it, t);
      }
    }
    out.push_back(std::move(it));
    if (has_w) {
      w_items.push_back(std::move(w));
      w_ops.push_back(i);
    }
  }
  if (split) {
    // The W pass, in the same (backward) order: each needed tensor goes with the last W op that
    // needs it.
    for (std::size_t j = 0; j < w_items.size(); ++j)
      for (int t : tape_.ops[std::size_t(w_ops[j])].saved)
        if (weight_needs_[t] && last_weight_op_[t] == w_ops[j]) maybe_free(st, w_items[j], t);
  }
  // Leftover gradients (the one sent to the previous stage goes with its send) and tensors.
  PlanItem end;
  end.phase = Phase::backward;
  for (std::size_t t = 0; t < st.grad_alive.size(); ++t)
    if (st.grad_alive[t]) end.frees.push_back({MemCategory::activations, tbytes(int(t))});
  for (std::size_t t = 0; t < st.alive.size(); ++t)
    if (st.alive[t] && (tape_.tensors[t].producer >= 0 || int(t) == tape_.input))
      end.frees.push_back({tcat(int(t)), tbytes(int(t))});
  if (split && !w_items.empty()) {
    // What is left goes when the W pass ends.
    auto& f = w_items.back().frees;
    f.append(end.frees.begin(), end.frees.end());
    *weight = std::move(w_items);
  } else {
    out.push_back(std::move(end));
    if (split) weight->clear();
  }
  mbs_.erase(found);
  return out;
}

// The optimizer as PyTorch runs it: foreach kernels, one pass over the parameters per
// elementwise op (torch/optim/adamw.py _multi_tensor_adamw), or one fused pass.
std::vector<PlanItem> ChunkPlanner::optimizer() const {
  const PrecisionRecipe& r = tr_.precision;
  const double n = share(true, shard_.optimizer, shard_.expert_optimizer);
  const double p = dtype_bytes(r.master_copy ? Dtype::fp32 : r.param);
  const double g = dtype_bytes(r.grad), s = dtype_bytes(r.state);
  std::vector<double> passes;  // bytes per parameter of each pass
  double temp = 0;             // bytes per parameter of a temporary the passes need
  const bool fused = tr_.optimizer_impl == OptimizerImpl::fused || r.megatron;
  switch (tr_.optimizer) {
    case Optimizer::adamw:
      if (fused) {
        passes = {2 * p + g + 4 * s};
      } else {
        // decay p; lerp m; mul v; addcmul v; sqrt -> tmp; div tmp; add eps; addcdiv p
        passes = {2 * p, 2 * s + g, 2 * s, 2 * s + g, 2 * s, 2 * s, 2 * s, 2 * p + 2 * s};
        temp = s;
      }
      break;
    case Optimizer::sgd:
      passes = fused ? std::vector<double>{2 * p + g + 2 * s} : std::vector<double>{2 * s, 2 * s + g, 2 * p + s};
      break;
    case Optimizer::adafactor:
      passes = {2 * g, 2 * g, 2 * p + g + s, 2 * p};
      temp = g;
      break;
    case Optimizer::adamw_8bit:
      passes = {2 * p + g + 4.0 * 1.0};
      break;
  }
  // Copy the master to the params and zero the grads; where the master is the params' remainder
  // the step wrote both halves in place: the grads only.
  if (r.master_copy) passes.push_back(r.master_bytes >= 4.0 ? 4.0 + dtype_bytes(r.param) + g : g);
  PlanItem it;
  it.phase = Phase::optimizer;
  if (temp > 0) {
    it.allocs.push_back({MemCategory::other, temp * n});
    it.frees.push_back({MemCategory::other, temp * n});
  }
  // multi_tensor_apply launches a kernel per 110 tensors or per 320 blocks of 65536 elements,
  // whichever fills first (ATen's MultiTensorApply.cuh depth limits).
  const double per_launch = 320.0 * 65536.0;
  double tensors = 0;
  for (const ParamRec& pr : tape_.params)
    if (pr.trainable && pr.count > 0) ++tensors;
  it.host_prologue_tensors = tensors;
  // torch's foreach passes, and its fused optimizers' one pass (multi_tensor_apply_for_fused_
  // optimizer, the same launcher), stream at their element width's efficiency (the states'
  // dtype: every list a pass reads and writes is as wide, or the params' where they are wider).
  // Measured on an H100 (validation/single_gpu/results-h100-kernels-2026-12-07): the fused AdamW
  // step at 0.66 / 0.77 of HBM bandwidth over bf16 / fp32 lists, the foreach one at 0.71 / 0.79,
  // a plain tensor op at 0.89. Megatron's (Apex or Transformer Engine) FusedAdam is unmeasured.
  const bool multi_tensor = !r.megatron && tr_.optimizer != Optimizer::adamw_8bit;
  const Dtype width = s >= p ? r.state : (r.master_copy ? Dtype::fp32 : r.param);
  for (double bytes_per_param : passes) {
    const double launches = std::max({1.0, std::ceil(n / per_launch), std::ceil(tensors / 110.0)});
    Kernel k;
    k.kind = KernelKind::memory;
    k.bytes = bytes_per_param * n / launches;
    k.name = "optimizer";
    k.launches = std::int32_t(launches);
    k.multi_tensor = multi_tensor;
    k.dtype = width;
    it.own.push_back(std::move(k));
  }
  return {it};
}

PlanItem ChunkPlanner::release_grads() const {
  PlanItem z;
  z.phase = Phase::optimizer;
  if (shard_.persistent_grads) return z;
  const double g = dtype_bytes(tr_.precision.grad);
  for (std::size_t i = 0; i < tape_.params.size(); ++i)
    if (grad_alive(int(i))) z.frees.push_back({MemCategory::grads, tape_.params[i].count * g / grad_shards(int(i))});
  return z;
}

}  // namespace scaleout
