#include <functional>
#include <map>
#include <algorithm>
// Parallel plans against closed forms: the pipeline bubble of GPipe/1F1B, the activations each
// schedule keeps, DDP's exposed all-reduce, ZeRO's shares of state, tensor parallelism's traffic.
#include <catch2/catch.hpp>

#include "sim/network/collective_model.hpp"
#include "sim/training/step.hpp"
#include "tests/sim/same_figures.hpp"
#include "tools/io/scenario.hpp"
#include "tools/io/simulate.hpp"

using namespace scaleout;

namespace {

// A uniform stack (tiny vocabulary, no host overhead) so that stages are equal.
StepConfig uniform(std::int64_t layers, std::int64_t pp, std::int64_t m, PipelineSchedule sched, std::int64_t v = 1) {
  StepConfig c;
  c.model.arch = Arch::llama;
  c.model.layers = layers;
  c.model.hidden = 2048;
  c.model.heads = 16;
  c.model.kv_heads = 16;
  c.model.ffn = 8192;
  c.model.vocab = 128;
  c.training.seq_len = 2048;
  c.training.micro_batch = 1;
  c.training.global_batch = m;
  c.training.precision = *precision_recipe("megatron-bf16");
  c.gpu = load_gpu("a100-80g");
  c.profile = default_profile(c.gpu);
  c.profile.host_fwd_kernel = c.profile.host_bwd_kernel = c.profile.host_opt_kernel = c.profile.host_opt_tensor = Time::zero();
  c.parallel.pp = pp;
  c.parallel.schedule = sched;
  c.parallel.virtual_stages = v;
  c.parallel.gpus_per_node = 8;
  c.parallel.links.intra_node_bandwidth = 300e9;
  c.parallel.links.inter_node_bandwidth = 25e9;
  return c;
}

// uniform() at a quarter of the width, 512 tokens: small enough to simulate a hundred micro-batches.
StepConfig narrow(std::int64_t pp, std::int64_t m) {
  StepConfig c = uniform(4, pp, m, PipelineSchedule::one_f_one_b);
  c.model.hidden = 512;
  c.model.heads = 8;
  c.model.kv_heads = 8;
  c.model.ffn = 2048;
  c.training.seq_len = 512;
  return c;
}

}  // namespace

TEST_CASE("GPipe's bubble is (p-1)/(m+p-1) of the step", "[sim][parallel]") {
  // With equal stages of forward+backward time t per micro-batch: step = (m + p - 1) t, of
  // which (p - 1) t is idle on every stage.
  const std::int64_t p = 4, m = 8;
  const StepResult r = simulate_step(uniform(16, p, m, PipelineSchedule::gpipe));
  const double expected = double(p - 1) / double(m + p - 1);
  const double busy = r.compute_s + r.recompute_s;
  const double pipeline_part = r.step_time_s - r.optimizer_s;
  CHECK(r.pipeline_bubble_s / pipeline_part == Approx(expected).epsilon(0.10));
  CHECK(busy / pipeline_part == Approx(1 - expected).epsilon(0.10));
}

TEST_CASE("1F1B has GPipe's bubble but keeps at most p micro-batches of activations", "[sim][parallel]") {
  const std::int64_t p = 4, m = 16;
  const StepResult gpipe = simulate_step(uniform(16, p, m, PipelineSchedule::gpipe));
  const StepResult one = simulate_step(uniform(16, p, m, PipelineSchedule::one_f_one_b));
  CHECK(one.step_time_s == Approx(gpipe.step_time_s).epsilon(0.05));
  // Stage 0 holds m micro-batches under GPipe and p under 1F1B.
  const double act_gpipe = gpipe.rank_peak_bytes[0], act_one = one.rank_peak_bytes[0];
  CHECK(act_one < act_gpipe);
  // The last stage holds one micro-batch under 1F1B: less than the first.
  CHECK(one.rank_peak_bytes[p - 1] < one.rank_peak_bytes[0]);
}

TEST_CASE("interleaving virtual stages shrinks the bubble", "[sim][parallel]") {
  const StepResult one = simulate_step(uniform(16, 4, 8, PipelineSchedule::one_f_one_b));
  const StepResult inter = simulate_step(uniform(16, 4, 8, PipelineSchedule::interleaved, 2));
  CHECK(inter.pipeline_bubble_s < 0.7 * one.pipeline_bubble_s);
  CHECK(inter.step_time_s < one.step_time_s);
}

TEST_CASE("DDP without overlap exposes the whole ring all-reduce", "[sim][parallel]") {
  // 2(p-1)a + 2(p-1)/p * S / B for the gradients S, when it runs after the backward.
  StepConfig c = uniform(4, 1, 1, PipelineSchedule::one_f_one_b);
  c.parallel.dp = 8;
  c.training.global_batch = 8;
  c.training.precision = *precision_recipe("bf16");
  c.parallel.overlap_grad_reduce = false;
  c.parallel.ddp_bucket_bytes = 1e15;  // one bucket
  const StepResult r = simulate_step(c);
  const double grads = r.params_trainable * 2;
  const LinkParams& l = c.parallel.links;
  const double expect = collective_seconds(CollectiveKind::all_reduce, 8, grads, l.intra_node_bandwidth * l.intra_node_efficiency,
                                           l.intra_node_latency_s);
  CHECK(r.dp_comm_exposed_s == Approx(expect).epsilon(0.02));
  c.parallel.overlap_grad_reduce = true;
  c.parallel.ddp_bucket_bytes = 25.0 * 1024 * 1024;
  const StepResult o = simulate_step(c);
  CHECK(o.dp_comm_exposed_s < 0.5 * r.dp_comm_exposed_s);
}

TEST_CASE("ZeRO stages shard optimizer state, then gradients, then parameters", "[sim][parallel]") {
  StepConfig c = uniform(8, 1, 8, PipelineSchedule::one_f_one_b);
  c.training.precision = *precision_recipe("bf16-mixed");
  c.training.recompute = Recompute::full;
  c.parallel.dp = 8;
  c.training.global_batch = 8;
  std::array<double, kMemCategoryCount> b[4];
  double n = 0;
  for (int z = 0; z <= 3; ++z) {
    c.parallel.zero = z;
    const StepResult r = simulate_step(c);
    b[z] = r.peak_breakdown;
    n = r.params_trainable;
  }
  CHECK(b[0][2] == Approx(8 * n));
  CHECK(b[1][2] == Approx(8 * n / 8));
  CHECK(b[0][0] == Approx(4 * n));
  CHECK(b[3][0] == Approx(4 * n / 8));
  CHECK(b[2][1] < b[1][1]);
}

