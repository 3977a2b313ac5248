#include "tools/io/simulate.hpp"

#include "sim/training/step.hpp"
#include "tools/io/cluster.hpp"
#include "tools/io/input_error.hpp"
#include "tools/io/report.hpp"

namespace scaleout {

StepConfig step_config(const Scenario& s) {
  StepConfig cfg;
  cfg.model = s.model;
  cfg.training = s.training;
  cfg.gpu = s.gpu;
  cfg.profile = s.profile;
  const Parallelism& p = s.parallelism;
  ParallelPlan& pp = cfg.parallel;
  pp.dp = p.dp;
  pp.tp = p.tp;
  pp.pp = p.pp;
  pp.cp = p.cp;
  pp.ep = p.ep;
  pp.sequence_parallel = p.sequence_parallel;
  pp.tp_comm_overlap = p.tp_comm_overlap;
  pp.schedule = p.pp_schedule == "gpipe"         ? PipelineSchedule::gpipe
                : p.pp_schedule == "interleaved" ? PipelineSchedule::interleaved
                : p.pp_schedule == "zb-h1"       ? PipelineSchedule::zero_bubble
                                                 : PipelineSchedule::one_f_one_b;
  pp.virtual_stages = p.virtual_stages;
  pp.zero = int(p.zero);
  pp.fsdp = p.fsdp == "full_shard" ? FsdpMode::full_shard : p.fsdp == "shard_grad_op" ? FsdpMode::shard_grad_op
          : p.fsdp == "hybrid_shard" ? FsdpMode::hybrid_shard : p.fsdp == "no_shard" ? FsdpMode::no_shard : FsdpMode::none;
  pp.offload_optimizer = p.offload_optimizer;
  pp.offload_params = p.offload_params;
  pp.order = p.order;
  pp.layers_per_stage = p.layers_per_stage;
  pp.p2p_blocking = p.pipeline_p2p == "blocking";
  pp.pipeline_runs = p.pipeline_runs;
  pp.ddp_bucket_bytes = p.ddp_bucket_bytes;
  pp.overlap_grad_reduce = p.overlap_grad_reduce;
  pp.overlap_param_gather = p.overlap_param_gather;
  if (!p.grad_reduce_dtype.empty()) pp.grad_reduce_bytes = dtype_bytes(*parse_dtype(p.grad_reduce_dtype));
  pp.gpus_per_node = s.gpus_per_node;
  pp.links.intra_node_bandwidth = s.intra_node_bandwidth;
  pp.links.inter_node_bandwidth = s.inter_node_bandwidth;
  pp.links.intra_node_latency_s = s.intra_node_latency_s;
  pp.links.inter_node_latency_s = s.inter_node_latency_s;
  pp.links.pcie_bandwidth = s.gpu.pcie_bandwidth.value;
  cfg.faults = s.faults;
  if (s.network == "flow" && s.cluster_spec) {
    ClusterSpec spec = *s.cluster_spec;
    if (spec.nodes * spec.gpus_per_node < s.gpus()) spec.nodes = int((s.gpus() + spec.gpus_per_node - 1) / spec.gpus_per_node);
    auto topo = std::make_shared<Topology>(cluster_topology(spec, s.file, "/cluster/topology"));
    for (const Scenario::LinkFault& lf : s.link_faults) {
      // Find the link: a NIC's network link, a GPU's first NVLink, or the fabric's k-th switch link.
      std::optional<LinkId> found;
      std::int64_t fabric_seen = 0;
      for (LinkId id = 0; id < topo->link_count() && !found; id += 2) {
        const Link& l = topo->link(id);
        const VertexProps& a = topo->vertex(l.src);
        const VertexProps& b = topo->vertex(l.dst);
        if (lf.kind == "nic" && l.kind == LinkKind::network) {
          const VertexProps& nic = a.kind == VertexKind::nic ? a : b;
          if (nic.kind == VertexKind::nic && nic.node == lf.node && nic.index == lf.index) found = id;
        } else if (lf.kind == "nvlink" && l.kind == LinkKind::nvlink) {
          const int rank = int(lf.node * s.gpus_per_node + lf.index);
          if ((a.kind == VertexKind::gpu && a.index == rank) || (b.kind == VertexKind::gpu && b.index == rank)) found = id;
        } else if (lf.kind == "fabric" && a.kind == VertexKind::net_switch && b.kind == VertexKind::net_switch) {
          if (fabric_seen++ == lf.index) found = id;
        }
      }
      if (!found)
        throw InputError(s.file, lf.path, "no such " + lf.kind + " link in the cluster graph" +
                                              (lf.kind == "fabric" ? " (it has " + std::to_string(fabric_seen) + " switch-to-switch links)" : ""));
      if (lf.failed) {
        if (!topo->fail_link(*found)) throw InputError(s.file, lf.path, "the failed link leaves a GPU without a way out of its node");
      } else {
        topo->degrade_link(*found, lf.factor);
      }
    }
    if (const auto problem = topo->find_disconnected())
      throw InputError(s.file, "/faults/links", "after the link faults the cluster is not connected: " + *problem);
    cfg.topology = std::move(topo);
  }
  // Folding is exact while every replica behaves alike. With stragglers, or link faults on the
  // flow network, the folded step simulates one GPU per class of GPUs that behave alike
  // (uses_symmetry_classes; on the flow network checked against the collectives' ends as it runs).
  cfg.fold = s.fold.value_or(true);
  cfg.extrapolate = s.extrapolate;
  cfg.collectives_apart = s.collectives_apart;
  return cfg;
}

namespace {
StepResult simulate_config(const Scenario& s, StepConfig cfg) {
  // Bound the work: each simulated micro-batch builds tens of tasks per layer on every stage.
  if (!cfg.fold && s.gpus() > 65536)
    throw InputError(s.file, "/simulation/fold", "\"off\" simulates every one of the " + std::to_string(s.gpus()) +
                                                     " GPUs; at most 65536 unfolded");
  const std::int64_t simulated = max_simulated_ranks(cfg);
  const double ranks = double(simulated) / double(s.parallelism.pp);
  const double work = double(simulated_micro_batches(cfg)) * double(s.model.layers + 2) * ranks;
  if (work > 4e6)
    throw InputError(s.file, "/model/layers", std::to_string(s.model.layers) + " layers over " +
                                                   std::to_string(simulated_micro_batches(cfg)) +
                                                   " simulated micro-batches" + (ranks > 1 ? " on each of " + std::to_string(simulated) + " simulated GPUs" : std::string()) +
                                                   " is beyond what one step simulation holds (layers x micro-batches x simulated GPUs per stage "
                                                   "at most 4e6)" +
                                                   (cfg.extrapolate ? std::string() : std::string("; simulation.extrapolate \"on\" simulates a few windows of a long accumulation")));
  return simulate_step(cfg);
}
}  // namespace

StepResult simulate_scenario(const Scenario& s, bool keep_trace) {
  StepConfig cfg = step_config(s);
  cfg.keep_trace = keep_trace;
  return simulate_config(s, std::move(cfg));
}

StepResult simulate_candidate(const Scenario& s) {
  StepConfig cfg = step_config(s);
  cfg.screen_state = true;
  return simulate_config(s, std::move(cfg));
}

Scenario on_one_gpu(const Scenario& s) {
  Scenario one = s;
  one.nodes = one.gpus_per_node = 1;
  one.parallelism = Parallelism{};
  one.faults = FaultSpec{};  // a healthy GPU
  // A lone GPU sends nothing: the cluster's graph (and its link faults) has no part in its step,
  // and building a large one cost more than simulating the GPU.
  one.network = "analytic";
  one.link_faults.clear();
  return one;
}

std::optional<BaselineTimes> BaselineCache::find(const std::string& key) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  const auto it = times_.find(key);
  if (it == times_.end()) return std::nullopt;
  return it->second;
}

