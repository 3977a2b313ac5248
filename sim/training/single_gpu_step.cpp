#include "sim/training/single_gpu_step.hpp"

#include <cmath>
#include <map>

#include "models/step_tape.hpp"
#include "sim/engine/check.hpp"
#include "sim/engine/stream.hpp"

namespace scaleout {
namespace {

enum class Phase : std::uint8_t { forward, backward, recompute, optimizer };

struct MemOp {
  MemCategory category;
  double bytes;
};

// One unit of the plan: kernels run back to back, allocations made when the first starts and
// frees made when the last ends.
struct PlanItem {
  Phase phase = Phase::forward;
  double host_prologue_tensors = 0;  // optimizer: per-tensor Python work before the first launch
  std::vector<Kernel> kernels;
  std::vector<MemOp> allocs, frees;
};

// Turns the tape into the ordered plan of one step: forward and backward per micro-batch (with
// recompute replays), then the optimizer. Tensor lifetimes follow autograd's rules.
class Planner {
 public:
  Planner(const Tape& tape, const TrainingSpec& tr, std::int64_t micro_batches)
      : tape_(tape), tr_(tr), mbs_(micro_batches) {}

  std::vector<PlanItem> plan(double& params_total, double& params_trainable) {
    const PrecisionRecipe& r = tr_.precision;
    double trainable = 0, frozen = 0;
    for (const ParamRec& p : tape_.params) (p.trainable ? trainable : frozen) += p.count;
    params_total = trainable + frozen;
    params_trainable = trainable;
    // Persistent state, present when the step starts (steady state: optimizer state exists).
    PlanItem init;
    const double frozen_bytes = tr_.lora && tr_.lora->nf4_base ? 0.5 + 0.5 / 64.0 + 4.0 / (64.0 * 256.0)
                                                                : dtype_bytes(r.compute == Dtype::fp8 ? Dtype::bf16 : r.compute);
    init.allocs.push_back({MemCategory::params, trainable * dtype_bytes(r.param) + frozen * frozen_bytes});
    init.allocs.push_back({MemCategory::optimizer, trainable * (optimizer_state_bytes(tr_.optimizer, r.state) +
                                                                (r.master_copy ? 4.0 : 0.0))});
    if (r.master_copy) init.allocs.push_back({MemCategory::grads, trainable * dtype_bytes(r.grad)});
    items_.push_back(init);
    param_grad_alive_.assign(tape_.params.size(), r.master_copy);
    for (std::int64_t mb = 0; mb < mbs_; ++mb) {
      forward();
      backward();
    }
    optimizer(trainable);
    return std::move(items_);
  }

 private:
  double tbytes(int t) const { return tape_.tensors[t].bytes; }
  MemCategory tcat(int t) const { return tape_.tensors[t].category; }

  void alloc(PlanItem& it, int t) {
    if (alive_[t]) return;
    alive_[t] = true;
    it.allocs.push_back({tcat(t), tbytes(t)});
  }
  void maybe_free(PlanItem& it, int t) {
    if (!alive_[t] || uses_[t] > 0 || saved_[t] > 0 || held_[t]) return;
    alive_[t] = false;
    it.frees.push_back({tcat(t), tbytes(t)});
  }
  bool region_input(const OpRec& op, int t) const {
    const int p = tape_.tensors[t].producer;
    return p < 0 || tape_.ops[p].region != op.region;
  }