TEST_CASE("the plan search's screen turns away only plans whose persistent state alone does not fit", "[parallel][memory]") {
  // A 16-layer stack (1.07B parameters, 18 bytes each under Megatron's recipe: 19.3 GB) on a GPU
  // cut to 9 GB: its state cannot fit unsharded or with ZeRO-1 on one stage, nor unsharded on
  // two; more ZeRO or stages bring it under the line, where activations decide. Every plan is
  // simulated with and without the screen: a screened plan does not fit when simulated either,
  // its peak at least the state the screen counted; every other plan gives the same figures
  // either way.
  int screened = 0, passed = 0, fit = 0;
  for (const std::int64_t pp : {1, 2, 4})
    for (int z = 0; z <= 3; ++z)
      for (const Recompute rc : {Recompute::none, Recompute::full}) {
        StepConfig c = uniform(16, pp, 16, PipelineSchedule::one_f_one_b);
        c.gpu.memory.value = 9e9;
        c.parallel.dp = 4;
        c.parallel.zero = z;
        c.training.recompute = rc;
        c.training.global_batch = 16 * 4;
        const StepResult full = simulate_step(c);
        c.screen_state = true;
        const StepResult s = simulate_step(c);
        INFO("pp " << pp << ", ZeRO-" << z << ", recompute " << int(rc));
        if (s.state_outgrows_memory) {
          ++screened;
          CHECK_FALSE(s.fits);
          CHECK_FALSE(full.fits);
          CHECK(full.peak_bytes >= s.peak_bytes);
          CHECK(s.required_bytes > s.capacity_bytes);
          CHECK(s.step_time_s == 0);
        } else {
          ++passed;
          fit += full.fits ? 1 : 0;
          CHECK(s.step_time_s == full.step_time_s);
          CHECK(s.peak_bytes == full.peak_bytes);
          CHECK(s.fits == full.fits);
        }
      }
  CHECK(screened == 6);
  CHECK(passed == 18);
  CHECK(fit > 0);  // past the screen, some plans fit and some do not: their activations decide
  CHECK(fit < passed);
}

TEST_CASE("tensor parallelism: two all-reduces of b*s*h per layer forward and two backward", "[sim][parallel]") {
  StepConfig c = uniform(4, 1, 1, PipelineSchedule::one_f_one_b);
  c.parallel.tp = 8;
  const StepResult r = simulate_step(c);
  const LinkParams& l = c.parallel.links;
  const double msg = 2048.0 * 2048 * 2;  // b*s*h in bf16
  const double ar = collective_seconds(CollectiveKind::all_reduce, 8, msg, l.intra_node_bandwidth * l.intra_node_efficiency,
                                       l.intra_node_latency_s);
  // 4 layers x (2 forward + 2 backward) + the embedding's forward all-reduce + the LM head's
  // input-gradient all-reduce (column-parallel), plus the loss's three small all-reduces.
  const double small = collective_seconds(CollectiveKind::all_reduce, 8, 2048.0 * 4, l.intra_node_bandwidth * l.intra_node_efficiency,
                                          l.intra_node_latency_s);
  CHECK(r.tp_comm_s == Approx(18 * ar + 3 * small).epsilon(0.01));
}

TEST_CASE("placement: tensor parallelism across nodes pays the inter-node link", "[sim][parallel]") {
  // tp 8 over nodes of 4 GPUs spans two nodes; with dp fastest, the TP group strides over nodes.
  StepConfig c = uniform(4, 1, 8, PipelineSchedule::one_f_one_b);
  c.parallel.tp = 4;
  c.parallel.dp = 2;
  c.parallel.gpus_per_node = 4;
  c.training.global_batch = 8;
  const double inside = simulate_step(c).tp_comm_s;
  c.parallel.order = "dp-tp-cp-pp";
  const double across = simulate_step(c).tp_comm_s;
  // Two members of each TP group per node: its rings leave a node once per channel, over the
  // two members' NIC shares (NCCL's channel-per-NIC rings).
  const LinkParams& l = c.parallel.links;
  CHECK(across / inside == Approx((l.intra_node_bandwidth * l.intra_node_efficiency) /
                                  (2 * l.inter_node_bandwidth * l.inter_node_efficiency)).epsilon(0.25));
}

TEST_CASE("offloading ZeRO-3 parameters frees their GPU memory and costs PCIe time", "[sim][parallel]") {
  StepConfig c = uniform(8, 1, 8, PipelineSchedule::one_f_one_b);
  c.training.precision = *precision_recipe("bf16-mixed");
  c.parallel.dp = 8;
  c.parallel.zero = 3;
  c.parallel.links.pcie_bandwidth = 25e9;
  const StepResult on_gpu = simulate_step(c);
  c.parallel.offload_params = true;
  const StepResult off = simulate_step(c);
  CHECK(off.peak_breakdown[0] < 0.01 * on_gpu.peak_breakdown[0] + 1);
  CHECK(off.dp_comm_total_s > on_gpu.dp_comm_total_s);
}

TEST_CASE("long accumulation is extrapolated from two windows and agrees with the exact simulation", "[parallel][extrapolate]") {
  struct Case {
    std::int64_t pp;
    PipelineSchedule sched;
    std::int64_t v;
  };
  for (const Case& k : {Case{1, PipelineSchedule::one_f_one_b, 1}, Case{4, PipelineSchedule::one_f_one_b, 1},
                        Case{4, PipelineSchedule::gpipe, 1}, Case{4, PipelineSchedule::interleaved, 2},
                        Case{4, PipelineSchedule::zero_bubble, 1}}) {
    StepConfig c = uniform(8, k.pp, 640, k.sched, k.v);
    c.model.hidden = 256;
    c.model.ffn = 1024;
    c.training.seq_len = 256;
    c.parallel.dp = 2;  // with DDP buckets at the end of the step
    c.training.global_batch = 2 * 640;
    // GPipe has no repeating period (every forward, then every backward): never extended.
    const bool gpipe = k.sched == PipelineSchedule::gpipe && k.pp > 1;
    REQUIRE((simulated_micro_batches(c) < 640) == !gpipe);
    const StepResult exact = simulate_step_exact(c);
    const StepResult fast = simulate_step(c);
    CHECK(exact.extrapolated_from == 0);
    CHECK(fast.extrapolated_from == (gpipe ? 0 : simulated_micro_batches(c)));
    CHECK(fast.micro_batches == 640);
    CHECK(fast.step_time_s == Approx(exact.step_time_s).epsilon(1e-6));
    CHECK(fast.peak_bytes == Approx(exact.peak_bytes).epsilon(1e-6));
    CHECK(fast.compute_s == Approx(exact.compute_s).epsilon(1e-6));
    CHECK(fast.pipeline_bubble_s == Approx(exact.pipeline_bubble_s).epsilon(1e-4).margin(1e-9));
    CHECK(double(fast.kernels) == Approx(double(exact.kernels)).epsilon(1e-9));
  }
}

