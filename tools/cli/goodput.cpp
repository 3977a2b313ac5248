#include "tools/cli/goodput.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "sim/engine/check.hpp"
#include "sim/training/goodput.hpp"
#include "tools/io/input_error.hpp"
#include "tools/io/simulate.hpp"
#include "tools/io/units_parse.hpp"

namespace scaleout {
namespace {

// Defaults, each from a published figure (the README repeats them):
// - MTBFs: llama3_failure_rates(), Llama 3 paper (Meta 2024) section 3.3.4, Table 5.
// - Checkpoint size: 16 bytes per parameter (weights plus Adam state in mixed precision), the usual
//   approximation (e.g. glennklockwood.com/garden/checkpointing).
// - Storage bandwidth: Llama 3's Tectonic file system sustains 2 TB/s (paper, section 3.3.1) for
//   a 16K-GPU job of 2,048 servers: about 1 GB/s per server, so a job of n nodes writes at
//   n x (2 TB/s / 2,048), at most 2 TB/s. An estimate: give --checkpoint-write when it is known.
// - Restart: PyTorch's ProcessGroupNCCL timeout, 10 min by default since PyTorch 2.2 (PR #110947),
//   to detect a hang, plus reading the checkpoint back at the same bandwidth; re-scheduling and
//   process start are not included.
constexpr double kCheckpointBytesPerParam = 16;
constexpr double kStorageBytesPerS = 2e12, kStorageServers = 2048;
constexpr double kNcclTimeoutS = 600;

struct GoodputOptions {
  std::string scenario;
  std::vector<std::string> sets;
  double tokens = 0;
  std::string mtbf_gpu, mtbf_node;  // empty: the Llama 3 figures
  std::string checkpoint_write, checkpoint_blocking, restart;  // empty: derived (see above)
  std::string interval = "auto";
  int trials = 200;
  std::uint64_t seed = 1;
  std::uint64_t max_events = 20'000'000;
  std::string format = "text";
};

double parse_duration(const std::string& option, const std::string& text, bool allow_zero) {
  try {
    const double d = parse_quantity(text, QuantityKind::time_s);
    if (!std::isfinite(d) || d < 0 || (!allow_zero && d == 0))
      throw std::invalid_argument(std::string("expected a ") + (allow_zero ? "non-negative" : "positive") + " duration");
    return d;
  } catch (const std::invalid_argument& e) {
    throw InputError(option + ": " + e.what() + ", got \"" + text + "\"");
  }
}

double parse_mtbf(const std::string& option, const std::string& text) {
  if (text == "never" || text == "inf") return kNeverFails;
  try {
    return parse_duration(option, text, false);
  } catch (const InputError& e) {
    throw InputError(std::string(e.what()) + " (or \"never\")");
  }
}

std::string percent(double g) {
  char b[32];
  std::snprintf(b, sizeof b, g >= 1e-3 || g == 0 ? "%.1f%%" : "%.2g%%", 100 * g);
  return b;
}

std::string human(double s) {
  char b[64];
  if (std::isinf(s)) return "never (overflows a double)";
  if (s < 120) std::snprintf(b, sizeof b, "%.3g s", s);
  else if (s < 2 * 3600) std::snprintf(b, sizeof b, "%.1f min", s / 60);
  else if (s < 3 * 86400) std::snprintf(b, sizeof b, "%.1f h", s / 3600);
  else if (s < 1000 * 86400) std::snprintf(b, sizeof b, "%.1f days", s / 86400);
  else std::snprintf(b, sizeof b, "%.3g years", s / (365.25 * 86400));
  return b;
}

Json estimate_json(const GoodputEstimate& e, double step_s) {
  Json j = {{"interval_steps", e.interval_steps}, {"interval_s", double(e.interval_steps) * step_s},
            {"checkpoints", e.checkpoints},       {"goodput", e.goodput},
            {"expected_failures", e.expected_failures}};
  // JSON has no infinity: null says "never finishes in a double's range".
  j["expected_wall_s"] = std::isfinite(e.expected_wall_s) ? Json(e.expected_wall_s) : Json(nullptr);
  return j;
}

void goodput_command(const GoodputOptions& o) {
  if (o.format != "text" && o.format != "json") throw InputError("--format: expected text or json, got \"" + o.format + "\"");
  if (!(o.tokens > 0) || !std::isfinite(o.tokens)) throw InputError("--tokens: expected a positive number of tokens to train (e.g. 1e12)");
  if (o.trials < 1 || o.trials > 1'000'000) throw InputError("--trials: expected 1 to 1000000, got " + std::to_string(o.trials));
  if (o.max_events < 1) throw InputError("--max-events: expected at least 1");
  const Scenario s = load_scenario(o.scenario, o.sets);
  const StepResult r = simulate_scenario(s);
  SCALEOUT_CHECK(r.step_time_s > 0 && r.tokens_per_s > 0, "a simulated step takes time and trains tokens");

  FailureRates f = llama3_failure_rates(s.gpus(), s.gpus_per_node);
  const bool published_rates = o.mtbf_gpu.empty() && o.mtbf_node.empty();
  if (!o.mtbf_gpu.empty()) f.mtbf_gpu_s = parse_mtbf("--mtbf-gpu", o.mtbf_gpu);
  if (!o.mtbf_node.empty()) f.mtbf_node_s = parse_mtbf("--mtbf-node", o.mtbf_node);

  const double tokens_per_step = r.tokens_per_s * r.step_time_s;
  const double steps = std::ceil(o.tokens / tokens_per_step);
  if (steps > 1e15) throw InputError("--tokens: " + std::to_string(steps) + " steps of this scenario; at most 1e15 are modelled");

  const double ckpt_bytes = kCheckpointBytesPerParam * r.params_total;
  const double bandwidth = kStorageBytesPerS * std::min(1.0, double(f.nodes()) / kStorageServers);
  const double load_s = ckpt_bytes / bandwidth;
  CheckpointPlan p;
  p.step_s = r.step_time_s;
  p.steps = static_cast<std::int64_t>(steps);
  p.write_s = o.checkpoint_write.empty() ? load_s : parse_duration("--checkpoint-write", o.checkpoint_write, true);
  if (!o.checkpoint_blocking.empty()) {
    p.blocking_s = parse_duration("--checkpoint-blocking", o.checkpoint_blocking, true);
    if (p.blocking_s > p.write_s)
      throw InputError("--checkpoint-blocking: " + o.checkpoint_blocking + " is longer than the checkpoint write (" + human(p.write_s) + ")");
  }
  p.restart_s = o.restart.empty() ? kNcclTimeoutS + load_s : parse_duration("--restart", o.restart, true);

  const OptimalInterval opt = optimal_interval(f, p);
  std::int64_t chosen = opt.best_steps;
  if (o.interval != "auto") {
    const double d = parse_duration("--checkpoint-interval", o.interval, false);
    chosen = std::clamp<std::int64_t>(std::llround(std::min(d / p.step_s, 9e18)), 1, p.steps);
  }
  CheckpointPlan at_opt = p, at_chosen = p;
  at_opt.interval_steps = opt.best_steps;
  at_chosen.interval_steps = chosen;
  const GoodputEstimate e_opt = expected_goodput(f, at_opt), e_chosen = expected_goodput(f, at_chosen);
  const MonteCarloResult mc = simulate_goodput(f, at_chosen, {o.trials, o.seed, o.max_events});

  // A few intervals around the optimum, and the chosen one.
  std::set<std::int64_t> ks{chosen};
  for (double m : {0.25, 0.5, 1.0, 2.0, 4.0})
    ks.insert(std::clamp<std::int64_t>(std::llround(double(opt.best_steps) * m), 1, p.steps));
  std::vector<GoodputEstimate> table;
  for (std::int64_t k : ks) {
    CheckpointPlan q = p;
    q.interval_steps = k;
    table.push_back(expected_goodput(f, q));
  }
  const double z = mc.stderr_wall_s > 0 ? (mc.mean_wall_s - e_chosen.expected_wall_s) / mc.stderr_wall_s : 0;

  if (o.format == "json") {
    Json rows = Json::array();
    for (const auto& e : table) rows.push_back(estimate_json(e, p.step_s));
    auto finite = [](double x) { return std::isfinite(x) ? Json(x) : Json(nullptr); };
    Json out = {{"model", s.model.name},
                {"gpu", s.gpu.name},
                {"gpus", s.gpus()},
                {"nodes", f.nodes()},
                {"fits", r.fits},
                {"step_time_s", r.step_time_s},
                {"tokens_per_s", r.tokens_per_s},
                {"steps", p.steps},
                {"useful_s", e_chosen.useful_s},
                {"mtbf_gpu_s", finite(f.mtbf_gpu_s)},
                {"mtbf_node_s", finite(f.mtbf_node_s)},
                {"job_mtbf_s", finite(f.job_mtbf_s())},
                {"checkpoint_write_s", p.write_s},
                {"checkpoint_blocking_s", p.stall_s()},
                {"restart_s", p.restart_s},
                {"optimum", {{"exact_s", finite(opt.exact_s)}, {"young_s", finite(opt.young_s)}, {"daly_s", finite(opt.daly_s)},
                             {"best_steps", opt.best_steps}, {"searched_all_steps", opt.searched_all}}},
                {"chosen", estimate_json(e_chosen, p.step_s)},
                {"optimal", estimate_json(e_opt, p.step_s)},
                {"table", rows},
                {"monte_carlo", {{"trials", mc.trials}, {"finished", mc.finished}, {"capped", mc.capped}, {"events", mc.events},
                                 {"seed", o.seed}, {"mean_wall_s", mc.mean_wall_s}, {"stderr_wall_s", mc.stderr_wall_s},
                                 {"mean_failures", mc.mean_failures}, {"goodput", mc.goodput}}}};
    std::cout << out.dump(2) << "\n";
    return;
  }
  std::printf("goodput     %s on %lld x %s: step %.3g s, %.0f tokens/s; %.3g tokens = %lld steps, %s without failures%s\n",
              s.model.name.c_str(), (long long)s.gpus(), s.gpu.name.c_str(), r.step_time_s, r.tokens_per_s, o.tokens,
              (long long)p.steps, human(e_chosen.useful_s).c_str(), r.fits ? "" : " (the step does NOT fit in memory)");
  auto hours = [](double x) { return std::isinf(x) ? std::string("never fail") : "MTBF " + std::to_string(std::llround(x / 3600)) + " h"; };
  std::printf("failures    job MTBF %s: %lld GPU%s at %s, %lld node%s at %s%s\n", human(f.job_mtbf_s()).c_str(),
              (long long)f.gpus, f.gpus == 1 ? "" : "s", hours(f.mtbf_gpu_s).c_str(), (long long)f.nodes(),
              f.nodes() == 1 ? "" : "s", hours(f.mtbf_node_s).c_str(),
              published_rates ? " (Llama 3: 419 interruptions in 54 days on 16,384 H100)" : "");
  std::printf("checkpoint  write %s%s, blocking %s; restart %s%s\n", human(p.write_s).c_str(),
              o.checkpoint_write.empty() ? " (estimate: 16 B/param at ~1 GB/s per node)" : "", human(p.stall_s()).c_str(),
              human(p.restart_s).c_str(), o.restart.empty() ? " (10 min NCCL timeout + reading the checkpoint)" : "");
  if (std::isinf(opt.exact_s))
    std::printf("optimum     nothing fails: one checkpoint at the end\n");
  else
    std::printf("optimum     exact %s of work between checkpoints, Young %s, Daly %s; in whole steps %lld (%s)\n",
                human(opt.exact_s).c_str(), human(opt.young_s).c_str(), human(opt.daly_s).c_str(), (long long)opt.best_steps,
                human(double(opt.best_steps) * p.step_s).c_str());
  auto line = [&](const char* what, const GoodputEstimate& e) {
    std::printf("%-11s every %lld steps (%s): goodput %s, expected %s to train, %.3g failures\n", what,
                (long long)e.interval_steps, human(double(e.interval_steps) * p.step_s).c_str(), percent(e.goodput).c_str(),
                human(e.expected_wall_s).c_str(), e.expected_failures);
  };
  line("optimal", e_opt);
  if (chosen != opt.best_steps) line("chosen", e_chosen);
  std::printf("\n%12s %12s %11s %8s %22s %10s\n", "interval", "steps", "checkpoints", "goodput", "expected time", "failures");
  for (const auto& e : table)
    std::printf("%12s %12lld %11lld %8s %22s %10.3g%s\n", human(double(e.interval_steps) * p.step_s).c_str(),
                (long long)e.interval_steps, (long long)e.checkpoints, percent(e.goodput).c_str(), human(e.expected_wall_s).c_str(),
                e.expected_failures, e.interval_steps == opt.best_steps ? "  <- optimal" : e.interval_steps == chosen ? "  <- chosen" : "");
  std::printf("\nmonte carlo %d of %d trials on the event engine (seed %llu, %llu events)", mc.finished, mc.trials,
              (unsigned long long)o.seed, (unsigned long long)mc.events);
  if (mc.finished > 0)
    std::printf(": mean %s +- %s (standard error), goodput %s, %.3g failures; closed form %s (%+.1f standard errors)",
                human(mc.mean_wall_s).c_str(), human(mc.stderr_wall_s).c_str(), percent(mc.goodput).c_str(), mc.mean_failures,
                human(e_chosen.expected_wall_s).c_str(), z);
  std::printf("\n");
  if (mc.capped)
    std::printf("            stopped at the event budget (--max-events %llu) after %d finished trials: the job needs too many"
                " restarts (or more than 292 years) to simulate; trust the closed form%s\n",
                (unsigned long long)o.max_events, mc.finished, mc.finished > 0 ? " (the finished trials are the lucky ones)" : "");
}

}  // namespace

void register_goodput_command(CLI::App& app) {
  auto o = std::make_shared<GoodputOptions>();
  CLI::App* g = app.add_subcommand("goodput", "Failures, checkpoints and restarts: goodput, time to train and the best checkpoint interval");
  g->add_option("scenario", o->scenario, "Scenario file (its simulated step gives the step time)")->required();
  g->add_option("--tokens", o->tokens, "Tokens to train")->required();
  g->add_option("--mtbf-gpu", o->mtbf_gpu, "MTBF of one GPU, e.g. \"50000 h\", or never (default: Llama 3, 79,230 h)");
  g->add_option("--mtbf-node", o->mtbf_node, "MTBF of one node's other parts, or never (default: Llama 3, 17,578 h)");
  g->add_option("--checkpoint-write", o->checkpoint_write, "Time to write a checkpoint, e.g. \"60 s\" (default: 16 B/param at ~1 GB/s per node)");
  g->add_option("--checkpoint-blocking", o->checkpoint_blocking, "Part of the write that stalls training (asynchronous checkpointing; default: all of it)");
  g->add_option("--checkpoint-interval", o->interval, "Work between checkpoints, e.g. \"30 min\", or auto (the optimum)")->default_val("auto");
  g->add_option("--restart", o->restart, "Restart cost: detection, re-scheduling, loading (default: 10 min NCCL timeout + reading the checkpoint)");
  g->add_option("--trials", o->trials, "Monte Carlo trials")->default_val(200);
  g->add_option("--seed", o->seed, "Monte Carlo seed")->default_val(1);
  g->add_option("--max-events", o->max_events, "Monte Carlo event budget over all trials")->default_val(20'000'000);
  g->add_option("--format", o->format, "text or json")->default_val("text");
  g->add_option("--set", o->sets, "Override a field: PATH=VALUE");
  g->callback([o] { goodput_command(*o); });
}

}  // namespace scaleout