  void forward() {
    const std::size_t nt = tape_.tensors.size();
    alive_.assign(nt, false);
    uses_.assign(nt, 0);
    saved_.assign(nt, 0);
    held_.assign(nt, false);
    grad_alive_.assign(nt, false);
    region_inputs_.assign(tape_.regions, {});
    for (const OpRec& op : tape_.ops)
      for (int t : op.inputs) ++uses_[t];
    // Inputs produced before the step (token ids) are alive from the start.
    for (const OpRec& op : tape_.ops)
      for (int t : op.inputs)
        if (tape_.tensors[t].producer < 0 && !alive_[t]) {
          alive_[t] = true;
          items_.front().allocs.push_back({tcat(t), tbytes(t)});
        }
    for (const OpRec& op : tape_.ops) {
      PlanItem it;
      it.phase = Phase::forward;
      it.kernels = op.fwd;
      for (int t : op.outputs) {
        alloc(it, t);
        if (tape_.tensors[t].hold_until_forward_end) held_[t] = true;
      }
      for (int t : op.inputs) --uses_[t];
      if (op.region < 0) {
        for (int t : op.saved) ++saved_[t];
      } else {
        // A checkpointed region keeps only its inputs (non-reentrant torch.utils.checkpoint).
        auto& keep = region_inputs_[op.region];
        for (int t : op.inputs)
          if (region_input(op, t) && std::find(keep.begin(), keep.end(), t) == keep.end()) {
            keep.push_back(t);
            ++saved_[t];
          }
      }
      for (int t : op.inputs) maybe_free(it, t);
      for (int t : op.outputs) maybe_free(it, t);
      items_.push_back(std::move(it));
    }
    // Leaving autocast drops its cache of weight casts.
    PlanItem end;
    end.phase = Phase::forward;
    for (std::size_t t = 0; t < nt; ++t)
      if (held_[t]) {
        held_[t] = false;
        maybe_free(end, int(t));
      }
    items_.push_back(std::move(end));
  }

  void replay(int region) {
    std::vector<int> ops;
    for (std::size_t i = 0; i < tape_.ops.size(); ++i)
      if (tape_.ops[i].region == region) ops.push_back(int(i));
    for (int i : ops)
      for (int t : tape_.ops[i].inputs) ++uses_[t];
    std::vector<int> held;
    for (int i : ops) {
      const OpRec& op = tape_.ops[i];
      PlanItem it;
      it.phase = Phase::recompute;
      it.kernels = op.fwd;
      for (int t : op.outputs) {
        alloc(it, t);
        if (tape_.tensors[t].hold_until_forward_end) {
          held_[t] = true;
          held.push_back(t);
        }
      }
      for (int t : op.inputs) --uses_[t];
      for (int t : op.saved) ++saved_[t];
      for (int t : op.inputs) maybe_free(it, t);
      for (int t : op.outputs) maybe_free(it, t);
      items_.push_back(std::move(it));
    }
    for (int t : held) {
      held_[t] = false;
      maybe_free(items_.back(), t);
    }
  }

  void backward() {
    std::vector<bool> replayed(tape_.regions, false);
    std::vector<int> first_op(tape_.regions, -1);
    for (std::size_t i = 0; i < tape_.ops.size(); ++i) {
      const int rg = tape_.ops[i].region;
      if (rg >= 0 && first_op[rg] < 0) first_op[rg] = int(i);
    }
    for (int i = int(tape_.ops.size()) - 1; i >= 0; --i) {
      const OpRec& op = tape_.ops[i];
      if (op.region >= 0 && !replayed[op.region]) {
        replayed[op.region] = true;
        replay(op.region);
      }
      PlanItem it;
      it.phase = Phase::backward;
      it.kernels = op.bwd;
      for (int t : op.inputs)
        if (tape_.tensors[t].requires_grad && !grad_alive_[t]) {
          grad_alive_[t] = true;
          it.allocs.push_back({MemCategory::activations, tbytes(t)});
        }
      if (op.param >= 0 && !param_grad_alive_[op.param]) {
        param_grad_alive_[op.param] = true;
        it.allocs.push_back({MemCategory::grads, tape_.params[op.param].count * dtype_bytes(tr_.precision.grad)});
      }
      if (op.bwd_workspace_bytes > 0) {
        it.allocs.push_back({MemCategory::other, op.bwd_workspace_bytes});
        it.frees.push_back({MemCategory::other, op.bwd_workspace_bytes});
      }
      for (int t : op.outputs)
        if (grad_alive_[t]) {
          grad_alive_[t] = false;
          it.frees.push_back({MemCategory::activations, tbytes(t)});
        }
      for (int t : op.saved) {
        if (op.region < 0 || replayed[op.region]) --saved_[t];
        maybe_free(it, t);
      }
      for (int t : op.outputs) maybe_free(it, t);
      if (op.region >= 0 && first_op[op.region] == i) {
        for (int t : region_inputs_[op.region]) {
          --saved_[t];
          maybe_free(it, t);
        }
      }
      items_.push_back(std::move(it));
    }
    // Gradients of tensors with no producer op (none require grad) and leftovers are dropped.
    PlanItem end;
    end.phase = Phase::backward;
    for (std::size_t t = 0; t < grad_alive_.size(); ++t)
      if (grad_alive_[t]) {
        grad_alive_[t] = false;
        end.frees.push_back({MemCategory::activations, tbytes(int(t))});
      }
    for (std::size_t t = 0; t < alive_.size(); ++t)
      if (alive_[t] && tape_.tensors[t].producer >= 0) {
        alive_[t] = false;
        end.frees.push_back({tcat(int(t)), tbytes(int(t))});
      }
    items_.push_back(std::move(end));
  }