TEST_CASE("a pipeline that settles early is extended from two of its three windows", "[parallel][extrapolate]") {
  // Without a slow GPU a pipeline's windows are a < b < c (16, 20 and 48 micro-batches under PP 4;
  // 16, 24 and 48 under PP 8). Where c's passes are periodic from before the first of a and b that
  // starts its cool-down two periods past the start (a under PP 4, b under PP 8), that one and c
  // are a settled pair and the third is not simulated; the extension is the exact step.
  for (const std::int64_t pp : {4, 8}) {
    INFO("PP " << pp);
    StepConfig c = uniform(8, pp, 128, PipelineSchedule::one_f_one_b);
    c.model.hidden = 256;
    c.model.ffn = 1024;
    c.training.seq_len = 256;
    c.parallel.dp = 2;  // with DDP buckets at the end of the step
    c.training.global_batch = 2 * 128;
    REQUIRE(simulated_micro_batches(c) == 48);
    const StepResult exact = simulate_step_exact(c);
    const StepResult fast = simulate_step(c);
    CHECK(fast.extrapolated_from == 48);
    CHECK(fast.extrapolated_base == (pp == 4 ? 16 : 24));
    CHECK(fast.step_time_s == Approx(exact.step_time_s).epsilon(1e-9));
    CHECK(fast.pipeline_bubble_s == Approx(exact.pipeline_bubble_s).epsilon(1e-9).margin(1e-12));
    CHECK(fast.compute_s == Approx(exact.compute_s).epsilon(1e-9));
    CHECK(fast.dp_comm_total_s == Approx(exact.dp_comm_total_s).epsilon(1e-9));
    CHECK(fast.pp_comm_s == Approx(exact.pp_comm_s).epsilon(1e-9));
    CHECK(fast.peak_bytes == exact.peak_bytes);
  }
}

TEST_CASE("accumulation lengths simulated together equal each simulated alone", "[parallel][extrapolate]") {
  // simulate_steps_exact shares the planned kernels between lengths (the single-GPU baseline's
  // 1 and 2 micro-batches): every figure must be what a call per length gives.
  StepConfig c = uniform(4, 2, 4, PipelineSchedule::one_f_one_b);
  c.parallel.dp = 2;
  c.faults.stragglers.push_back({1, 1.3, 0, 0, 0});
  const std::vector<std::int64_t> lengths{1, 2, 5};
  const std::vector<StepResult> together = simulate_steps_exact(c, lengths);
  REQUIRE(together.size() == lengths.size());
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    INFO(lengths[i] << " micro-batches");
    StepConfig one = c;
    one.training.global_batch = lengths[i] * c.parallel.dp;
    const StepResult alone = simulate_step_exact(one);
    CHECK(together[i].micro_batches == lengths[i]);
    CHECK(together[i].step_time_s == alone.step_time_s);
    CHECK(together[i].peak_bytes == alone.peak_bytes);
    CHECK(together[i].pipeline_bubble_s == alone.pipeline_bubble_s);
    CHECK(together[i].peer_wait_s == alone.peer_wait_s);
    CHECK(together[i].fingerprint == alone.fingerprint);
  }
}

TEST_CASE("without a pipeline, 2, 3 and 4 micro-batches give any accumulation exactly", "[parallel][extrapolate]") {
  // Every micro-batch between the first and the last is the same period: DDP (its buckets in the
  // last backward), ZeRO-2 and FSDP (a reduce-scatter every micro-batch), host-bound tiny kernels,
  // GPipe on one stage (memory growing each micro-batch). (A slowed GPU: the next test.)
  struct Case {
    const char* name;
    std::function<void(StepConfig&)> set;
  };
  const std::vector<Case> cases = {
      {"one GPU", [](StepConfig&) {}},
      {"DDP", [](StepConfig& c) { c.parallel.dp = 4; }},
      {"ZeRO-2", [](StepConfig& c) { c.parallel.dp = 4; c.parallel.zero = 2; }},
      {"FSDP", [](StepConfig& c) { c.parallel.dp = 4; c.parallel.fsdp = FsdpMode::full_shard; }},
      {"host-bound", [](StepConfig& c) { c.model.hidden = 64; c.model.ffn = 256; c.model.heads = 2; c.model.kv_heads = 2;
                                          c.profile = default_profile(c.gpu); }},
      {"GPipe", [](StepConfig& c) { c.parallel.schedule = PipelineSchedule::gpipe; }},
  };
  // (Up to 9 micro-batches, as many as the three windows, the step is simulated in full: the
  // windows would cost more.)
  for (const Case& k : cases) {
    for (std::int64_t m : {9, 10, 16}) {
      INFO(k.name << ", " << m << " micro-batches");
      StepConfig c = narrow(1, m);
      k.set(c);
      c.training.global_batch = m * c.parallel.dp;
      REQUIRE(simulated_micro_batches(c) == (m > 9 ? 4 : m));
      const StepResult exact = simulate_step_exact(c);
      const StepResult fast = simulate_step(c);
      CHECK(fast.extrapolated_from == (m > 9 ? 4 : 0));
      CHECK(fast.micro_batches == m);
      CHECK(fast.step_time_s == Approx(exact.step_time_s).epsilon(1e-9));
      CHECK(fast.peak_bytes == Approx(exact.peak_bytes).epsilon(1e-9));
      CHECK(fast.compute_s == Approx(exact.compute_s).epsilon(1e-9));
      CHECK(fast.exposed_comm_s == Approx(exact.exposed_comm_s).epsilon(1e-6).margin(1e-12));
      CHECK(fast.host_stall_s == Approx(exact.host_stall_s).epsilon(1e-6).margin(1e-12));
      CHECK(fast.dp_comm_total_s == Approx(exact.dp_comm_total_s).epsilon(1e-9).margin(1e-15));
      CHECK(double(fast.kernels) == Approx(double(exact.kernels)).epsilon(1e-12));
    }
  }
  // A one-time stall is not periodic: simulated in full.
  StepConfig c = uniform(4, 1, 16, PipelineSchedule::one_f_one_b);
  c.faults.stragglers.push_back({0, 1.0, 0, 0.01, 7});
  CHECK(simulated_micro_batches(c) == 16);
}

TEST_CASE("without a pipeline, a slowed GPU is extended from a settled pair of windows", "[parallel][extrapolate]") {
  // Its healthy peers run ahead of it, so waits and their split among the groups can take a few
  // micro-batches to settle. On the analytic network one window of 8 micro-batches is simulated
  // with every rank's passes recorded; where they repeat with one shift from some micro-batch on,
  // a shorter window past that pairs with it (as a slow pipeline's) and the two are extended:
  // the exact step from 16 micro-batches on. Where data-parallel traffic runs every micro-batch
  // (ZeRO-2), the lead queues up in its streams: simulated in full.
  auto plan = [](std::int64_t m, int zero) {
    StepConfig c = narrow(1, m);
    c.parallel.tp = 2;
    c.parallel.dp = 4;
    c.parallel.zero = zero;
    c.faults.stragglers.push_back({0, 1.5, 2e-4, 0, 0});  // slowed and with a slow loader
    c.training.global_batch = m * c.parallel.dp;
    return c;
  };
  for (const std::int64_t m : {16, 48, 96}) {
    for (int zero : {0, 2}) {
      INFO(m << " micro-batches, ZeRO-" << zero);
      const StepConfig c = plan(m, zero);
      const StepResult exact = simulate_step_exact(c);
      const StepResult fast = simulate_step(c);
      CHECK(fast.extrapolated_from == (zero == 0 ? 8 : 0));
      CHECK((zero == 0 ? fast.extrapolated_base > 0 && fast.extrapolated_base < 8 : fast.extrapolated_base == 0));
      CHECK(fast.micro_batches == m);
      CHECK(fast.step_time_s == Approx(exact.step_time_s).epsilon(1e-9));
      CHECK(fast.peer_wait_s == Approx(exact.peer_wait_s).epsilon(1e-9));
      CHECK(fast.max_peer_wait_s == Approx(exact.max_peer_wait_s).epsilon(1e-9));
      CHECK(fast.exposed_comm_s == Approx(exact.exposed_comm_s).epsilon(1e-9));
      CHECK(fast.tp_comm_s == Approx(exact.tp_comm_s).epsilon(1e-9));
      CHECK(fast.host_stall_s == Approx(exact.host_stall_s).epsilon(1e-9).margin(1e-15));
      CHECK(fast.dp_comm_exposed_s == Approx(exact.dp_comm_exposed_s).epsilon(1e-9).margin(1e-15));
      CHECK(fast.peak_bytes == exact.peak_bytes);
    }
  }
  // Fewer than twice the window: every micro-batch is simulated.
  CHECK(simulate_step(plan(15, 0)).extrapolated_from == 0);
}

