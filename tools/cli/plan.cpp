#include "tools/cli/plan.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <unistd.h>

#include "tools/io/simulate.hpp"
#include "tools/io/units_parse.hpp"

namespace scaleout {
namespace {

enum class Objective { throughput, time, cost };

struct PlanOptions {
  std::string scenario;
  std::vector<std::string> sets;
  std::int64_t gpus = 0;      // budget; 0: the scenario's cluster
  std::int64_t min_gpus = 0;  // smallest GPU count searched; 0: the budget (or 1 when cost or a deadline matters)
  std::string objective = "throughput";
  double tokens = 0;          // tokens to train, for time and cost
  double price = 0;           // dollars per GPU-hour
  std::string deadline;       // a duration: plans that would take longer are rejected
  int top = 5;
  int jobs = 0;  // 0: every hardware thread
  std::string format = "text";
};

// A plan of the search: what it changes in the scenario (the whole scenario, 10 KB with its GPU
// and profile, is made when the plan is simulated: 22,866 copies held 228 MB in a 16,384-GPU search).
struct Plan {
  std::int64_t nodes = 1, gpus_per_node = 1;
  Parallelism parallelism;
  std::int64_t micro_batch = 1;
  Recompute recompute = Recompute::none;
  std::int64_t gpus() const { return nodes * gpus_per_node; }
};

// The scenario `base` with the plan's shape, parallelism, micro-batch and recompute (its
// stragglers past the plan's GPUs dropped).
Scenario scenario_of(const Scenario& base, const Plan& p) {
  Scenario s = base;
  s.nodes = p.nodes;
  s.gpus_per_node = p.gpus_per_node;
  s.parallelism = p.parallelism;
  s.training.micro_batch = p.micro_batch;
  s.training.recompute = p.recompute;
  const std::int64_t gpus = p.gpus();
  std::erase_if(s.faults.stragglers, [&](const Straggler& st) { return st.rank >= gpus; });
  return s;
}

struct Candidate {
  Plan plan;
  StepResult r;
  std::string label;
  double train_s = 0;  // time to train the tokens (0 without --tokens)
  double cost = 0;     // dollars (0 without --price)
};

std::string label_of(const Scenario& s) {
  const auto& p = s.parallelism;
  std::string l = "dp" + std::to_string(p.dp) + " tp" + std::to_string(p.tp) + (p.sequence_parallel ? "+sp" : "") +
                  (p.tp_comm_overlap ? "+overlap" : "") + " pp" +
                  std::to_string(p.pp);
  if (p.cp > 1) l += " cp" + std::to_string(p.cp);
  if (p.ep > 1) l += " ep" + std::to_string(p.ep);
  if (p.pp > 1)
    l += p.pp_schedule == "interleaved" ? " (interleaved x" + std::to_string(p.virtual_stages) + ")" : " (" + p.pp_schedule + ")";
  if (p.zero > 0) l += " zero" + std::to_string(p.zero);
  if (!p.fsdp.empty()) l += " fsdp:" + p.fsdp;
  l += " mb" + std::to_string(s.training.micro_batch);
  l += s.training.recompute == Recompute::none ? " no-recompute" : s.training.recompute == Recompute::full ? " full-recompute"
                                                                                                          : std::string(" ") + recompute_name(s.training.recompute);
  return l;
}

// Powers of two from 1 up to `limit` that divide `n`.
std::vector<std::int64_t> pow2_divisors(std::int64_t n, std::int64_t limit) {
  std::vector<std::int64_t> out;
  for (std::int64_t d = 1; d <= limit && d <= n; d *= 2)
    if (n % d == 0) out.push_back(d);
  return out;
}

// Every plan of `gpus` GPUs the scenario's model admits: tensor parallelism inside a node, context
// parallelism for long sequences, pipeline stages, data parallelism with its state sharding,
// expert parallelism for MoE models, micro-batch, recompute and virtual stages.
// GPUs per node of the clusters searched: the scenario's, or for a one-GPU scenario the eight of an
// HGX/DGX-style board.
std::int64_t node_size(const Scenario& base) { return base.gpus() > 1 ? std::max<std::int64_t>(1, base.gpus_per_node) : 8; }

std::vector<Plan> enumerate(const Scenario& base, std::int64_t gpus) {
  std::vector<Plan> out;
  const std::int64_t gpn = std::min<std::int64_t>(gpus, node_size(base));
  const std::int64_t nodes = (gpus + gpn - 1) / gpn;
  const bool megatron = base.training.precision.megatron;
  // FSDP2's mixed precision computes from the weights FSDP gathers: its plans shard with FSDP.
  const bool fsdp_recipe = base.training.precision.weights_cast_by_fsdp();
  const TransformerSpec& m = base.model;
  const std::int64_t seq = base.training.seq_len;
  // Context parallelism splits the sequence in 2*cp chunks (load-balanced causal ring); worth it
  // only for long sequences, as Megatron and the Llama 3 paper use it.
  const std::vector<std::int64_t> cps = seq >= 8192 ? pow2_divisors(seq / 2, 16) : std::vector<std::int64_t>{1};
  for (std::int64_t tp = 1; tp <= gpn; tp *= 2) {
    if (m.heads % tp || m.ffn % tp) continue;
    for (std::int64_t cp : cps) {
      if (tp * cp > gpus || (cp > 1 && seq % (2 * cp * tp) != 0)) continue;
      for (std::int64_t pp = 1; pp <= m.layers && tp * cp * pp <= gpus; pp *= 2) {
        if (gpus % (tp * cp * pp)) continue;
        const std::int64_t dp = gpus / (tp * cp * pp);
        const std::vector<std::int64_t> eps = m.experts > 1 ? pow2_divisors(std::min(dp, m.experts), 64) : std::vector<std::int64_t>{1};
        for (std::int64_t ep : eps) {
          if (m.experts % ep) continue;
          for (int shard = 0; shard <= (dp * cp > 1 ? 3 : 0); ++shard) {  // ZeRO shards over dp * cp
            for (std::int64_t mb : {1, 2, 4, 8, 16}) {
              if (base.training.global_batch % (mb * dp)) continue;
              const std::int64_t mbs = base.training.global_batch / (mb * dp);
              for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full, Recompute::op}) {
                if (rc == Recompute::op && megatron) continue;  // torch's selective checkpointing: PyTorch-native recipes
                for (int v : {1, 2, 3}) {  // 1F1B, interleaved with two chunks, ZB-H1
                  if (v == 2 && (pp == 1 || mbs % pp || m.layers < pp * 2)) continue;
                  if (v == 3 && (pp == 1 || shard == 3 || fsdp_recipe)) continue;
                  if (fsdp_recipe && shard < 2) continue;
                  const bool sp = tp > 1 && megatron && seq % (tp * cp) == 0;
                  // Under Megatron with SP, Transformer Engine's userbuffers overlap (a switch a
                  // run sets, --tp-comm-overlap): tried both ways, as it takes SMs from the GEMMs.
                  for (int overlap = 0; overlap <= (sp ? 1 : 0); ++overlap) {
                  Plan s;
                  s.nodes = nodes;
                  s.gpus_per_node = gpn;
                  Parallelism p;
                  p.dp = dp;
                  p.tp = tp;
                  p.pp = pp;
                  p.cp = cp;
                  p.ep = ep;
                  p.sequence_parallel = sp;
                  p.tp_comm_overlap = overlap == 1;
                  p.pp_schedule = v == 2 ? "interleaved" : v == 3 ? "zb-h1" : "1f1b";
                  p.virtual_stages = v == 2 ? 2 : 1;
                  if (shard > 0) {
                    // ZeRO stages under Megatron-style recipes, FSDP strategies under PyTorch's.
                    if (!fsdp_recipe && (megatron || pp > 1 || tp > 1 || cp > 1 || ep > 1)) p.zero = shard;
                    else p.fsdp = shard == 1 ? "no_shard" : shard == 2 ? "shard_grad_op" : "full_shard";
                  }
                  // The scenario's choice of overlapping ZeRO's parameter gather, where the plan has one.
                  p.overlap_param_gather = base.parallelism.overlap_param_gather && (p.zero == 1 || p.zero == 2);
                  s.parallelism = p;
                  s.micro_batch = mb;
                  s.recompute = rc;
                  out.push_back(std::move(s));
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

std::string duration(double s) {
  char b[64];
  if (!(s > 0) || !std::isfinite(s)) return "never";
  if (s < 3600) std::snprintf(b, sizeof b, "%.1f min", s / 60);
  else if (s < 3 * 86400) std::snprintf(b, sizeof b, "%.1f h", s / 3600);
  else std::snprintf(b, sizeof b, "%.1f days", s / 86400);
  return b;
}

Objective parse_objective(const std::string& o, const PlanOptions& opt) {
  if (o == "throughput") return Objective::throughput;
  if (o == "time" || o == "cost") {
    if (opt.tokens <= 0) throw InputError("--objective " + o + ": needs --tokens (how many tokens to train)");
    if (o == "cost" && opt.price <= 0) throw InputError("--objective cost: needs --price (dollars per GPU-hour)");
    return o == "time" ? Objective::time : Objective::cost;
  }
  throw InputError("--objective: expected throughput, time or cost, got \"" + o + "\"");
}

double parse_deadline(const PlanOptions& o) {
  if (o.deadline.empty()) return 0;
  if (o.tokens <= 0) throw InputError("--deadline: needs --tokens (how many tokens to train)");
  try {
    const double d = parse_quantity(o.deadline, QuantityKind::time_s);
    if (!(d > 0)) throw std::invalid_argument("expected a positive duration");
    return d;
  } catch (const std::invalid_argument& e) {
    throw InputError("--deadline: " + std::string(e.what()) + ", got \"" + o.deadline + "\"");
  }
}

// The GPU counts searched: the budget alone, or doubling from `min` up to it (and the budget).
std::vector<std::int64_t> gpu_counts(std::int64_t min, std::int64_t budget) {
  std::vector<std::int64_t> c;
  for (std::int64_t g = std::max<std::int64_t>(1, min); g < budget; g *= 2) c.push_back(g);
  c.push_back(budget);
  return c;
}

// Simulates every candidate, `jobs` at a time (each simulation owns its simulator).
// (On a terminal, a line on stderr says how far the search is, redrawn at most ten times a
// second: 22,866 plans on 16,384 GPUs take minutes.)
void simulate_all(const Scenario& base, std::vector<Candidate>& cands, int jobs, double tokens, double price) {
  std::atomic<std::size_t> next{0}, done{0};
  const bool progress = cands.size() >= 1000 && ::isatty(STDERR_FILENO);
  const auto t0 = std::chrono::steady_clock::now();
  std::mutex shown_mutex;
  auto shown = t0;
  auto show = [&](bool last) {
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> lock(shown_mutex);
    if (last) {
      std::fputs("\r\033[K", stderr);  // the line goes: the report follows
    } else {
      if (now - shown < std::chrono::milliseconds(100)) return;
      shown = now;
      const double s = std::chrono::duration<double>(now - t0).count(), n = double(done.load());
      std::fprintf(stderr, "\rplan: %zu of %zu plans, %.0f a second, %.0f s left   ", done.load(), cands.size(), s > 0 ? n / s : 0.0,
                   n > 0 ? s * (double(cands.size()) - n) / n : 0.0);
    }
    std::fflush(stderr);
  };
  std::vector<std::thread> pool;
  const int threads = jobs > 0 ? jobs : int(std::max(1u, std::thread::hardware_concurrency()));
  for (int j = 0; j < std::min<int>(threads, int(std::max<std::size_t>(1, cands.size()))); ++j)
    pool.emplace_back([&] {
      for (std::size_t i = next++; i < cands.size(); i = next++) {
        Candidate& c = cands[i];
        const Scenario s = scenario_of(base, c.plan);
        try {
          c.r = simulate_candidate(s);
        } catch (const std::exception&) {
          c.r = StepResult{};  // a plan the scenario's other settings rule out (e.g. a fault on a missing node)
          c.r.fits = false;
          ++done;
          continue;
        }
        c.label = label_of(s);
        // (What the search reports is scalars: the per-rank lists go.)
        c.r.rank_peak_bytes = {};
        c.r.rank_names = {};
        c.r.stream_busy_s = {};
        if (tokens > 0 && c.r.tokens_per_s > 0) c.train_s = tokens / c.r.tokens_per_s;
        if (c.train_s > 0 && price > 0) c.cost = c.train_s / 3600 * double(c.plan.gpus()) * price;
        ++done;
        if (progress) show(false);
      }
    });
  for (auto& t : pool) t.join();
  if (progress) show(true);
}

// Better first under the objective; ties go to fewer GPUs, then more memory headroom.
bool better(const Candidate& a, const Candidate& b, Objective o) {
  if (o == Objective::cost && a.cost != b.cost) return a.cost < b.cost;
  if (a.r.tokens_per_s != b.r.tokens_per_s) return a.r.tokens_per_s > b.r.tokens_per_s;
  if (a.plan.gpus() != b.plan.gpus()) return a.plan.gpus() < b.plan.gpus();
  return a.r.peak_bytes < b.r.peak_bytes;
}

struct SearchResult {
  std::vector<Candidate> all;
  std::vector<const Candidate*> ranked;  // fitting and on time, best first
  std::size_t no_fit = 0, late = 0;
  std::size_t state_only = 0;  // of no_fit: their persistent state alone outgrows the GPU (not simulated)
};

SearchResult search(const Scenario& base, const std::vector<std::int64_t>& counts, Objective obj, double tokens, double price,
                    double deadline, int jobs) {
  SearchResult sr;
  for (std::int64_t g : counts)
    for (Plan& s : enumerate(base, g)) sr.all.push_back({std::move(s), {}, "", 0, 0});
  simulate_all(base, sr.all, jobs, tokens, price);
  for (const auto& c : sr.all) {
    if (c.r.state_outgrows_memory) ++sr.state_only;
    if (!c.r.fits) ++sr.no_fit;
    else if (deadline > 0 && !(c.train_s > 0 && c.train_s <= deadline)) ++sr.late;
    else sr.ranked.push_back(&c);
  }
  std::stable_sort(sr.ranked.begin(), sr.ranked.end(), [obj](const Candidate* a, const Candidate* b) { return better(*a, *b, obj); });
  return sr;
}

Json plan_json(const Candidate& c, int rank) {
  const auto& p = c.plan.parallelism;
  Json j = {{"rank", rank},
            {"plan", c.label},
            {"gpus", c.plan.gpus()},
            {"nodes", c.plan.nodes},
            {"dp", p.dp},
            {"tp", p.tp},
            {"pp", p.pp},
            {"cp", p.cp},
            {"ep", p.ep},
            {"sequence_parallel", p.sequence_parallel},
            {"tp_comm_overlap", p.tp_comm_overlap},
            {"pp_schedule", p.pp_schedule},
            {"virtual_stages", p.virtual_stages},
            {"zero", p.zero},
            {"fsdp", p.fsdp.empty() ? "none" : p.fsdp},
            {"micro_batch", c.plan.micro_batch},
            {"recompute", recompute_name(c.plan.recompute)},
            {"tokens_per_s", c.r.tokens_per_s},
            {"mfu", c.r.mfu},
            {"step_time_s", c.r.step_time_s},
            {"peak_bytes", c.r.peak_bytes},
            {"required_bytes", c.r.required_bytes},
            {"exposed_comm_s", c.r.exposed_comm_s},
            {"pipeline_bubble_s", c.r.pipeline_bubble_s}};
  if (c.train_s > 0) j["time_to_train_s"] = c.train_s;
  if (c.cost > 0) j["cost_usd"] = c.cost;
  return j;
}

void plan_command(const PlanOptions& o) {
  const Objective obj = parse_objective(o.objective, o);
  const double deadline = parse_deadline(o);
  if (o.format != "text" && o.format != "json") throw InputError("--format: expected text or json, got \"" + o.format + "\"");
  const Scenario base = load_scenario(o.scenario, o.sets);
  const std::int64_t budget = o.gpus > 0 ? o.gpus : base.gpus();
  if (budget < 1 || budget > (1 << 16)) throw InputError("--gpus: expected 1 to 65536, got " + std::to_string(budget));
  std::int64_t min = o.min_gpus > 0 ? o.min_gpus : (obj == Objective::cost || deadline > 0 ? 1 : budget);
  if (min > budget) throw InputError("--min-gpus: " + std::to_string(min) + " exceeds the budget of " + std::to_string(budget) + " GPUs");
  const std::vector<std::int64_t> counts = gpu_counts(min, budget);
  const SearchResult sr = search(base, counts, obj, o.tokens, o.price, deadline, o.jobs);
  const StepResult r1 = simulate_scenario(on_one_gpu(base));
  const double t1 = o.tokens > 0 && r1.tokens_per_s > 0 ? o.tokens / r1.tokens_per_s : 0;

  if (o.format == "json") {
    Json plans = Json::array();
    for (int i = 0; i < std::min<int>(o.top, int(sr.ranked.size())); ++i) plans.push_back(plan_json(*sr.ranked[i], i + 1));
    Json one = {{"fits", r1.fits}, {"required_bytes", r1.required_bytes}, {"capacity_bytes", r1.capacity_bytes}};
    if (r1.fits) one["tokens_per_s"] = r1.tokens_per_s;
    if (r1.fits && t1 > 0) one["time_to_train_s"] = t1;
    Json out = {{"model", base.model.name}, {"gpu", base.gpu.name}, {"objective", o.objective}, {"gpu_counts", counts},
                {"searched", sr.all.size()}, {"simulated", sr.all.size() - sr.state_only}, {"do_not_fit", sr.no_fit},
                {"do_not_fit_by_state", sr.state_only}, {"miss_deadline", sr.late},
                {"one_gpu", one}, {"plans", plans}};
    if (deadline > 0) out["deadline_s"] = deadline;
    std::cout << out.dump(2) << "\n";
    return;
  }
  std::printf("plan       %s on %s x %s: %zu plans searched, %zu simulated, %zu do not fit", base.model.name.c_str(),
              counts.size() == 1 ? std::to_string(budget).c_str() : (std::to_string(counts.front()) + ".." + std::to_string(budget)).c_str(),
              base.gpu.name.c_str(), sr.all.size(), sr.all.size() - sr.state_only, sr.no_fit);
  if (sr.state_only > 0) std::printf(" (%zu on their weights, gradients and optimizer state alone)", sr.state_only);
  if (deadline > 0) std::printf(", %zu miss the %s deadline", sr.late, duration(deadline).c_str());
  std::printf(", %zu ranked by %s\n", sr.ranked.size(), o.objective.c_str());
  // Would one GPU do? (the seed article's first question, with numbers)
  std::printf("one GPU    %s: %.1f GB needed of %.1f GB", r1.fits ? "fits" : "does NOT fit", r1.required_bytes / 1e9,
              r1.capacity_bytes / 1e9);
  if (r1.fits) std::printf("; %.0f tokens/s", r1.tokens_per_s);
  if (r1.fits && t1 > 0) std::printf(", %s for %.3g tokens", duration(t1).c_str(), o.tokens);
  if (r1.fits && t1 > 0 && o.price > 0) std::printf(", $%.0f", t1 / 3600 * o.price);
  std::printf("\n");
  if (base.gpus() == 1 && budget > 1) std::printf("nodes      of %lld GPUs assumed (set cluster.gpus_per_node to change)\n", (long long)node_size(base));
  std::printf("\n");
  if (sr.ranked.empty()) {
    if (deadline > 0 && sr.late > 0)
      std::printf("no plan of up to %lld GPUs meets the deadline: more GPUs, or a longer deadline\n", (long long)budget);
    else
      std::printf("no plan fits %lld GPUs: more GPUs, ZeRO-3/FSDP, recompute, or a smaller micro-batch\n", (long long)budget);
    return;
  }
  std::printf("%-4s %5s %-66s %10s %7s %8s %8s %8s", "rank", "GPUs", "plan", "tokens/s", "MFU", "step", "peak GB", "exposed");
  if (o.tokens > 0) std::printf(" %11s", "time");
  if (o.tokens > 0 && o.price > 0) std::printf(" %10s", "cost");
  std::printf("\n");
  for (int i = 0; i < std::min<int>(o.top, int(sr.ranked.size())); ++i) {
    const Candidate& c = *sr.ranked[i];
    const StepResult& r = c.r;
    std::printf("%-4d %5lld %-66s %10.0f %6.1f%% %7.2fs %8.1f %7.2fs", i + 1, (long long)c.plan.gpus(), c.label.c_str(), r.tokens_per_s,
                100 * r.mfu, r.step_time_s, r.peak_bytes / 1e9, r.exposed_comm_s + r.pipeline_bubble_s);
    if (c.train_s > 0) std::printf(" %11s", duration(c.train_s).c_str());
    if (c.cost > 0) std::printf(" %9.0f$", c.cost);
    std::printf("\n");
  }
  const Candidate& best = *sr.ranked.front();
  const StepResult& b = best.r;
  std::printf("\nwhy #1     compute %.2fs, recompute %.2fs, exposed comm %.2fs (tp %.2f, cp %.2f, ep %.2f, dp %.2f), bubble %.2fs,"
              " optimizer %.2fs; %.0f%% of the memory is activations\n",
              b.compute_s, b.recompute_s, b.exposed_comm_s, b.tp_comm_s, b.cp_comm_s, b.ep_comm_s, b.dp_comm_exposed_s,
              b.pipeline_bubble_s, b.optimizer_s, b.peak_bytes > 0 ? 100 * b.peak_breakdown[3] / b.peak_bytes : 0.0);
  if (r1.fits && r1.tokens_per_s > 0)
    std::printf("vs 1 GPU   %.1fx the throughput on %lld GPUs (%.0f%% per GPU)%s\n", b.tokens_per_s / r1.tokens_per_s,
                (long long)best.plan.gpus(), 100 * b.tokens_per_s / r1.tokens_per_s / double(best.plan.gpus()),
                r1.fits ? "" : "; one GPU cannot hold the job at all");
}

// ---------------------------------------------------------------------------------------------
// `scaleout advise`: the seed article's decision framework, each step answered by simulation.

struct AdviseOptions {
  std::string scenario;
  std::vector<std::string> sets;
  double tokens = 0;
  std::string deadline;
  double price = 0;
  std::int64_t max_gpus = 64;
  int jobs = 0;  // 0: every hardware thread
};

struct Recipe {
  std::string name;
  Scenario s;
};

// From full training as given to ever leaner single-GPU recipes.
std::vector<Recipe> recipe_ladder(const Scenario& one) {
  std::vector<Recipe> out;
  out.push_back({"as given", one});
  Scenario s = one;
  if (s.training.recompute != Recompute::full) {
    s.training.recompute = Recompute::full;
    out.push_back({"+ full recompute", s});
  }
  if (s.training.attention != AttentionImpl::flash) {
    s.training.attention = AttentionImpl::flash;
    out.push_back({"+ flash attention", s});
  }
  if (!s.training.lora && s.training.optimizer == Optimizer::adamw) {
    s.training.optimizer = Optimizer::adamw_8bit;
    out.push_back({"+ 8-bit AdamW", s});
  }
  if (!s.training.lora || !s.training.lora->nf4_base) {
    Scenario l = s;
    l.training.optimizer = Optimizer::adamw;
    l.training.lora = LoraSpec{16, true, false};
    out.push_back({"LoRA r16 (bf16 base)", l});
    l.training.lora->nf4_base = true;
    out.push_back({"QLoRA r16 (NF4 base)", l});
  }
  return out;
}

void advise_command(const AdviseOptions& o) {
  PlanOptions po;
  po.tokens = o.tokens;
  po.deadline = o.deadline;
  po.price = o.price;
  const double deadline = parse_deadline(po);
  if (o.tokens <= 0) throw InputError("--tokens: expected the number of tokens to train (e.g. 2e8), got " + std::to_string(o.tokens));
  if (o.max_gpus < 1 || o.max_gpus > 4096) throw InputError("--max-gpus: expected 1 to 4096, got " + std::to_string(o.max_gpus));
  const Scenario base = load_scenario(o.scenario, o.sets);
  const Scenario one = on_one_gpu(base);
  const TransformerSpec& m = base.model;
  auto money = [&](double seconds, std::int64_t gpus) { return seconds / 3600 * double(gpus) * o.price; };
  std::printf("advise     %s on %s, %.3g tokens%s%s\n\n", m.name.c_str(), base.gpu.name.c_str(), o.tokens,
              deadline > 0 ? (", deadline " + duration(deadline)).c_str() : "", o.price > 0 ? ", priced per GPU-hour" : "");

  // Step 1: does it fit on one GPU?
  const ParamCounts pc = count_params(m);
  const double article = (2 * pc.total() + 8.0 * double(m.layers) * double(m.hidden) * double(base.training.seq_len) *
                                             double(base.training.micro_batch)) * 1.2;
  std::printf("1. Does it fit on one %s (%.0f GB)?\n", base.gpu.name.c_str(), base.gpu.memory.value / 1e9);
  std::printf("   the article's rule (2 B/param + 8*L*h*s*b, +20%%): %.1f GB -> %s\n", article / 1e9,
              article <= base.gpu.memory.value ? "fits" : "does not fit");
  const Recipe* first_fit = nullptr;
  std::vector<Recipe> ladder = recipe_ladder(one);
  std::vector<StepResult> ladder_r;
  for (const Recipe& rc : ladder) {
    ladder_r.push_back(simulate_scenario(rc.s));
    const StepResult& r = ladder_r.back();
    std::printf("   %-24s %6.1f GB needed  %-13s %8.0f tokens/s  %s\n", rc.name.c_str(), r.required_bytes / 1e9,
                r.fits ? "fits" : "does NOT fit", r.tokens_per_s, r.fits ? duration(o.tokens / r.tokens_per_s).c_str() : "");
    if (r.fits && !first_fit) first_fit = &rc;
  }
  const StepResult& given1 = ladder_r.front();
  if (!first_fit) std::printf("   -> no single-GPU recipe holds the job: a cluster (or a bigger GPU) is needed\n");
  else std::printf("   -> the simulator says: %s fits on one GPU\n", first_fit->name.c_str());

  // Step 2: how fast do you need it?
  std::printf("\n2. How fast do you need it?\n");
  double one_time = 0;
  if (given1.fits) {
    one_time = o.tokens / given1.tokens_per_s;
    std::printf("   one GPU, recipe as given: %s", duration(one_time).c_str());
    if (o.price > 0) std::printf(", $%.0f", money(one_time, 1));
    if (deadline > 0) std::printf("; the deadline needs %.1fx that speed", one_time / deadline);
    std::printf("\n");
  } else {
    std::printf("   the recipe as given needs more than one GPU's memory\n");
  }

  // Step 3: the smallest cluster that meets the deadline (or the scaling table without one).
  std::printf("\n3. Cluster plans for the recipe as given (best plan per GPU count, searched over DP/TP/PP%s, ZeRO/FSDP,"
              " micro-batch, recompute)\n",
              m.experts > 1 ? "/EP" : base.training.seq_len >= 8192 ? "/CP" : "");
  std::printf("   %5s %-66s %10s %9s %11s", "GPUs", "best plan", "tokens/s", "scaling", "time");
  if (o.price > 0) std::printf(" %10s", "cost");
  std::printf("\n");
  const Candidate* meets = nullptr;
  std::vector<Candidate> keep;  // the winners, kept alive for the verdict
  keep.reserve(32);
  for (std::int64_t g = 1; g <= o.max_gpus; g *= 2) {
    const SearchResult sr = search(base, {g}, Objective::throughput, o.tokens, o.price, 0, o.jobs);
    if (sr.ranked.empty()) {
      std::printf("   %5lld %-66s\n", (long long)g, "nothing fits");
      continue;
    }
    keep.push_back(*sr.ranked.front());
    const Candidate& c = keep.back();
    const double scaling = given1.fits && given1.tokens_per_s > 0 ? c.r.tokens_per_s / given1.tokens_per_s / double(g) : 0;
    std::printf("   %5lld %-66s %10.0f %8s %11s", (long long)g, c.label.c_str(), c.r.tokens_per_s,
                scaling > 0 ? (std::to_string(int(std::lround(100 * scaling))) + "%").c_str() : "-", duration(c.train_s).c_str());
    if (o.price > 0) std::printf(" %9.0f$", c.cost);
    std::printf("%s\n", deadline > 0 && c.train_s <= deadline && !meets ? "  <- first to meet the deadline" : "");
    if (deadline > 0 && c.train_s <= deadline && !meets) meets = &c;
  }
  if (deadline > 0 && !meets)
    std::printf("   -> no plan of up to %lld GPUs meets the deadline\n", (long long)o.max_gpus);

  // Step 4: do you really need a cluster?
  std::printf("\n4. Do you really need a cluster?\n");
  const Recipe* lean = nullptr;
  const StepResult* lean_r = nullptr;
  for (std::size_t i = 0; i < ladder.size(); ++i)
    if (ladder_r[i].fits) {
      lean = &ladder[i];
      lean_r = &ladder_r[i];
      break;
    }
  if (!lean) {
    std::printf("   yes: no single-GPU recipe holds %s on a %s\n", m.name.c_str(), base.gpu.name.c_str());
    return;
  }
  const double lean_t = o.tokens / lean_r->tokens_per_s;
  std::printf("   one GPU with %s: %s", lean->name.c_str(), duration(lean_t).c_str());
  if (o.price > 0) std::printf(", $%.0f", money(lean_t, 1));
  std::printf("\n");
  const Candidate* pick = meets ? meets : (keep.empty() ? nullptr : &keep.back());
  if (pick) {
    std::printf("   %s %lld GPUs (%s): %s", meets ? "the deadline's cluster," : "the largest cluster searched,", (long long)pick->plan.gpus(),
                pick->label.c_str(), duration(pick->train_s).c_str());
    if (o.price > 0) std::printf(", $%.0f", pick->cost);
    std::printf("\n   -> the cluster is %.1fx faster", lean_t / pick->train_s);
    if (o.price > 0) std::printf(" at %.2fx the cost", pick->cost / money(lean_t, 1));
    std::printf("; ");
    if (deadline > 0 && lean_t <= deadline) std::printf("one GPU already meets the deadline: no cluster needed\n");
    else if (deadline > 0 && meets) std::printf("one GPU misses the deadline: the %lld-GPU plan is the cheapest way to meet it\n", (long long)meets->plan.gpus());
    else if (deadline > 0) std::printf("neither meets the deadline\n");
    else std::printf("without a deadline, one GPU is the cheapest way; scale only if the time matters\n");
  }
}

}  // namespace

void register_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* plan = app.add_subcommand("plan", "Search the parallel plans of a scenario's model on a GPU budget");
  plan->add_option("scenario", o->scenario, "Scenario file (its model, GPU, training; parallelism is searched)")->required();
  plan->add_option("--set", o->sets, "Override a field: PATH=VALUE");
  plan->add_option("--gpus", o->gpus, "GPU budget (default: the scenario's cluster)");
  plan->add_option("--min-gpus", o->min_gpus,
                   "Also search smaller GPU counts, doubling from this one (default: the budget only; 1 for cost or a deadline)");
  plan->add_option("--objective", o->objective, "Rank by throughput, time (to train --tokens) or cost (needs --price)")
      ->default_val("throughput");
  plan->add_option("--tokens", o->tokens, "Tokens to train, for time to train and cost");
  plan->add_option("--price", o->price, "Dollars per GPU-hour, for cost");
  plan->add_option("--deadline", o->deadline, "Reject plans that take longer to train --tokens, e.g. \"36 h\" or \"14 d\"");
  plan->add_option("--top", o->top, "Plans to show")->default_val(5);
  plan->add_option("--jobs", o->jobs, "Simulations in parallel (default: every hardware thread)")->check(CLI::Range(1, 4096));
  plan->add_option("--format", o->format, "text or json")->default_val("text");
  plan->callback([o] { plan_command(*o); });

  auto a = std::make_shared<AdviseOptions>();
  CLI::App* adv = app.add_subcommand("advise", "The seed article's decision framework, answered by simulation: one GPU or a cluster?");
  adv->add_option("scenario", a->scenario, "Scenario file (model, GPU, training recipe)")->required();
  adv->add_option("--set", a->sets, "Override a field: PATH=VALUE");
  adv->add_option("--tokens", a->tokens, "Tokens to train")->required();
  adv->add_option("--deadline", a->deadline, "How soon it must be done, e.g. \"2 h\" or \"14 d\"");
  adv->add_option("--price", a->price, "Dollars per GPU-hour");
  adv->add_option("--max-gpus", a->max_gpus, "Largest cluster to consider")->default_val(64);
  adv->add_option("--jobs", a->jobs, "Simulations in parallel (default: every hardware thread)")->check(CLI::Range(1, 4096));
  adv->callback([a] { advise_command(*a); });
}

}  // namespace scaleout
