#include "tools/io/report.hpp"

#include <cmath>
#include <cstdio>
#include <algorithm>
#include <fstream>

namespace scaleout {

namespace {
std::string gb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GB", bytes / 1e9);
  return buf;
}
std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}
std::string human_time(double s) {
  if (s < 1e-3) return fmt("%.1f us", s * 1e6);
  if (s < 1) return fmt("%.1f ms", s * 1e3);
  if (s < 120) return fmt("%.2f s", s);
  if (s < 2 * 3600) return fmt("%.1f min", s / 60);
  if (s < 3 * 86400) return fmt("%.1f h", s / 3600);
  return fmt("%.1f days", s / 86400);
}
}  // namespace

Json result_json(const Scenario& s, const StepResult& r, double baseline_tokens_per_s) {
  Json breakdown = Json::object();
  for (std::size_t i = 0; i < kMemCategoryCount; ++i) breakdown[kMemCategoryNames[i]] = r.peak_breakdown[i];
  Json j = {
      {"scenario", s.name},
      {"fits", r.fits},
      {"gpus", s.gpus()},
      {"step_time_s", r.step_time_s},
      {"tokens_per_s", r.tokens_per_s},
      {"model_flops_per_step", r.model_flops_per_step},
      {"model_tflops_per_gpu", r.model_tflops_per_gpu},
      {"mfu", r.mfu},
      {"memory",
       {{"peak_bytes", r.peak_bytes},
        {"required_bytes", r.required_bytes},
        {"capacity_bytes", r.capacity_bytes},
        {"breakdown_bytes", breakdown}}},
      {"time_breakdown_s",
       {{"compute", r.compute_s},
        {"recompute", r.recompute_s},
        {"exposed_comm", r.exposed_comm_s},
        {"pipeline_bubble", r.pipeline_bubble_s},
        {"optimizer", r.optimizer_s},
        {"host_overhead", r.host_stall_s}}},
      {"params", {{"total", r.params_total}, {"trainable", r.params_trainable}}},
      {"exposed_comm_s", {{"tp", r.tp_comm_s}, {"dp", r.dp_comm_exposed_s}, {"cp", r.cp_comm_s}, {"ep", r.ep_comm_s}}},
      {"comm_total_s", {{"dp", r.dp_comm_total_s}, {"pp_p2p", r.pp_comm_s}}},
      {"rank_peak_bytes", r.rank_peak_bytes},
      {"parallelism", {{"dp", s.parallelism.dp}, {"tp", s.parallelism.tp}, {"pp", s.parallelism.pp},
                       {"cp", s.parallelism.cp}, {"ep", s.parallelism.ep}}},
      {"micro_batches", r.micro_batches},
      {"kernels", r.kernels},
      {"events", r.events},
      {"event_fingerprint", [&] {
         char b[20];
         std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(r.fingerprint));
         return std::string(b);
       }()},
      {"profile", s.profile.name},
  };
  if (r.extrapolated_from > 0) {
    j["simulated_micro_batches"] = r.extrapolated_from;
    j["extended_from_micro_batches"] = r.extrapolated_base;
  }
  if (!s.faults.stragglers.empty() || !s.link_faults.empty() || r.simulated_ranks > s.parallelism.pp) {
    j["simulated_ranks"] = r.simulated_ranks;
    Json f = {{"peer_wait_s", r.peer_wait_s}, {"peer_wait_exposed_s", r.peer_wait_exposed_s},
              {"max_peer_wait_s", r.max_peer_wait_s}, {"failed", r.failed}};
    if (r.waited_for_rank >= 0) f["waited_for_gpu"] = r.waited_for_rank;
    if (r.failed) f["failure"] = r.failure;
    j["faults"] = f;
  }
  if (baseline_tokens_per_s > 0) {
    j["single_gpu_tokens_per_s"] = baseline_tokens_per_s;
    j["speedup_vs_one_gpu"] = r.tokens_per_s / baseline_tokens_per_s;
    j["scaling_efficiency"] = r.tokens_per_s / baseline_tokens_per_s / double(s.gpus());
  }
  if (s.claim) {
    Json c = {{"source", s.claim->source}, {"quote", s.claim->quote}};
    if (s.claim->fits) {
      c["fits"] = *s.claim->fits;
      c["agrees"] = *s.claim->fits == r.fits;
    }
    if (!s.claim->figure.empty()) c["figure"] = s.claim->figure;
    j["claim"] = c;
  }
  return j;
}

