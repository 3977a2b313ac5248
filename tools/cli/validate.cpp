#include "tools/cli/validate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <ostream>

#include "sim/training/single_gpu_step.hpp"
#include "tools/io/scenario.hpp"

namespace scaleout {
namespace {

struct Row {
  std::string id, split;
  bool oom = false;
  double step = 0, peak = 0;
  bool predicted_fits = false;
  double pred_step = 0, pred_peak = 0;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

bool validate_single_gpu(const ValidateOptions& o, std::ostream& os) {
  std::ifstream in(o.measurements);
  if (!in) throw InputError(o.measurements + ": cannot open file");
  const GpuSpec gpu = load_gpu(o.gpu);
  ComputeProfile profile;
  if (o.profile == "auto") profile = default_profile_for(gpu);
  else if (o.profile == "datasheet") profile = default_profile(gpu);
  else profile = parse_profile(load_json_file(o.profile), o.profile, "", gpu);

  std::vector<Row> rows;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    const Json j = Json::parse(line, nullptr, false);
    const std::string where = "line " + std::to_string(lineno);
    if (j.is_discarded() || !j.is_object()) throw InputError(o.measurements, where, "not a JSON object");
    if (j.value("skipped", false)) continue;
    if (!j.value("error", Json()).is_null() && !j.value("oom", false)) continue;  // a failed measurement
    auto num = [&](const char* k) {
      if (!j.contains(k) || !j[k].is_number()) throw InputError(o.measurements, where + "/" + k, "expected a number");
      return j[k].get<double>();
    };
    auto str = [&](const char* k) {
      if (!j.contains(k) || !j[k].is_string()) throw InputError(o.measurements, where + "/" + k, "expected a string");
      return j[k].get<std::string>();
    };
    StepConfig c;
    c.model.name = str("id");
    c.model.arch = str("arch") == "gpt" ? Arch::gpt : Arch::llama;
    c.model.layers = std::int64_t(num("layers"));
    c.model.hidden = std::int64_t(num("hidden"));
    c.model.heads = std::int64_t(num("heads"));
    c.model.kv_heads = std::int64_t(num("kv_heads"));
    c.model.ffn = std::int64_t(num("ffn"));
    c.model.vocab = std::int64_t(num("vocab"));
    c.model.tied_embeddings = j.value("tied_embeddings", false);
    c.training.seq_len = std::int64_t(num("seq_len"));
    c.model.max_positions = c.training.seq_len;
    c.training.micro_batch = c.training.global_batch = std::int64_t(num("micro_batch"));
    const auto recipe = precision_recipe(str("precision"));
    if (!recipe) throw InputError(o.measurements, where + "/precision", "unknown precision");
    c.training.precision = *recipe;
    const std::string rc = str("recompute");
    c.training.recompute = rc == "full" ? Recompute::full : rc == "selective" ? Recompute::selective : Recompute::none;
    c.training.attention = str("attention") == "naive" ? AttentionImpl::naive : AttentionImpl::flash;
    c.training.optimizer = str("optimizer") == "sgd" ? Optimizer::sgd : Optimizer::adamw;
    c.gpu = gpu;
    c.profile = profile;
    const StepResult r = simulate_single_gpu_step(c);
    Row row;
    row.id = c.model.name;
    row.split = j.value("split", std::string("validation"));
    row.oom = j.value("oom", false);
    if (!row.oom) {
      row.step = num("step_time_s");
      row.peak = num("peak_allocated_bytes");
    }
    row.predicted_fits = r.fits;
    row.pred_step = r.step_time_s;
    row.pred_peak = r.peak_bytes;
    rows.push_back(row);
  }

  os << "| id | split | measured step | predicted | error | measured peak | predicted | error | fits (measured / predicted) |\n";
  os << "|---|---|---:|---:|---:|---:|---:|---:|---|\n";
  std::vector<double> step_err[2], mem_err[2];
  int fit_wrong[2] = {0, 0}, total[2] = {0, 0};
  char buf[512];
  for (const Row& r : rows) {
    const int s = r.split == "calibration" ? 0 : 1;
    ++total[s];
    const bool agree = r.predicted_fits == !r.oom;
    if (!agree) ++fit_wrong[s];
    if (r.oom) {
      std::snprintf(buf, sizeof buf, "| %s | %s | OOM | %.3f s | | OOM | %.1f GB | | no / %s%s |\n", r.id.c_str(),
                    r.split.c_str(), r.pred_step, r.pred_peak / 1e9, r.predicted_fits ? "yes" : "no",
                    agree ? "" : " **WRONG**");
    } else {
      const double se = (r.pred_step - r.step) / r.step, me = (r.pred_peak - r.peak) / r.peak;
      step_err[s].push_back(std::fabs(se));
      mem_err[s].push_back(std::fabs(me));
      std::snprintf(buf, sizeof buf, "| %s | %s | %.4f s | %.4f s | %+.1f%% | %.2f GB | %.2f GB | %+.1f%% | yes / %s%s |\n",
                    r.id.c_str(), r.split.c_str(), r.step, r.pred_step, 100 * se, r.peak / 1e9, r.pred_peak / 1e9,
                    100 * me, r.predicted_fits ? "yes" : "no", agree ? "" : " **WRONG**");
    }
    os << buf;
  }
  bool ok = true;
  os << "\n";
  for (int s : {1, 0}) {
    const auto& se = step_err[s];
    const auto& me = mem_err[s];
    if (total[s] == 0) continue;
    const double worst_step = se.empty() ? 0 : *std::max_element(se.begin(), se.end());
    const double worst_mem = me.empty() ? 0 : *std::max_element(me.begin(), me.end());
    std::snprintf(buf, sizeof buf,
                  "%s rows: %d (%zu ran, %zu OOM). Step time |error|: median %.1f%%, worst %.1f%%. "
                  "Peak memory |error|: median %.1f%%, worst %.1f%%. Fit verdicts wrong: %d.\n",
                  s ? "Validation" : "Calibration", total[s], se.size(), std::size_t(total[s]) - se.size(),
                  100 * median(se), 100 * worst_step, 100 * median(me), 100 * worst_mem, fit_wrong[s]);
    os << buf;
    if (s == 1)
      ok = median(se) <= 0.10 && worst_step <= 0.25 && worst_mem <= 0.10 && fit_wrong[s] == 0;
  }
  os << "Profile: " << profile.name << " (" << profile.measured_on << ")\n";
  os << "Targets (validation rows): median step error <= 10%, worst <= 25%, peak memory within 10%, every fit "
        "verdict right: "
     << (ok ? "MET" : "NOT MET") << "\n";
  return ok;
}

}  // namespace scaleout