TEST_CASE("without a pipeline, a slow GPU's lead that overtakes what bound a healthy arrival is not extended", "[parallel][extrapolate]") {
  // Two expert groups (TP 4 x DP 8, EP 4) keep their own paces until ZeRO-1's reduction at the end.
  // While the healthy group's lead is short its second bucket waits for its own gradients, then for
  // the slow group: two of rank 0's waits grow with the lead. Later in the step the bucket waits
  // behind the first on its stream, and only one does: the 8-10 micro-batch windows, extended,
  // gave rank 0's waits 25 % high (0.0261 s against 0.0208 s). The arrivals of the settled pair
  // (8 micro-batches and a shorter one) show the lead overtaking the gradients before 96
  // micro-batches: simulated in full.
  const Json j = Json::parse(R"({
    "model": {"arch": "llama", "layers": 4, "hidden": 1024, "heads": 8, "kv_heads": 8, "ffn": 4096, "vocab": 1024,
              "tied_embeddings": false, "experts": 4, "top_k": 2, "moe_ffn": 1024, "shared_experts": 1},
    "cluster": {"topology": {"nodes": 4, "gpus_per_node": 8, "node": "nvswitch", "nics_per_node": 1,
                             "network": "infiniband-ndr", "fabric": "fat-tree", "levels": 2, "switch_radix": 8},
                "gpu": "h100-sxm"},
    "training": {"seq_len": 1024, "micro_batch": 1, "global_batch": 768, "precision": "megatron-bf16",
                 "moe_dispatcher": "deepep", "moe_router": "fake_balanced", "moe_grouped_gemm": false, "kernels": "fused",
                 "recompute": "selective", "recompute_modules": ["core_attn", "mlp", "layernorm", "moe"]},
    "parallelism": {"tp": 4, "pp": 1, "dp": 8, "sequence_parallel": false, "ep": 4, "zero": 1, "overlap_grad_reduce": false},
    "faults": {"stragglers": [{"gpu": 25, "slowdown": 1.1}]},
    "simulation": {"network": "analytic"}})");
  const StepConfig c = step_config(parse_scenario(j, "s.json"));
  REQUIRE(simulated_micro_batches(c) == 8);  // the settled pair's longer window
  const StepResult exact = simulate_step_exact(c);
  const StepResult fast = simulate_step(c);
  CHECK(fast.extrapolated_from == 0);
  CHECK(fast.peer_wait_s == Approx(exact.peer_wait_s).epsilon(1e-12));
  CHECK(fast.max_peer_wait_s == Approx(exact.max_peer_wait_s).epsilon(1e-12));
  CHECK(fast.step_time_s == Approx(exact.step_time_s).epsilon(1e-12));
  // (The test above extends a slowed GPU's steps whose arrivals keep what bound them.)
}

TEST_CASE("a pipeline's replicas at two paces are not extended where a kernel's launch stops binding", "[parallel][extrapolate]") {
  // An MoE pipeline (PP 2 x DP 16, EP 4: four expert groups at their own paces until the
  // reduction), host-bound, one GPU 10 % slow. Each replica settles into its period and the
  // rendezvous keep what bound them, but a healthy rank's kernels stop waiting for their launches
  // later in the step: extended from the windows, its idle split between host and bubble came out
  // 39 % and 87 % off. The kernels' records show it: simulated in full.
  const Json j = Json::parse(R"({
    "model": {"arch": "llama", "layers": 16, "hidden": 1024, "heads": 8, "kv_heads": 8, "ffn": 4096, "vocab": 1024,
              "tied_embeddings": false, "experts": 4, "top_k": 2, "kv_lora_rank": 128, "qk_rope_dim": 32, "head_dim": 64,
              "v_head_dim": 64, "q_lora_rank": 0, "moe_ffn": 1024, "shared_experts": 1},
    "cluster": {"topology": {"nodes": 4, "gpus_per_node": 8, "node": "nvswitch", "nics_per_node": 8,
                             "network": "infiniband-ndr", "fabric": "single-switch", "levels": 1},
                "gpu": "h100-sxm"},
    "training": {"seq_len": 1024, "micro_batch": 1, "global_batch": 1024, "precision": "nemo-fp8",
                 "moe_dispatcher": "alltoall", "moe_router": "learned", "moe_grouped_gemm": false,
                 "recompute": "selective", "recompute_modules": ["moe_act", "mla_up_proj"]},
    "parallelism": {"tp": 1, "pp": 2, "dp": 16, "ep": 4, "pp_schedule": "interleaved", "virtual_stages": 2,
                    "overlap_grad_reduce": false},
    "faults": {"stragglers": [{"gpu": 30, "slowdown": 1.1}]},
    "simulation": {"network": "analytic"}})");
  const StepConfig c = step_config(parse_scenario(j, "s.json"));
  REQUIRE(simulated_micro_batches(c) == 32);  // the windows are tried
  const StepResult exact = simulate_step_exact(c), fast = simulate_step(c);
  CHECK(fast.extrapolated_from == 0);
  CHECK(fast.host_stall_s == Approx(exact.host_stall_s).epsilon(1e-12));
  CHECK(fast.pipeline_bubble_s == Approx(exact.pipeline_bubble_s).epsilon(1e-12));
  CHECK(fast.step_time_s == Approx(exact.step_time_s).epsilon(1e-12));
}

