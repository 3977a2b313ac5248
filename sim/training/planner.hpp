#pragma once
// Turns a tape into the ordered plan of a rank's work: the forward and backward of each
// micro-batch (with recompute replays) and the optimizer step, with every allocation and free
// as autograd makes them. Several micro-batches may be in flight at once (pipeline schedules):
// each has its own tensor state; parameters and their gradients are shared.
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <tuple>
#include <vector>

#include "models/tape.hpp"
#include "models/training.hpp"
#include "sim/engine/small_vec.hpp"

namespace scaleout {

enum class Phase : std::uint8_t { forward, backward, recompute, optimizer };

struct MemOp {
  MemCategory category;
  double bytes;
};

struct PlanItem {
  Phase phase = Phase::forward;
  // The op's kernels, in the tape (which outlives the plan: no copy per micro-batch), or made
  // for this item (`own`: the optimizer's).
  std::span<const Kernel> tape_kernels;
  bool from_tape = false;
  std::vector<Kernel> own;
  std::span<const Kernel> kernels() const { return from_tape ? tape_kernels : std::span<const Kernel>(own); }
  SmallVec<MemOp, 4> allocs, frees;
  double host_prologue_tensors = 0;  // optimizer: per-tensor Python work before the first launch
  int layer = -1;                    // the layer of the op (-1: embedding, head, bookkeeping)
  SmallVec<int, 2> grads_done;       // parameters whose gradient is final after this item
};

// How the data-parallel group shares state (ZeRO / FSDP): persistent bytes are divided by these.
// Experts' state is shared by the expert data-parallel group only (the GPUs holding the same
// experts: dp / ep of them), so it divides by the `expert_` factors.
struct ShardPlan {
  double params = 1, grads = 1, optimizer = 1;
  double expert_params = 1, expert_grads = 1, expert_optimizer = 1;
  bool persistent_grads = false;  // Megatron's contiguous main-grad buffer
};

class ChunkPlanner {
 public:
  // Plans shared by planners of the same tape, training and sharding (every rank of a stage):
  // what one planned, the others hand out again.
  struct Book;
  // `memory` false: nobody reads the items' allocations and frees (a step without memory
  // accounting), so a backward plan is handed out again whatever the gradients' state (which only
  // they depend on). `grads_done` false as well: nobody reads which gradients an item finished (no
  // data-parallel reduction), so the last micro-batch's backward is any other's.
  ChunkPlanner(const Tape& tape, const TrainingSpec& training, ShardPlan shard, std::shared_ptr<Book> book = nullptr,
               bool memory = true, bool grads_done = true);

  PlanItem persistent() const;
  // A pass's items, shared: every micro-batch's forward is the same plan (a fresh tensor state
  // over the same tape), and a backward's depends only on that state, on which parameters already
  // have a gradient, on whether it is the last micro-batch and on the zero-bubble split; each is
  // planned once per Book and handed out again (`forward_pass`, `backward_pass`).
  using Pass = std::shared_ptr<const std::vector<PlanItem>>;
  Pass forward_pass(int mb);
  Pass backward_pass(int mb, bool last_micro_batch, Pass* weight = nullptr);

  std::vector<PlanItem> forward(int mb);
  // With `weight`: the backward pass without the parameters' gradients (B), those going to
  // `weight` as the W pass (zero-bubble schedules), which then runs after the whole B pass.
  std::vector<PlanItem> backward(int mb, bool last_micro_batch, std::vector<PlanItem>* weight = nullptr);
  std::vector<PlanItem> optimizer() const;
  PlanItem release_grads() const;  // zero_grad(set_to_none=True)

  double trainable_params() const { return trainable_; }
  double expert_trainable_params() const { return expert_trainable_; }  // of trainable_params()
  double frozen_params() const { return frozen_; }
  double layer_params(int layer) const {
    const auto it = layer_params_.find(layer);
    return it == layer_params_.end() ? 0.0 : it->second;
  }
  double layer_expert_params(int layer) const {  // of layer_params(layer)
    const auto it = layer_expert_params_.find(layer);
    return it == layer_expert_params_.end() ? 0.0 : it->second;
  }

