#include "tools/cli/plan.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tools/io/simulate.hpp"

namespace scaleout {
namespace {

struct PlanOptions {
  std::string scenario;
  std::vector<std::string> sets;
  std::int64_t gpus = 0;  // 0: the scenario's
  std::string objective = "throughput";
  double tokens = 0;      // tokens to train, for time and cost
  double price = 0;       // dollars per GPU-hour
  int top = 5;
  int jobs = 2;
};

struct Candidate {
  Scenario s;
  StepResult r;
  bool ran = false;
  std::string label;
};

std::string label_of(const Scenario& s) {
  const auto& p = s.parallelism;
  std::string l = "dp" + std::to_string(p.dp) + " tp" + std::to_string(p.tp) + (p.sequence_parallel ? "+sp" : "") + " pp" +
                  std::to_string(p.pp);
  if (p.pp > 1) l += p.pp_schedule == "interleaved" ? " (interleaved x" + std::to_string(p.virtual_stages) + ")" : " (1f1b)";
  if (p.zero > 0) l += " zero" + std::to_string(p.zero);
  if (!p.fsdp.empty()) l += " fsdp:" + p.fsdp;
  l += " mb" + std::to_string(s.training.micro_batch);
  l += s.training.recompute == Recompute::none ? " no-recompute" : s.training.recompute == Recompute::selective ? " selective" : " full-recompute";
  return l;
}

std::vector<Scenario> enumerate(const Scenario& base, std::int64_t gpus) {
  std::vector<Scenario> out;
  const std::int64_t gpn = std::min<std::int64_t>(gpus, std::max<std::int64_t>(1, base.gpus_per_node));
  const std::int64_t nodes = (gpus + gpn - 1) / gpn;
  const bool megatron = base.training.precision.fused_kernels;
  for (std::int64_t tp = 1; tp <= gpn; tp *= 2) {
    if (base.model.heads % tp || base.model.ffn % tp) continue;
    for (std::int64_t pp = 1; pp <= base.model.layers && tp * pp <= gpus; pp *= 2) {
      if (gpus % (tp * pp)) continue;
      const std::int64_t dp = gpus / (tp * pp);
      for (int shard = 0; shard <= (dp > 1 ? 3 : 0); ++shard) {
        for (std::int64_t mb : {1, 2, 4, 8, 16}) {
          if (base.training.global_batch % (mb * dp)) continue;
          const std::int64_t m = base.training.global_batch / (mb * dp);
          for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full}) {
            for (int v : {1, 2}) {
              if (v == 2 && (pp == 1 || m % pp || base.model.layers < pp * 2)) continue;
              Scenario s = base;
              s.nodes = nodes;
              s.gpus_per_node = gpn;
              Parallelism p;
              p.dp = dp;
              p.tp = tp;
              p.pp = pp;
              p.sequence_parallel = tp > 1 && megatron && base.training.seq_len % tp == 0;
              p.pp_schedule = v == 2 ? "interleaved" : "1f1b";
              p.virtual_stages = v;
              if (shard > 0) {
                // ZeRO stages under Megatron-style recipes, FSDP strategies under PyTorch's.
                if (megatron || pp > 1 || tp > 1) p.zero = shard;
                else p.fsdp = shard == 1 ? "no_shard" : shard == 2 ? "shard_grad_op" : "full_shard";
              }
              s.parallelism = p;
              s.training.micro_batch = mb;
              s.training.recompute = rc;
              out.push_back(std::move(s));
            }
          }
        }
      }
    }
  }
  return out;
}

std::string hours(double s) {
  char b[64];
  if (s < 3600) std::snprintf(b, sizeof b, "%.1f min", s / 60);
  else if (s < 3 * 86400) std::snprintf(b, sizeof b, "%.1f h", s / 3600);
  else std::snprintf(b, sizeof b, "%.1f days", s / 86400);
  return b;
}

