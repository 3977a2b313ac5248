#include "tools/io/report.hpp"

#include <cmath>
#include <cstdio>
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
const char* recompute_name(Recompute r) {
  return r == Recompute::none ? "none" : r == Recompute::selective ? "selective" : "full";
}
}  // namespace

Json result_json(const Scenario& s, const StepResult& r) {
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
        {"exposed_comm", 0.0},
        {"pipeline_bubble", 0.0},
        {"optimizer", r.optimizer_s},
        {"host_overhead", r.host_stall_s}}},
      {"params", {{"total", r.params_total}, {"trainable", r.params_trainable}}},
      {"micro_batches", r.micro_batches},
      {"kernels", r.kernels},
      {"profile", s.profile.name},
  };
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

void write_text_report(std::ostream& os, const Scenario& s, const StepResult& r) {
  const auto& t = s.training;
  os << "scenario   " << s.name << (s.description.empty() ? "" : ": " + s.description) << "\n";
  os << "model      " << (s.model.name.empty() ? "custom" : s.model.name) << ", " << fmt("%.2f", r.params_total / 1e9)
     << "B parameters (" << fmt("%.3g", r.params_trainable / 1e9) << "B trained), " << s.model.layers << " layers, hidden "
     << s.model.hidden << "\n";
  os << "hardware   " << s.gpus() << " x " << s.gpu.name << " (" << gb(s.gpu.memory.value) << "), profile "
     << s.profile.name << "\n";
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
  os << "  host overhead  " << human_time(r.host_stall_s) << "  " << pct(r.host_stall_s) << "  (GPU idle, waiting for launches)\n";
  if (r.micro_batches > 1) os << "  (" << r.micro_batches << " micro-batches accumulated per step)\n";
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
  Json events = Json::array();
  events.push_back({{"ph", "M"}, {"pid", 0}, {"name", "process_name"}, {"args", {{"name", "gpu0"}}}});
  events.push_back({{"ph", "M"}, {"pid", 0}, {"tid", 0}, {"name", "thread_name"}, {"args", {{"name", "host (launches)"}}}});
  events.push_back({{"ph", "M"}, {"pid", 0}, {"tid", 1}, {"name", "thread_name"}, {"args", {{"name", "compute stream"}}}});
  for (const TraceSpan& sp : r.trace) {
    if (sp.end == sp.start && sp.name == "memory") continue;
    events.push_back({{"ph", "X"}, {"pid", 0}, {"tid", sp.track}, {"name", sp.name}, {"ts", sp.start.us()},
                      {"dur", (sp.end - sp.start).us()}});
  }
  for (const auto& [t, bytes] : r.memory_timeline)
    events.push_back({{"ph", "C"}, {"pid", 0}, {"name", "memory"}, {"ts", t.us()}, {"args", {{"GB", bytes / 1e9}}}});
  out << Json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() << "\n";
}

}  // namespace scaleout