TEST_CASE("a pipeline with a slow GPU is extended from two windows once every rank keeps one period", "[parallel][extrapolate]") {
  // Past a transient every simulated rank's passes start one shift apart a period later, the same
  // shift for all: two windows whose cool-downs start past it then grow as any longer step does.
  // Extended or simulated in full, the figures are the exact simulation's.
  auto plan = [](PipelineSchedule sched, double slowdown, std::int64_t dp, std::int64_t m) {
    StepConfig c = narrow(4, m);
    c.model.layers = 8;
    c.parallel.schedule = sched;
    c.parallel.virtual_stages = sched == PipelineSchedule::interleaved ? 2 : 1;
    c.parallel.dp = dp;
    c.parallel.tp = 2;
    c.parallel.sequence_parallel = true;
    c.training.global_batch = m * c.parallel.dp;
    c.faults.stragglers.push_back({5, slowdown, 0, 0, 0});
    return c;
  };
  std::map<std::pair<int, double>, std::int64_t> extended;
  for (const PipelineSchedule sched : {PipelineSchedule::one_f_one_b, PipelineSchedule::interleaved})
    for (const double slowdown : {1.2, 1.02}) {
      INFO("schedule " << int(sched) << ", slowdown " << slowdown);
      const StepConfig c = plan(sched, slowdown, 1, 96);
      const StepResult exact = simulate_step_exact(c);
      const StepResult fast = simulate_step(c);
      extended[{int(sched), slowdown}] = fast.extrapolated_from;
      CHECK(fast.micro_batches == 96);
      CHECK(fast.step_time_s == Approx(exact.step_time_s).epsilon(1e-9));
      CHECK(fast.pipeline_bubble_s == Approx(exact.pipeline_bubble_s).epsilon(1e-9));
      CHECK(fast.host_stall_s == Approx(exact.host_stall_s).epsilon(1e-9).margin(1e-15));
      CHECK(fast.peer_wait_s == Approx(exact.peer_wait_s).epsilon(1e-9).margin(1e-15));
      CHECK(fast.max_peer_wait_s == Approx(exact.max_peer_wait_s).epsilon(1e-9).margin(1e-15));
      CHECK(fast.exposed_comm_s == Approx(exact.exposed_comm_s).epsilon(1e-9));
      CHECK(fast.peak_bytes == exact.peak_bytes);
      CHECK(fast.rank_peak_bytes == exact.rank_peak_bytes);
    }
  // Which were extended (32 micro-batches and a shorter window) and which were not settled within
  // the 32 (simulated in full): the 20 % straggler sets the pace; the 2 % one hides in the slack.
  CHECK(extended[{int(PipelineSchedule::one_f_one_b), 1.2}] == 32);
  CHECK(extended[{int(PipelineSchedule::one_f_one_b), 1.02}] == 32);
  CHECK(extended[{int(PipelineSchedule::interleaved), 1.02}] == 32);
  // Two replicas, joined only by the reduction at the end, keep their own paces, each settled into
  // its own period: extended where their arrivals there (and every kernel's start) keep what bound
  // them. (The case that fails those checks: the MoE test above, and same_bindings in step.cpp.)
  for (const double slowdown : {1.2, 1.05}) {
    INFO("two replicas, slowdown " << slowdown);
    const StepConfig two = plan(PipelineSchedule::one_f_one_b, slowdown, 2, 96);
    const StepResult exact = simulate_step_exact(two), fast = simulate_step(two);
    CHECK(fast.extrapolated_from == 32);
    CHECK(fast.step_time_s == Approx(exact.step_time_s).epsilon(1e-9));
    CHECK(fast.pipeline_bubble_s == Approx(exact.pipeline_bubble_s).epsilon(1e-9));
    CHECK(fast.peer_wait_s == Approx(exact.peer_wait_s).epsilon(1e-9).margin(1e-15));
    CHECK(fast.max_peer_wait_s == Approx(exact.max_peer_wait_s).epsilon(1e-9).margin(1e-15));
    CHECK(fast.exposed_comm_s == Approx(exact.exposed_comm_s).epsilon(1e-9));
    CHECK(fast.dp_comm_exposed_s == Approx(exact.dp_comm_exposed_s).epsilon(1e-9).margin(1e-15));
    CHECK(fast.peak_bytes == exact.peak_bytes);
  }
  // Too few micro-batches for the windows to pay (32 and a shorter one): every one is simulated.
  CHECK(simulate_step(plan(PipelineSchedule::one_f_one_b, 1.2, 1, 48)).extrapolated_from == 0);
}

namespace {

StepConfig small_plan(std::int64_t dp, std::int64_t tp, std::int64_t pp, std::int64_t cp = 1) {
  StepConfig c = narrow(pp, 4 * pp);
  c.model.layers = 8;
  c.training.seq_len = 1024;
  c.parallel.dp = dp;
  c.parallel.tp = tp;
  c.parallel.cp = cp;
  c.parallel.sequence_parallel = tp > 1;
  c.training.global_batch = 4 * pp * dp;
  c.profile = default_profile(c.gpu);  // with host launch costs, so that host stalls show too
  return c;
}

}  // namespace

TEST_CASE("folded and unfolded simulations agree when every rank behaves alike", "[parallel][fold]") {
  std::vector<StepConfig> plans = {small_plan(2, 2, 2), small_plan(4, 1, 1), small_plan(2, 2, 1, 2), small_plan(8, 1, 2)};
  plans[1].parallel.fsdp = FsdpMode::full_shard;
  plans[3].parallel.zero = 1;
  plans[3].parallel.gpus_per_node = 4;  // data parallelism across nodes
  for (StepConfig c : plans) {
    const StepResult folded = simulate_step(c);
    c.fold = false;
    const StepResult full = simulate_step(c);
    INFO("dp " << c.parallel.dp << " tp " << c.parallel.tp << " pp " << c.parallel.pp << " cp " << c.parallel.cp);
    CHECK(folded.simulated_ranks == c.parallel.pp);
    CHECK(full.simulated_ranks == c.parallel.gpus());
    CHECK(full.step_time_s == Approx(folded.step_time_s).epsilon(1e-9));
    CHECK(full.peak_bytes == Approx(folded.peak_bytes).epsilon(1e-9));
    CHECK(full.compute_s == Approx(folded.compute_s).epsilon(1e-9));
    CHECK(full.exposed_comm_s == Approx(folded.exposed_comm_s).epsilon(1e-9).margin(1e-12));
    CHECK(full.pipeline_bubble_s == Approx(folded.pipeline_bubble_s).epsilon(1e-9).margin(1e-12));
    CHECK(full.kernels == folded.kernels);
    CHECK(full.peer_wait_exposed_s == Approx(0).margin(1e-12));
  }
}

TEST_CASE("a straggler slows every collective it joins, and folding it onto its stage is exact", "[parallel][fold][faults]") {
  StepConfig c = small_plan(4, 2, 2);
  const double healthy = simulate_step(c).step_time_s;
  c.faults.stragglers.push_back({5, 1.25, 0, 0, 0});  // GPU 5: stage 0 (8 GPUs a stage), tp rank 1, dp rank 2
  const StepResult folded = simulate_step(c);
  c.fold = false;
  const StepResult full = simulate_step(c);
  CHECK(folded.step_time_s > healthy * 1.1);
  CHECK(full.step_time_s == Approx(folded.step_time_s).epsilon(1e-9));
  // GPU 0 is healthy: its compute is not slower, it waits for GPU 5 in the collectives.
  CHECK(full.compute_s == Approx(simulate_step([&] { StepConfig h = c; h.faults = {}; return h; }()).compute_s));
  CHECK(full.peer_wait_s > 0);
  CHECK(full.waited_for_rank == 5);
  CHECK_FALSE(full.failed);
}