void plan_command(const PlanOptions& o) {
  const Scenario base = load_scenario(o.scenario, o.sets);
  const std::int64_t gpus = o.gpus > 0 ? o.gpus : base.gpus();
  if (gpus < 1 || gpus > (1 << 16)) throw InputError("--gpus: expected 1 to 65536, got " + std::to_string(gpus));
  std::vector<Candidate> cands;
  for (Scenario& s : enumerate(base, gpus)) cands.push_back({std::move(s), {}, false, ""});
  // Simulate in parallel: every candidate has its own simulator.
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> pool;
  for (int j = 0; j < std::max(1, o.jobs); ++j)
    pool.emplace_back([&] {
      for (std::size_t i = next++; i < cands.size(); i = next++) {
        cands[i].r = simulate_scenario(cands[i].s);
        cands[i].ran = true;
        cands[i].label = label_of(cands[i].s);
      }
    });
  for (auto& t : pool) t.join();

  std::vector<const Candidate*> fit;
  std::size_t rejected = 0;
  for (const auto& c : cands) (c.r.fits ? fit.push_back(&c) : void(++rejected));
  std::sort(fit.begin(), fit.end(), [](const Candidate* a, const Candidate* b) {
    if (a->r.tokens_per_s != b->r.tokens_per_s) return a->r.tokens_per_s > b->r.tokens_per_s;
    return a->r.peak_bytes < b->r.peak_bytes;  // same speed: the one with more headroom
  });
  const double tokens = o.tokens > 0 ? o.tokens : 0;
  std::printf("plan       %s on %lld x %s: %zu plans simulated, %zu do not fit, %zu fit\n", base.model.name.c_str(),
              (long long)gpus, base.gpu.name.c_str(), cands.size(), rejected, fit.size());
  // Would one GPU do? (the seed article's first question, with numbers)
  Scenario one = base;
  one.nodes = one.gpus_per_node = 1;
  one.parallelism = Parallelism{};
  const StepResult r1 = simulate_scenario(one);
  std::printf("one GPU    %s: %.1f GB needed of %.1f GB; %.0f tokens/s", r1.fits ? "fits" : "does NOT fit",
              r1.required_bytes / 1e9, r1.capacity_bytes / 1e9, r1.tokens_per_s);
  if (tokens > 0) std::printf(", %s for %.3g tokens", hours(tokens / r1.tokens_per_s).c_str(), tokens);
  std::printf("\n\n");
  if (fit.empty()) {
    std::printf("no plan fits %lld GPUs: more GPUs, ZeRO-3/FSDP, recompute, or a smaller micro-batch\n", (long long)gpus);
    return;
  }
  std::printf("%-4s %-52s %10s %7s %8s %9s %9s", "rank", "plan", "tokens/s", "MFU", "step", "peak GB", "exposed");
  if (tokens > 0) std::printf(" %12s", "time");
  if (tokens > 0 && o.price > 0) std::printf(" %10s", "cost");
  std::printf("\n");
  for (int i = 0; i < std::min<int>(o.top, int(fit.size())); ++i) {
    const StepResult& r = fit[i]->r;
    std::printf("%-4d %-52s %10.0f %6.1f%% %7.2fs %9.1f %8.2fs", i + 1, fit[i]->label.c_str(), r.tokens_per_s, 100 * r.mfu,
                r.step_time_s, r.peak_bytes / 1e9, r.exposed_comm_s + r.pipeline_bubble_s);
    if (tokens > 0) std::printf(" %12s", hours(tokens / r.tokens_per_s).c_str());
    if (tokens > 0 && o.price > 0) std::printf(" %9.0f$", tokens / r.tokens_per_s / 3600 * double(gpus) * o.price);
    std::printf("\n");
  }
  const StepResult& b = fit.front()->r;
  std::printf("\nwhy #1     compute %.2fs, recompute %.2fs, exposed comm %.2fs (tp %.2f, dp %.2f), bubble %.2fs, optimizer %.2fs;"
              " %.0f%% of the memory is activations\n",
              b.compute_s, b.recompute_s, b.exposed_comm_s, b.tp_comm_s, b.dp_comm_exposed_s, b.pipeline_bubble_s, b.optimizer_s,
              b.peak_bytes > 0 ? 100 * b.peak_breakdown[3] / b.peak_bytes : 0.0);
  if (r1.tokens_per_s > 0)
    std::printf("vs 1 GPU   %.1fx the throughput on %lld GPUs (%.0f%% per GPU)%s\n", b.tokens_per_s / r1.tokens_per_s, (long long)gpus,
                100 * b.tokens_per_s / r1.tokens_per_s / double(gpus), r1.fits ? "" : "; one GPU cannot hold the job at all");
}

}  // namespace

void register_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* plan = app.add_subcommand("plan", "Search the parallel plans of a scenario's model on a GPU budget");
  plan->add_option("scenario", o->scenario, "Scenario file (its model, GPU, training; parallelism is searched)")->required();
  plan->add_option("--set", o->sets, "Override a field: PATH=VALUE");
  plan->add_option("--gpus", o->gpus, "GPU budget (default: the scenario's cluster)");
  plan->add_option("--tokens", o->tokens, "Tokens to train, for time to train and cost");
  plan->add_option("--price", o->price, "Dollars per GPU-hour, for cost");
  plan->add_option("--top", o->top, "Plans to show")->default_val(5);
  plan->add_option("--jobs", o->jobs, "Simulations in parallel")->default_val(2);
  plan->callback([o] { plan_command(*o); });
}

}  // namespace scaleout