  // The optimizer as PyTorch runs it: foreach kernels, one pass over the parameters per
  // elementwise op (torch/optim/adamw.py _multi_tensor_adamw), or one fused pass.
  void optimizer(double n) {
    const PrecisionRecipe& r = tr_.precision;
    const double p = dtype_bytes(r.master_copy ? Dtype::fp32 : r.param);
    const double g = dtype_bytes(r.grad), s = dtype_bytes(r.state);
    std::vector<double> passes;  // bytes per parameter of each pass
    double temp = 0;             // bytes per parameter of a temporary the passes need
    const bool fused = tr_.optimizer_impl == OptimizerImpl::fused || r.fused_kernels;
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
    if (r.master_copy) passes.push_back(4.0 + dtype_bytes(r.param) + g);  // copy master to params; zero grads
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
    for (double bytes_per_param : passes) {
      const double launches = std::max({1.0, std::ceil(n / per_launch), std::ceil(tensors / 110.0)});
      for (int l = 0; l < int(launches); ++l) {
        Kernel k;
        k.kind = KernelKind::memory;
        k.bytes = bytes_per_param * n / launches;
        k.name = "optimizer";
        it.kernels.push_back(std::move(k));
      }
    }
    items_.push_back(std::move(it));
    // zero_grad(set_to_none=True): gradients are released before the next step.
    if (!r.master_copy) {
      PlanItem z;
      z.phase = Phase::optimizer;
      for (std::size_t i = 0; i < tape_.params.size(); ++i)
        if (param_grad_alive_[i]) z.frees.push_back({MemCategory::grads, tape_.params[i].count * g});
      items_.push_back(std::move(z));
    }
  }