TEST_CASE("folded with stragglers, one GPU per symmetry class gives every GPU's figures exactly", "[parallel][fold][faults]") {
  struct Case {
    const char* name;
    StepConfig c;
  };
  std::vector<Case> cases;
  {
    StepConfig c = small_plan(4, 2, 2);
    c.faults.stragglers.push_back({5, 1.25, 0, 0, 0});
    cases.push_back({"TP 2, DP 4, PP 2, a slow GPU", c});
  }
  {
    StepConfig c = small_plan(4, 2, 2);
    c.parallel.zero = 1;
    c.faults.stragglers.push_back({3, 1.0, 2e-3, 0, 0});   // slow data loader on a first-stage GPU
    c.faults.stragglers.push_back({12, 1.1, 0, 5e-3, 2});  // a second-stage GPU: slow, and a stall
    cases.push_back({"ZeRO-1, a slow loader and a stall on two GPUs", c});
  }
  {
    StepConfig c = small_plan(4, 2, 4);
    c.parallel.schedule = PipelineSchedule::interleaved;
    c.parallel.virtual_stages = 2;
    c.parallel.p2p_blocking = true;
    c.training.global_batch = 8 * c.parallel.dp;
    c.faults.stragglers.push_back({9, 1.3, 0, 0, 0});
    cases.push_back({"interleaved, blocking transfers", c});
  }
  {
    StepConfig c = small_plan(4, 2, 1, 2);
    c.parallel.fsdp = FsdpMode::full_shard;
    c.faults.stragglers.push_back({6, 1.2, 0, 0, 0});
    cases.push_back({"CP 2 with FSDP", c});
  }
  {
    // Both GPUs of a TP group stall alike: one class, and its stall counted once.
    StepConfig c = small_plan(4, 2, 2);
    c.faults.stragglers.push_back({0, 1.0, 0, 5e-3, 1});
    c.faults.stragglers.push_back({1, 1.0, 0, 5e-3, 1});
    cases.push_back({"the same stall on two GPUs of one class", c});
  }
  for (Case& k : cases) {
    INFO(k.name);
    StepConfig c = k.c;
    const std::int64_t classes = simulated_ranks(c);
    const StepResult folded = simulate_step(c);
    c.fold = false;
    const StepResult full = simulate_step(c);
    CHECK(folded.simulated_ranks == classes);
    CHECK(classes > c.parallel.pp);
    CHECK(classes < c.parallel.gpus());
    CHECK(full.simulated_ranks == c.parallel.gpus());
    // GPU 0's own figures, not its stage's slowest GPU's.
    check_same_figures(folded, full);
  }
}

TEST_CASE("one straggler among 16,384 GPUs adds a few classes per stage, not a rank per GPU", "[parallel][fold][faults]") {
  StepConfig c = small_plan(128, 8, 16);
  c.faults.stragglers.push_back({12345, 1.2, 0, 0, 0});
  REQUIRE(c.parallel.gpus() == 16384);
  const std::int64_t classes = simulated_ranks(c);
  CHECK(classes > 16);
  CHECK(classes <= 4 * 16);
  // Two stragglers in symmetric places (same stage, same TP rank, other replicas) share a class.
  StepConfig two = c;
  two.faults.stragglers = {{0, 1.2, 0, 0, 0}, {8, 1.2, 0, 0, 0}};
  StepConfig one = c;
  one.faults.stragglers = {{0, 1.2, 0, 0, 0}};
  CHECK(simulated_ranks(two) <= simulated_ranks(one) + 16);
}

TEST_CASE("a stall longer than the NCCL timeout fails the step and names the GPUs", "[parallel][faults]") {
  StepConfig c = small_plan(2, 1, 2);
  c.fold = false;
  c.faults.nccl_timeout_s = 30;
  c.faults.stragglers.push_back({3, 1.0, 0, 45.0, 1});  // GPU 3 hangs 45 s before micro-batch 1
  const StepResult r = simulate_step(c);
  CHECK(r.failed);
  CHECK(r.failure.find("NCCL timeout") != std::string::npos);
  INFO(r.failure);
  // GPU 3's replica is late everywhere: stage 1 waits for GPU 3 itself, stage 0 for GPU 1, which
  // waits for GPU 3's gradients (NCCL's watchdog names the collective's peer, not the root cause).
  CHECK((r.waited_for_rank == 1 || r.waited_for_rank == 3));
  CHECK(r.failure.find("for GPU " + std::to_string(r.waited_for_rank)) != std::string::npos);
  CHECK(r.max_peer_wait_s > 30);
  c.faults.nccl_timeout_s = 600;
  const StepResult ok = simulate_step(c);
  CHECK_FALSE(ok.failed);
  CHECK(ok.step_time_s > 45);
}

TEST_CASE("FSDP and ZeRO-2 keep only gradient shards across accumulated micro-batches", "[parallel][memory]") {
  for (bool fsdp : {true, false}) {
    StepConfig c = small_plan(8, 1, 1);
    c.training.precision = *precision_recipe("bf16-mixed");
    if (fsdp) c.parallel.fsdp = FsdpMode::full_shard;
    else c.parallel.zero = 2;
    c.training.global_batch = 8;  // one micro-batch per rank
    const StepResult one = simulate_step(c);
    c.training.global_batch = 8 * 6;  // six accumulated
    const StepResult six = simulate_step(c);
    const int g = static_cast<int>(MemCategory::grads);
    INFO((fsdp ? "fsdp" : "zero2"));
    // Reduce-scattered every micro-batch: the accumulated shards and at most a layer's full
    // gradient in flight, far from the full fp32 gradient of every parameter (unsharded: >= 1).
    CHECK(six.peak_breakdown[g] < 0.3 * six.params_trainable * 4);
    CHECK(six.peak_bytes == Approx(one.peak_bytes).epsilon(0.05));
    // Every micro-batch adds one more reduce-scatter of the gradients.
    c.training.global_batch = 8 * 2;
    const StepResult two = simulate_step(c);
    CHECK(two.dp_comm_total_s > one.dp_comm_total_s);
    CHECK(six.dp_comm_total_s - one.dp_comm_total_s == Approx(5 * (two.dp_comm_total_s - one.dp_comm_total_s)).epsilon(1e-6));
  }
}

TEST_CASE("blocking pipeline transfers hold the sender's compute stream", "[parallel][pipeline]") {
  StepConfig c = uniform(8, 4, 8, PipelineSchedule::one_f_one_b);
  c.parallel.gpus_per_node = 1;  // every stage in its own node: transfers over the NIC
  const StepResult async = simulate_step(c);
  c.parallel.p2p_blocking = true;
  const StepResult blocking = simulate_step(c);
  // Each stage's compute stream now waits for its own sends: the step is longer by about the
  // transfers on the critical path, never shorter.
  CHECK(blocking.step_time_s > async.step_time_s);
  CHECK(blocking.step_time_s < async.step_time_s + 2 * blocking.pp_comm_s);
  CHECK(blocking.pp_comm_s == Approx(async.pp_comm_s));
}