void BaselineCache::put(const std::string& key, BaselineTimes times) {
  const std::lock_guard<std::mutex> lock(mutex_);
  times_.emplace(key, times);
}

std::string baseline_key(const Json& scenario) {
  Json j = scenario;
  if (j.is_object()) {
    j.erase("parallelism");
    if (j.contains("faults") && j["faults"].is_object()) {
      j["faults"].erase("stragglers");
      j["faults"].erase("links");
    }
    if (j.contains("cluster") && j["cluster"].is_object()) {
      j["cluster"].erase("nodes");
      j["cluster"].erase("gpus_per_node");
      j["cluster"].erase("topology");
    }
    if (j.contains("simulation") && j["simulation"].is_object()) j["simulation"].erase("network");
    for (const char* part : {"faults", "simulation"})  // (emptied: as if not given)
      if (j.contains(part) && j[part].is_object() && j[part].empty()) j.erase(part);
    if (j.contains("training") && j["training"].is_object()) j["training"].erase("global_batch");
  }
  return j.dump();
}

double single_gpu_baseline(const Scenario& s, BaselineCache* cache, const std::string& key) {
  if (s.gpus() <= 1) return 0;
  // The same job on one GPU: the whole global batch by gradient accumulation, so that the
  // optimizer step is amortised over the same tokens. Accumulation is linear in the number of
  // micro-batches (each one the same forward and backward), so two short simulations give it:
  // T(m) = T(1) + (m - 1) (T(2) - T(1)). Both lengths share the planned kernels (one
  // simulate_steps_exact call).
  const std::int64_t m = s.training.global_batch / s.training.micro_batch;
  std::optional<BaselineTimes> times = cache ? cache->find(key) : std::nullopt;
  if (!times) {
    Scenario one = on_one_gpu(s);
    one.training.global_batch = one.training.micro_batch;
    const std::vector<std::int64_t> lengths = cache || m > 1 ? std::vector<std::int64_t>{1, 2} : std::vector<std::int64_t>{1};
    StepConfig cfg = step_config(one);
    cfg.track_memory = false;  // the baseline's time is all the report takes from it
    const std::vector<StepResult> r = simulate_steps_exact(cfg, lengths);
    times = BaselineTimes{r.front().step_time_s, r.back().step_time_s};
    if (cache) cache->put(key, *times);
  }
  const double t = m > 1 ? times->one + double(m - 1) * (times->two - times->one) : times->one;
  return t > 0 ? double(s.training.global_batch) * double(s.training.seq_len) / t : 0;
}

Json simulate_scenario_json(const Scenario& s, BaselineCache* cache, const std::string& key) {
  return result_json(s, simulate_scenario(s), single_gpu_baseline(s, cache, key));
}

}  // namespace scaleout