  const Tape& tape_;
  const TrainingSpec& tr_;
  std::int64_t mbs_;
  std::vector<PlanItem> items_;
  std::vector<bool> alive_, held_, grad_alive_, param_grad_alive_;
  std::vector<int> uses_, saved_;
  std::vector<std::vector<int>> region_inputs_;
};

}  // namespace

StepResult simulate_single_gpu_step(const StepConfig& cfg) {
  const TrainingSpec& tr = cfg.training;
  StepResult res;
  res.micro_batches = std::max<std::int64_t>(1, tr.global_batch / std::max<std::int64_t>(1, tr.micro_batch));
  const Tape tape = build_step_tape(cfg.model, tr);
  Planner planner(tape, tr, res.micro_batches);
  const std::vector<PlanItem> items = planner.plan(res.params_total, res.params_trainable);

  const ComputeModel cm(cfg.gpu, cfg.profile);
  Simulator sim;
  StreamExecutor ex(sim);
  const StreamId host = ex.add_stream();
  const StreamId gpu = ex.add_stream();
  MemoryTracker mem;
  mem.keep_timeline(cfg.keep_trace);

  // Memory effects hang on the GPU tasks that open and close each plan item.
  std::map<TaskId, const PlanItem*> opens, closes;
  std::vector<Phase> gpu_phase;
  struct Named { TaskId id; const std::string* name; };
  std::vector<Named> names;
  auto host_cost = [&](Phase p) {
    switch (p) {
      case Phase::forward: return cfg.profile.host_fwd_kernel;
      case Phase::backward: case Phase::recompute: return cfg.profile.host_bwd_kernel;
      case Phase::optimizer: return cfg.profile.host_opt_kernel;
    }
    return Time::zero();
  };
  double phase_time[4] = {0, 0, 0, 0};
  static const std::string kMemOnly = "memory";
  for (const PlanItem& item : items) {
    TaskId first = 0, last = 0;
    if (item.kernels.empty()) {
      first = last = ex.add(gpu, Time::zero(), {}, static_cast<std::uint32_t>(item.phase));
      if (cfg.keep_trace) names.push_back({first, &kMemOnly});
    } else {
      if (item.host_prologue_tensors > 0)
        ex.add(host, Time::from_seconds(item.host_prologue_tensors * cfg.profile.host_opt_tensor.seconds()), {});
      for (std::size_t k = 0; k < item.kernels.size(); ++k) {
        const Kernel& kernel = item.kernels[k];
        const TaskId h = ex.add(host, host_cost(item.phase), {}, static_cast<std::uint32_t>(item.phase));
        const Time dt = cm.time(kernel);
        phase_time[static_cast<int>(item.phase)] += dt.seconds();
        const TaskId g = ex.add(gpu, dt, {h}, static_cast<std::uint32_t>(item.phase));
        if (cfg.keep_trace) {
          names.push_back({h, &kernel.name});
          names.push_back({g, &kernel.name});
        }
        if (k == 0) first = g;
        last = g;
        ++res.kernels;
      }
    }
    if (!item.allocs.empty()) opens[first] = &item;
    if (!item.frees.empty()) closes[last] = &item;
  }
  ex.on_start([&](TaskId id, Time at) {
    auto it = opens.find(id);
    if (it != opens.end())
      for (const MemOp& m : it->second->allocs) mem.alloc(m.category, m.bytes, at);
  });
  ex.on_finish([&](TaskId id, Time at) {
    auto it = closes.find(id);
    if (it != closes.end())
      for (const MemOp& m : it->second->frees) mem.free(m.category, m.bytes, at);
  });
  ex.start();
  sim.run();
  SCALEOUT_CHECK(ex.all_finished(), "step simulation ended with tasks left: a dependency cycle");

  Time end = Time::zero();
  for (TaskId id = 0; id < ex.task_count(); ++id) end = max(end, ex.finish_time(id));
  res.events = sim.events_executed();
  res.step_time_s = end.seconds();
  res.compute_s = phase_time[0] + phase_time[1];
  res.recompute_s = phase_time[2];
  res.optimizer_s = phase_time[3];
  res.host_stall_s = std::max(0.0, res.step_time_s - (res.compute_s + res.recompute_s + res.optimizer_s));
  const double tokens = double(tr.global_batch) * double(tr.seq_len);
  res.tokens_per_s = res.step_time_s > 0 ? tokens / res.step_time_s : 0;
  res.model_flops_per_step = model_flops(cfg.model, tokens, tr.seq_len);
  res.model_tflops_per_gpu = res.step_time_s > 0 ? res.model_flops_per_step / res.step_time_s / 1e12 : 0;
  const double peak = cfg.gpu.peak(Dtype::bf16).value > 0 ? cfg.gpu.peak(Dtype::bf16).value : cfg.gpu.peak(Dtype::fp16).value;
  res.mfu = peak > 0 ? res.model_tflops_per_gpu * 1e12 / peak : 0;
  res.peak_bytes = mem.peak();
  res.peak_breakdown = mem.peak_breakdown();
  res.capacity_bytes = cfg.gpu.memory.value;
  res.required_bytes = res.peak_bytes * (1.0 + cfg.fragmentation) + cfg.context_reserve_bytes;
  res.fits = res.required_bytes <= res.capacity_bytes;
  if (cfg.keep_trace) {
    for (const Named& n : names)
      res.trace.push_back({*n.name, int(ex.stream_of(n.id)), ex.start_time(n.id), ex.finish_time(n.id)});
    res.memory_timeline = mem.timeline();
  }
  return res;
}

}  // namespace scaleout