void write_text_report(std::ostream& os, const Scenario& s, const StepResult& r, double baseline_tokens_per_s) {
  const auto& t = s.training;
  os << "scenario   " << s.name << (s.description.empty() ? "" : ": " + s.description) << "\n";
  os << "model      " << (s.model.name.empty() ? "custom" : s.model.name) << ", " << fmt("%.2f", r.params_total / 1e9)
     << "B parameters (" << fmt("%.3g", r.params_trainable / 1e9) << "B trained), " << s.model.layers << " layers, hidden "
     << s.model.hidden << "\n";
  os << "hardware   " << s.gpus() << " x " << s.gpu.name << " (" << gb(s.gpu.memory.value) << ")";
  if (s.gpus() > 1) os << " in " << s.nodes << " node" << (s.nodes > 1 ? "s" : "") << " of " << s.gpus_per_node;
  os << ", profile " << s.profile.name << "\n";
  if (s.gpus() > 1) {
    const auto& p = s.parallelism;
    os << "plan       dp " << p.dp << ", tp " << p.tp << (p.sequence_parallel ? (p.tp_comm_overlap ? " (+SP, comm overlapped)" : " (+SP)") : "") << ", pp " << p.pp;
    if (p.pp > 1) os << " (" << p.pp_schedule << (p.virtual_stages > 1 ? ", " + std::to_string(p.virtual_stages) + " virtual" : "") << ")";
    if (p.cp > 1) os << ", cp " << p.cp;
    if (p.ep > 1) os << ", ep " << p.ep;
    if (p.zero > 0) os << ", ZeRO-" << p.zero;
    if (!p.fsdp.empty()) os << ", FSDP " << p.fsdp;
    if (p.offload_optimizer) os << ", optimizer offloaded";
    os << "\n";
  }
  os << "training   seq " << t.seq_len << ", micro-batch " << t.micro_batch << ", global batch " << t.global_batch
     << ", " << t.precision.name << ", recompute " << recompute_name(t.recompute) << ", "
     << (t.attention == AttentionImpl::flash ? "flash" : "naive") << " attention"
     << (t.lora ? (t.lora->nf4_base ? ", QLoRA r=" : ", LoRA r=") + std::to_string(t.lora->rank) : "") << "\n\n";

  os << "verdict    " << (r.fits ? "FITS" : "DOES NOT FIT") << ": needs " << gb(r.required_bytes) << " of "
     << gb(r.capacity_bytes) << " (peak of tensors " << gb(r.peak_bytes) << " + context and fragmentation)\n";
  os << "  at peak: ";
  for (std::size_t i = 0; i < kMemCategoryCount; ++i)
    os << kMemCategoryNames[i] << " " << gb(r.peak_breakdown[i]) << (i + 1 < kMemCategoryCount ? ", " : "\n");
  os << "\nstep       " << human_time(r.step_time_s) << (r.fits ? "" : " (if it fitted)") << ", "
     << fmt("%.0f", r.tokens_per_s) << " tokens/s, " << fmt("%.0f", r.model_tflops_per_gpu) << " TFLOP/s per GPU, MFU "
     << fmt("%.1f%%", 100 * r.mfu) << "\n";
  auto pct = [&](double x) { return r.step_time_s > 0 ? fmt("%5.1f%%", 100 * x / r.step_time_s) : std::string("  -"); };
  os << "  compute        " << human_time(r.compute_s) << "  " << pct(r.compute_s) << "\n";
  if (r.recompute_s > 0) os << "  recompute      " << human_time(r.recompute_s) << "  " << pct(r.recompute_s) << "\n";
  os << "  optimizer      " << human_time(r.optimizer_s) << "  " << pct(r.optimizer_s) << "\n";
  if (s.gpus() > 1) {
    os << "  exposed comm   " << human_time(r.exposed_comm_s) << "  " << pct(r.exposed_comm_s) << "  (tp "
       << human_time(r.tp_comm_s) << ", dp " << human_time(r.dp_comm_exposed_s) << " of " << human_time(r.dp_comm_total_s)
       << (r.cp_comm_s > 0 ? ", cp " + human_time(r.cp_comm_s) : "") << (r.ep_comm_s > 0 ? ", ep " + human_time(r.ep_comm_s) : "")
       << ")\n";
    if (s.parallelism.pp > 1) os << "  pipeline bubble " << human_time(r.pipeline_bubble_s) << " " << pct(r.pipeline_bubble_s) << "\n";
  }
  os << "  host overhead  " << human_time(r.host_stall_s) << "  " << pct(r.host_stall_s) << "  (GPU idle, waiting for launches)\n";
  if (baseline_tokens_per_s > 0 && s.gpus() > 1)
    os << "  scaling        " << fmt("%.2fx", r.tokens_per_s / baseline_tokens_per_s) << " the throughput of one GPU on "
       << s.gpus() << " GPUs: " << fmt("%.0f%%", 100 * r.tokens_per_s / baseline_tokens_per_s / double(s.gpus()))
       << " efficiency\n";
  if (r.micro_batches > 1) {
    os << "  (" << r.micro_batches << " micro-batches accumulated per step";
    if (r.extrapolated_from > 0)
      os << "; the steady state of " << r.extrapolated_from << " simulated and extended linearly (its growth since "
         << r.extrapolated_base << ")";
    os << ")\n";
  }
  if (!s.faults.stragglers.empty() || !s.link_faults.empty() || r.simulated_ranks > s.parallelism.pp) {
    os << (s.faults.stragglers.empty() && s.link_faults.empty() ? "\nranks      " : "\nfaults     ");
    for (const Scenario::LinkFault& lf : s.link_faults) {
      if (lf.kind == "nic") os << "node " << lf.node << " NIC " << lf.index;
      else if (lf.kind == "nvlink") os << "node " << lf.node << " GPU " << lf.index << "'s NVLink";
      else os << "fabric link " << lf.index;
      os << (lf.failed ? " failed (traffic rerouted)" : " at " + fmt("%.0f%%", 100 * lf.factor) + " of its bandwidth") << "; ";
    }
    for (const Straggler& st : s.faults.stragglers) {
      os << "GPU " << st.rank;
      if (st.compute_slowdown != 1.0) os << " kernels " << fmt("%.2fx", st.compute_slowdown) << " slower";
      if (st.loader_delay_s > 0) os << ", data loader +" << human_time(st.loader_delay_s) << " per micro-batch";
      if (st.stall_s > 0) os << ", stalls " << human_time(st.stall_s) << " before micro-batch " << st.stall_micro_batch;
      os << "; ";
    }
    const std::int64_t all = s.gpus();
    os << r.simulated_ranks << (r.simulated_ranks == 1 ? " GPU simulated" : " GPUs simulated")
       << (r.simulated_ranks == all               ? " (every GPU)"
           : r.simulated_ranks > s.parallelism.pp   ? " (one per class of GPUs that provably behave alike: exact for all " +
                                                        std::to_string(all) + ")"
           : s.faults.stragglers.empty()            ? " (one per stage: its GPUs share every collective, exact)"
                                                    : " (folded: the straggler's stage stands for its slowest replica)")
       << "\n";
    if (r.simulated_ranks > s.parallelism.pp) {
      os << "  GPU 0 waited " << human_time(r.peer_wait_s) << " in collectives for later peers (" << human_time(r.peer_wait_exposed_s)
         << " of it with its compute stream idle)";
      if (r.waited_for_rank >= 0) os << "; the longest wait, " << human_time(r.max_peer_wait_s) << ", was for GPU " << r.waited_for_rank;
      os << "\n";
    }
    if (r.failed) os << "  STEP FAILS: " << r.failure << "\n";
  }
  if (s.claim) {
    os << "\nclaim      " << s.claim->source << ": \"" << s.claim->quote << "\"\n";
    if (s.claim->fits)
      os << "  the claim says it " << (*s.claim->fits ? "fits" : "does not fit") << "; scaleout "
         << (*s.claim->fits == r.fits ? "AGREES" : "DISAGREES") << "\n";
    if (!s.claim->figure.empty()) os << "  claimed figure: " << s.claim->figure << "\n";
  }
}