TEST_CASE("a blocking transfer waits for the receiver to post its receive", "[parallel][pipeline]") {
  // Two stages, the second with three times the layers. Megatron's 1F1B (pre-2023) sends the
  // first stage's second forward output in send_forward_recv_backward; the last stage posts the
  // matching receive in send_backward_recv_forward, after its first backward pass. So that send
  // cannot start before the last stage's first send (its first backward's input gradient) does.
  StepConfig c = uniform(4, 2, 4, PipelineSchedule::one_f_one_b);
  c.parallel.layers_per_stage = {1, 3};
  c.parallel.gpus_per_node = 1;
  c.keep_trace = true;
  auto sends_of = [](const StepResult& r, int rank) {
    std::vector<double> starts;
    for (const TraceSpan& t : r.trace)
      if (t.rank == rank && t.name == "pp_send") starts.push_back(t.start.seconds());
    std::sort(starts.begin(), starts.end());
    return starts;
  };
  const StepResult async = simulate_step(c);
  c.parallel.p2p_blocking = true;
  const StepResult blocking = simulate_step(c);
  const std::vector<double> a0 = sends_of(async, 0), a1 = sends_of(async, 1);
  const std::vector<double> b0 = sends_of(blocking, 0), b1 = sends_of(blocking, 1);
  REQUIRE(a0.size() == 4);
  REQUIRE(b0.size() == 4);
  REQUIRE(a1.size() == 4);
  REQUIRE(b1.size() == 4);
  // Asynchronous, the first stage sends its second output as soon as it is computed, long
  // before the slow stage finishes its first backward pass; synchronous, only then.
  CHECK(a0[1] < a1[0]);
  CHECK(b0[1] >= b1[0] - 1e-12);
  // The first send's receive was posted at the start: it does not wait.
  CHECK(b0[0] == Approx(a0[0]));
  // The slow stage decides the step either way.
  CHECK(blocking.step_time_s == Approx(async.step_time_s).epsilon(0.05));
}

TEST_CASE("ZB-H1 splits the backward pass and fills the pipeline's tail with W passes", "[parallel][pipeline]") {
  StepConfig c = uniform(8, 4, 16, PipelineSchedule::one_f_one_b);
  c.parallel.gpus_per_node = 1;
  const StepResult one_f_one_b = simulate_step(c);
  c.parallel.schedule = PipelineSchedule::zero_bubble;
  c.keep_trace = true;
  const StepResult zb = simulate_step(c);
  // The same kernels, in another order: the same compute, a smaller bubble, a shorter step.
  CHECK(zb.kernels == one_f_one_b.kernels);
  CHECK(zb.compute_s == Approx(one_f_one_b.compute_s).epsilon(1e-9));
  CHECK(zb.pipeline_bubble_s < 0.8 * one_f_one_b.pipeline_bubble_s);
  CHECK(zb.step_time_s < one_f_one_b.step_time_s);
  // Stage i defers i W passes to its end: the last stage runs weight gradients after its last
  // input-gradient kernel; the first runs each right after its backward.
  auto last_of = [&](int rank, const std::string& suffix) {
    double t = -1;
    for (const TraceSpan& s : zb.trace)
      if (s.rank == rank && s.name.size() >= suffix.size() && s.name.compare(s.name.size() - suffix.size(), suffix.size(), suffix) == 0)
        t = std::max(t, s.end.seconds());
    return t;
  };
  CHECK(last_of(3, "_wgrad") > last_of(3, "_dgrad"));
  // What the W passes need (linear inputs, output gradients) lives until they run: the last
  // stage, which holds one micro-batch under 1F1B, holds more.
  REQUIRE(zb.rank_peak_bytes.size() == 4);
  CHECK(zb.rank_peak_bytes[3] > one_f_one_b.rank_peak_bytes[3]);
  CHECK(zb.rank_peak_bytes[0] == Approx(one_f_one_b.rank_peak_bytes[0]).epsilon(0.02));
  // Folding stays exact.
  c.keep_trace = false;
  c.parallel.dp = 2;
  c.training.global_batch = 32;
  const StepResult folded = simulate_step(c);
  c.fold = false;
  const StepResult full = simulate_step(c);
  CHECK(full.step_time_s == Approx(folded.step_time_s).epsilon(1e-12));
  CHECK(full.peak_bytes == Approx(folded.peak_bytes).epsilon(1e-12));
}

TEST_CASE("tied embeddings across a pipeline all-reduce their gradient between the end stages", "[parallel][pipeline]") {
  StepConfig c = uniform(8, 4, 8, PipelineSchedule::one_f_one_b);
  c.model.vocab = 128000;  // a large embedding, so the all-reduce shows
  c.parallel.gpus_per_node = 1;
  c.model.tied_embeddings = false;
  const StepResult untied = simulate_step(c);
  c.model.tied_embeddings = true;
  const StepResult tied = simulate_step(c);
  // 128000 x 2048 fp32 gradients (1 GB) between the first and last stage over a 25 GB/s NIC:
  // about 40 ms after the last backward pass, before the optimizer.
  CHECK(tied.step_time_s - untied.step_time_s == Approx(1.048576e9 / (25e9 * 0.9)).epsilon(0.25));
}

TEST_CASE("running the pipeline schedule per share of the micro-batches pays a fill and drain each run", "[parallel][pipeline]") {
  // torch.distributed.pipelining's gradient accumulation (torchtitan, NeMo AutoModel): k runs of
  // a schedule over m/k micro-batches. With equal stages of time t a micro-batch, one 1F1B run
  // takes (m/k + p - 1) t: k of them back to back idle about k (p - 1) t against (p - 1) t.
  const std::int64_t p = 4, m = 16;
  for (const auto& [sched, v] : {std::pair{PipelineSchedule::one_f_one_b, std::int64_t(1)}, std::pair{PipelineSchedule::interleaved, std::int64_t(2)}}) {
    INFO("schedule " << int(sched));
    const StepResult one = simulate_step(uniform(16, p, m, sched, v));
    StepConfig c = uniform(16, p, m, sched, v);
    c.parallel.pipeline_runs = 4;
    const StepResult four = simulate_step(c);
    CHECK(four.compute_s == Approx(one.compute_s).epsilon(1e-9));
    CHECK(four.step_time_s > one.step_time_s);
    // Each run's fill and drain overlap the next run's only where a stage has nothing left
    // to wait for: between 2 and 4 times the single schedule's idle time.
    CHECK(four.pipeline_bubble_s > 2.0 * one.pipeline_bubble_s);
    CHECK(four.pipeline_bubble_s < 4.0 * one.pipeline_bubble_s * 1.05);
    CHECK(four.micro_batches == m);
    CHECK(simulated_micro_batches(c) == m);  // not one steady state: every micro-batch simulated
    // As many micro-batches' activations at once as one run of m/4 keeps.
    StepConfig quarter = uniform(16, p, m / 4, sched, v);
    CHECK(four.rank_peak_bytes[0] == Approx(simulate_step(quarter).rank_peak_bytes[0]).epsilon(1e-9));
  }
}