 private:
  struct MbState {
    std::vector<bool> alive, held, grad_alive, replayed;
    std::vector<int> uses, saved;
    std::vector<std::vector<int>> region_inputs;
  };
  double tbytes(int t) const { return tape_.tensors[t].bytes; }
  MemCategory tcat(int t) const { return tape_.tensors[t].category; }
  void alloc(MbState& st, PlanItem& it, int t) const;
  void maybe_free(MbState& st, PlanItem& it, int t) const;
  bool region_input(const OpRec& op, int t) const;
  void replay(MbState& st, int region, std::vector<PlanItem>& out) const;
  // Recomputes the region that made t, where t is dropped after the forward (a discarding
  // region's output) and not made again yet: before a backward or a replay that needs it.
  void ensure(MbState& st, int t, std::vector<PlanItem>& out) const;
  int region_of(int t) const {
    const int p = tape_.tensors[t].producer;
    return p < 0 ? -1 : tape_.ops[p].region;
  }
  PlanItem run_forward_op(MbState& st, const OpRec& op, Phase phase, std::vector<int>* replay_held) const;

  const Tape& tape_;
  const TrainingSpec& tr_;
  ShardPlan shard_;
  bool memory_ = true, grads_done_ = true;
  double trainable_ = 0, frozen_ = 0;
  double expert_trainable_ = 0, expert_frozen_ = 0;  // the experts' part of each
  // A GPU's share of per-parameter state of the trainable (or frozen) parameters, the dense
  // ones divided by `dense`, the experts' by `expert`.
  double share(bool trainable, double dense, double expert) const {
    const double all = trainable ? trainable_ : frozen_, ex = trainable ? expert_trainable_ : expert_frozen_;
    return (all - ex) / dense + ex / expert;
  }
  double grad_shards(int param) const {
    return tape_.params[param].split == ParamSplit::expert ? shard_.expert_grads : shard_.grads;
  }
  std::vector<int> first_op_of_region_;
  std::vector<std::vector<int>> ops_of_region_;  // each checkpointed region's ops, in order
  // Per tensor: made in a discarding region and kept for backward outside it (dropped after the
  // forward instead), and how many keep it there (ops outside regions that save it, regions that
  // take it as an input): the counts its recompute restores.
  std::vector<bool> discarded_;
  std::vector<int> outside_saves_;
  std::vector<bool> weight_needs_;     // tensors a W pass (zero-bubble) reads
  std::vector<int> last_weight_op_;   // per tensor: the tape's first op whose W pass reads it
  // Which parameters have a gradient, one bit each (the backward plans' memo key: compared word by
  // word on every micro-batch's backward).
  std::vector<std::uint64_t> param_grad_alive_;
  bool grad_alive(int p) const { return (param_grad_alive_[std::size_t(p) >> 6] >> (p & 63)) & 1u; }
  void set_grad_alive(int p) { param_grad_alive_[std::size_t(p) >> 6] |= std::uint64_t(1) << (p & 63); }
  std::map<int, MbState> mbs_;
  std::map<int, double> layer_params_, layer_expert_params_;
  std::shared_ptr<Book> book_;
  std::map<int, bool> templated_;  // in flight from the book's forward (no MbState of their own)

 public:
  // The memo of forward_pass / backward_pass: the forward plan and the state it leaves (for a
  // backward that must be planned afresh), and the backward plans by (last micro-batch, split,
  // which parameters had a gradient before), with the gradient state each leaves.
  struct Book {
    Pass fwd;
    MbState fwd_state;
    struct Bwd {
      Pass items, weight;
      std::vector<std::uint64_t> grads_after;
    };
    std::map<std::tuple<bool, bool, std::vector<std::uint64_t>>, Bwd, std::less<>> bwd;
  };
};

}  // namespace scaleout