void write_trace(const std::string& file, const StepResult& r) {
  std::ofstream out(file);
  if (!out) throw InputError(file + ": cannot write the trace");
  // Written event by event: a document of a million events held as JSON objects took 2.4 GB.
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  bool first = true;
  auto put = [&](const Json& e) {
    out << (first ? "\n" : ",\n") << e.dump();
    first = false;
  };
  int ranks = 1;
  for (const TraceSpan& sp : r.trace) ranks = std::max(ranks, sp.rank + 1);
  static const char* kTracks[] = {"host (launches)", "compute stream", "data-parallel comm", "pipeline send (fwd)",
                                  "pipeline send (bwd)"};
  for (int p = 0; p < ranks; ++p) {
    put({{"ph", "M"}, {"pid", p}, {"name", "process_name"},
         {"args", {{"name", std::size_t(p) < r.rank_names.size() && ranks > 1 ? r.rank_names[std::size_t(p)]
                                  : ranks > 1 ? "stage " + std::to_string(p) : std::string("gpu0")}}}});
    for (int t = 0; t < 5; ++t) put({{"ph", "M"}, {"pid", p}, {"tid", t}, {"name", "thread_name"}, {"args", {{"name", kTracks[t]}}}});
  }
  for (const TraceSpan& sp : r.trace) {
    if (sp.end == sp.start && sp.name == "memory") continue;
    put({{"ph", "X"}, {"pid", sp.rank}, {"tid", sp.track}, {"name", sp.name}, {"ts", sp.start.us()}, {"dur", (sp.end - sp.start).us()}});
  }
  for (const auto& [t, bytes] : r.memory_timeline)
    put({{"ph", "C"}, {"pid", 0}, {"name", "memory"}, {"ts", t.us()}, {"args", {{"GB", bytes / 1e9}}}});
  out << "\n]}\n";
  if (!out) throw InputError(file + ": writing the trace failed (disk full?)");
}

}  // namespace scaleout