TEST_CASE("pipeline_runs is checked against the plan", "[parallel][io]") {
  Json j = {{"model", "llama-3.2-1b"}, {"cluster", {{"gpu", "h100-sxm"}, {"nodes", 1}, {"gpus_per_node", 4}}},
            {"training", {{"seq_len", 1024}, {"global_batch", 12}}}, {"parallelism", {{"pp", 4}, {"pipeline_runs", 3}}}};
  CHECK_NOTHROW(parse_scenario(j, "s.json"));
  j["parallelism"]["pipeline_runs"] = 5;
  CHECK_THROWS_WITH(parse_scenario(j, "s.json"), Catch::Contains("/parallelism/pipeline_runs") && Catch::Contains("12 micro-batches"));
  j["parallelism"] = {{"pp", 1}, {"dp", 4}, {"pipeline_runs", 3}};
  CHECK_THROWS_WITH(parse_scenario(j, "s.json"), Catch::Contains("pipeline_runs") && Catch::Contains("pp > 1"));
  j["parallelism"] = {{"pp", 4}, {"pipeline_runs", 3}, {"pipeline_p2p", "blocking"}};
  CHECK_THROWS_WITH(parse_scenario(j, "s.json"), Catch::Contains("pipeline_runs"));
  j["parallelism"] = {{"pp", 4}, {"pipeline_runs", 3}, {"pp_schedule", "interleaved"}, {"virtual_stages", 2}};
  CHECK_NOTHROW(parse_scenario(j, "s.json"));  // 4 micro-batches a run
  j["parallelism"]["pipeline_runs"] = 6;
  CHECK_THROWS_WITH(parse_scenario(j, "s.json"), Catch::Contains("a run") && Catch::Contains("multiple of pp"));
}

TEST_CASE("Megatron's recompute modules: dropped outputs are made again for backward, and memory falls", "[parallel][recompute]") {
  // A DeepSeek-style block on one GPU: MLA, 8 experts top 2 with a shared one, one dense layer.
  Json j = {{"model", {{"arch", "llama"}, {"layers", 3}, {"hidden", 1024}, {"heads", 8}, {"kv_heads", 8}, {"head_dim", 64},
                       {"ffn", 4096}, {"vocab", 1000}, {"tied_embeddings", false}, {"experts", 8}, {"top_k", 2},
                       {"moe_ffn", 512}, {"shared_experts", 1}, {"dense_layers", 1}, {"q_lora_rank", 256},
                       {"kv_lora_rank", 128}, {"qk_rope_dim", 32}, {"v_head_dim", 64}}},
            {"cluster", {{"gpu", "h100-sxm"}}},
            {"training", {{"seq_len", 4096}, {"micro_batch", 2}, {"global_batch", 2}, {"precision", "bf16"}, {"recompute", "selective"}}}};
  auto run = [&](Json modules) {
    Json k = j;
    if (!modules.is_null()) k["training"]["recompute_modules"] = modules;
    return simulate_step(step_config(parse_scenario(k, "s.json")));
  };
  const StepResult attn = run(nullptr), same = run(Json::array({"core_attn"}));
  CHECK(same.peak_bytes == attn.peak_bytes);  // the default is core_attn
  CHECK(same.step_time_s == attn.step_time_s);
  double last_peak = attn.peak_bytes;
  // Each discarding module drops more and recomputes more: layernorm, then the MLA up-projections,
  // then the experts' activation.
  Json mods = Json::array({"core_attn"});
  for (const char* m : {"layernorm", "mla_up_proj", "moe_act"}) {
    INFO(m);
    mods.push_back(m);
    const StepResult r = run(mods);
    CHECK(r.peak_bytes < last_peak);
    CHECK(r.recompute_s > attn.recompute_s);
    CHECK(r.compute_s == Approx(attn.compute_s).epsilon(1e-9));  // the same forward and backward
    last_peak = r.peak_bytes;
  }
  // Checkpointed submodules keep only their inputs: the MoE layer and the dense MLP.
  const StepResult moe = run(Json::array({"moe", "mlp"}));
  CHECK(moe.peak_bytes < attn.peak_bytes);
  CHECK(moe.recompute_s > attn.recompute_s);
  // Bad input.
  j["training"]["recompute_modules"] = Json::array({"attention"});
  CHECK_THROWS_WITH(parse_scenario(j, "s.json"), Catch::Contains("/training/recompute_modules") && Catch::Contains("core_attn"));
  j["training"]["recompute"] = "full";
  j["training"]["recompute_modules"] = Json::array({"moe_act"});
  CHECK_THROWS_WITH(parse_scenario(j, "s.json"), Catch::Contains("recompute_modules") && Catch::Contains("selective"));
}

TEST_CASE("an overlapped parameter gather holds up only what the next forward cannot hide", "[parallel][zero]") {
  // ZeRO-1 over 8 GPUs across two nodes (the all-gather crosses the slow link), a pipeline of 2.
  StepConfig c = small_plan(8, 1, 2);
  c.parallel.zero = 1;
  c.parallel.gpus_per_node = 4;
  const StepResult after = simulate_step(c);
  c.parallel.overlap_param_gather = true;
  const StepResult ahead = simulate_step(c);
  // The same traffic, the same work and memory; the step shorter by what the forward hides.
  CHECK(ahead.step_time_s < after.step_time_s);
  CHECK(ahead.dp_comm_total_s == Approx(after.dp_comm_total_s).epsilon(1e-12));
  CHECK(ahead.compute_s == Approx(after.compute_s).epsilon(1e-12));
  CHECK(ahead.peak_bytes == Approx(after.peak_bytes).epsilon(1e-12));
  // A gather slower than the whole forward: at least its excess over the forward stays exposed.
  StepConfig slow_link = c;
  slow_link.parallel.links.inter_node_bandwidth = 0.05e9;
  const StepResult sl = simulate_step(slow_link);
  slow_link.parallel.overlap_param_gather = false;
  const StepResult sl_after = simulate_step(slow_link);
  CHECK(sl.step_time_s < sl_after.step_time_s);
  CHECK(sl_after.step_time_s - sl.step_time_s < sl.compute_s);
  // Folding stays exact, every rank alike and with a straggler; windows extend it exactly.
  StepConfig full = c;
  full.fold = false;
  check_same_figures(ahead, simulate_step(full));
  StepConfig slow = c;
  slow.faults.stragglers.push_back({3, 1.2, 0, 0, 0});
  const StepResult slow_folded = simulate_step(slow);
  slow.fold = false;
  check_same_figures(slow_folded, simulate_step(slow));
  StepConfig longer = c;
  longer.training.global_batch = 8 * 128;  // 128 micro-batches: extended from windows
  REQUIRE(simulated_micro_batches(longer) < 128);
  const StepResult ext = simulate_step(longer);
  const StepResult exact = simulate_step_exact(longer);
  CHECK(ext.step_time_s == Approx(exact.step_time_s).epsilon(1e-9));
  CHECK(ext.exposed_comm_s == Approx(exact.exposed_comm_s).epsilon(1e-6).margin(1e-12));
  // Only ZeRO-1/2 gather parameters after the optimizer.
  Json j = {{"model", "llama-3.2-1b"},
            {"cluster", {{"gpu", "h100-sxm"}, {"nodes", 1}, {"gpus_per_node", 8}}},
            {"training", {{"seq_len", 1024}, {"global_batch", 8}}},
            {"parallelism", {{"dp", 8}, {"overlap_param_gather", true}}}};
  CHECK_THROWS_WITH(parse_scenario(j, "z.json"), Catch::Contains("/parallelism/overlap_param_gather") && Catch::Contains("zero"));
  j["parallelism"]["zero"] = 1;
  CHECK(parse_scenario(j, "z.json").parallelism.overlap_param_gather);
}
