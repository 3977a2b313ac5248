// Collectives run apart: one on links nobody else uses is worked out on a private network and
// costs one event; when another flow comes onto its links it is carried back onto the network
// where it had got to. Everything must come out to the picosecond as if every flow had run on
// the network, whenever the other flow arrives (at the start, mid-phase, between phases, at the
// instant a flow drains, during the last latency, after).
#include <catch2/catch.hpp>

#include <numeric>

#include "hardware/cluster.hpp"
#include "tests/sim/dgx_cluster.hpp"
#include "sim/network/collectives.hpp"
#include "sim/training/step.hpp"
#include "tools/io/scenario.hpp"
#include "tools/io/simulate.hpp"

using namespace scaleout;

namespace {

ClusterSpec hgx(int nodes) { return test::dgx(GpuGeneration::hopper, nodes); }

std::vector<int> iota(int lo, int n) {
  std::vector<int> v(std::size_t(n), 0);
  std::iota(v.begin(), v.end(), lo);
  return v;
}

CollectiveSpec spec(CollectiveKind k, std::vector<int> ranks, double bytes, std::optional<CollectiveAlgorithm> a = {}) {
  CollectiveSpec s;
  s.kind = k;
  s.ranks = std::move(ranks);
  s.bytes = bytes;
  s.algorithm = a;
  s.protocol = Protocol::simple;
  return s;
}

struct Ends {
  Time first, second;
  std::uint64_t flows = 0;
};

// `first` (a batch: its first spec's end is reported) at 0, `second` at `delay`.
Ends run_pair(const Topology& t, bool apart, const std::vector<CollectiveSpec>& first, const CollectiveSpec& second, Time delay) {
  Simulator sim;
  FlowNetwork net(sim, t);
  net.set_apart(apart);
  Ends e;
  run_collectives(net, prepare_collectives(net, first), [&] { e.first = sim.now(); });
  sim.schedule_at(delay, [&] { run_collective(net, second, [&] { e.second = sim.now(); }); });
  sim.run();
  e.flows = net.flows_started();
  return e;
}

}  // namespace

TEST_CASE("a collective run apart ends exactly where its flows would, whenever another flow comes onto its links",
          "[network][apart]") {
  const Topology t = build_topology(hgx(2));
  struct Case {
    const char* name;
    std::vector<CollectiveSpec> first;
    CollectiveSpec second;
  };
  const std::vector<Case> cases = {
      // One phase: a ring over the node's NVLinks, and a transfer out of GPU 0 over them.
      {"ring, then a transfer", {spec(CollectiveKind::all_reduce, iota(0, 8), 3e8, CollectiveAlgorithm::ring)},
       spec(CollectiveKind::send_recv, {0, 1}, 5e7)},
      // Phases one after another (halving-doubling) and a batch of two groups, met by a third.
      {"halving-doubling batch",
       {spec(CollectiveKind::all_reduce, iota(0, 4), 2e8, CollectiveAlgorithm::halving_doubling),
        spec(CollectiveKind::all_reduce, iota(4, 4), 1e8, CollectiveAlgorithm::halving_doubling)},
       spec(CollectiveKind::all_gather, {2, 5}, 1e8)},
      // Across nodes: a hierarchical all-reduce (three phases) met by a ring on the same rails.
      {"hierarchical across nodes", {spec(CollectiveKind::all_reduce, iota(0, 16), 4e8, CollectiveAlgorithm::hierarchical)},
       spec(CollectiveKind::all_reduce, {3, 11}, 2e8, CollectiveAlgorithm::ring)},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    // Alone: its end, and the instants where its flows drain lie just before it.
    Simulator sim;
    FlowNetwork alone(sim, t);
    Time alone_end;
    run_collectives(alone, prepare_collectives(alone, c.first), [&] { alone_end = sim.now(); });
    sim.run();
    CHECK(alone.flows_started() == 0);  // nothing else on its links: run apart
    const Time last = alone.simulator().now();
    REQUIRE(alone_end > Time::zero());
    std::vector<Time> delays = {Time::zero(), Time::from_ps(1), Time::from_ps(alone_end.ps() / 7),
                                Time::from_ps(alone_end.ps() / 3), Time::from_ps(alone_end.ps() / 2),
                                alone_end - Time::from_us(30), alone_end - Time::from_us(3),
                                alone_end - Time::from_ps(1), alone_end, last, last + Time::from_us(1)};
    // The instants of the flows' own events (drains and deliveries) on the plain network.
    {
      Simulator s2;
      FlowNetwork n2(s2, t);
      n2.set_apart(false);
      run_collectives(n2, prepare_collectives(n2, c.first), [] {});
      while (!s2.idle()) {
        const Time t2 = s2.next_event_time();
        delays.push_back(t2);
        s2.run(t2);  // every event of this instant
      }
    }
    for (Time d : delays) {
      INFO("second collective at " << d.ps() << " ps");
      const Ends on = run_pair(t, true, c.first, c.second, d);
      const Ends off = run_pair(t, false, c.first, c.second, d);
      CHECK(on.first.ps() == off.first.ps());
      CHECK(on.second.ps() == off.second.ps());
      CHECK(on.flows <= off.flows);
    }
  }
}

TEST_CASE("one batch evicted again and again, at other points of its run, ends where its flows would each time",
          "[network][apart]") {
  // The first eviction of a batch keeps its states alone, one per instant; later evictions of the
  // same batch (a step launches it every micro-batch) read them: a mid-phase, a between-phase and
  // a just-drained point must each come out as a fresh replay would, in any order.
  const Topology t = build_topology(hgx(2));
  const std::vector<CollectiveSpec> first = {spec(CollectiveKind::all_reduce, iota(0, 16), 4e8, CollectiveAlgorithm::hierarchical)};
  const CollectiveSpec second = spec(CollectiveKind::all_reduce, {3, 11}, 2e8, CollectiveAlgorithm::ring);
  // The plain network's instants of the batch alone, and points between them.
  std::vector<Time> instants;
  {
    Simulator s2;
    FlowNetwork n2(s2, t);
    n2.set_apart(false);
    run_collectives(n2, prepare_collectives(n2, first), [] {});
    while (!s2.idle()) {
      const Time t2 = s2.next_event_time();
      instants.push_back(t2);
      s2.run(t2);
    }
  }
  REQUIRE(instants.size() >= 4);
  std::vector<Time> delays;
  for (std::size_t i = instants.size(); i-- > 1;) {  // late points first, then earlier ones
    delays.push_back(instants[i]);
    delays.push_back(instants[i] - Time::from_ps(1));
    delays.push_back(Time::from_ps((instants[i].ps() + instants[i - 1].ps()) / 2));
  }
  delays.push_back(Time::zero());
  delays.push_back(instants.back() + Time::from_us(1));  // after: no eviction
  const Time period = Time::from_ps(instants.back().ps() * 4) + Time::from_us(1000);
  auto run = [&](bool apart) {
    Simulator sim;
    FlowNetwork net(sim, t);
    net.set_apart(apart);
    const auto batch = prepare_collectives(net, first);  // one batch, launched every round
    std::vector<Time> ends(2 * delays.size());
    for (std::size_t k = 0; k < delays.size(); ++k) {
      const Time at = Time::from_ps(period.ps() * std::int64_t(k));
      sim.schedule_at(at, [&, k] { run_collectives(net, batch, [&, k] { ends[2 * k] = sim.now(); }); });
      sim.schedule_at(at + delays[k], [&, k] { run_collective(net, second, [&, k] { ends[2 * k + 1] = sim.now(); }); });
    }
    sim.run();
    return std::pair{ends, net.flows_started()};
  };
  const auto [on, on_flows] = run(true);
  const auto [off, off_flows] = run(false);
  for (std::size_t k = 0; k < delays.size(); ++k) {
    INFO("round " << k << ", second collective " << delays[k].ps() << " ps after the batch");
    CHECK(on[2 * k].ps() == off[2 * k].ps());
    CHECK(on[2 * k + 1].ps() == off[2 * k + 1].ps());
  }
  CHECK(on_flows < off_flows);
}

TEST_CASE("collectives run apart give the step every figure of the step run all as flows", "[network][apart][step]") {
  auto plan = [](Json parallelism, int nodes, Json extra = Json::object()) {
    Json j = {{"model", {{"arch", "llama"}, {"layers", 8}, {"hidden", 1024}, {"heads", 8}, {"kv_heads", 8}, {"ffn", 4096},
                         {"vocab", 8192}, {"tied_embeddings", false}}},
              {"cluster", {{"gpu", "h100-sxm"},
                           {"topology", {{"nodes", nodes}, {"gpus_per_node", 8}, {"node", "nvswitch"}, {"nics_per_node", 8},
                                         {"network", "infiniband-ndr"}, {"fabric", "single-switch"}, {"levels", 1}}}}},
              {"training", {{"seq_len", 2048}, {"micro_batch", 1}, {"global_batch", 32}, {"precision", "bf16-mixed"}}},
              {"parallelism", std::move(parallelism)}};
    for (auto it = extra.begin(); it != extra.end(); ++it) j[it.key()] = it.value();
    return j;
  };
  const std::vector<std::pair<const char*, Json>> cases = {
      {"TP 4 x PP 4 interleaved, DP 2",
       plan({{"tp", 4}, {"pp", 4}, {"dp", 2}, {"pp_schedule", "interleaved"}, {"virtual_stages", 2}}, 4)},
      {"FSDP over 16", plan({{"dp", 16}, {"fsdp", "full_shard"}}, 2)},
      {"TP 2 x DP 8, ZeRO-1, a slow NIC (every GPU simulated)",
       plan({{"tp", 2}, {"dp", 8}, {"zero", 1}}, 2, {{"faults", {{"links", {{{"nic", {1, 3}}, {"bandwidth_factor", 0.25}}}}}}})},
      {"TP 2 x PP 2 x DP 4, 1F1B, unfolded", plan({{"tp", 2}, {"pp", 2}, {"dp", 4}}, 2, {{"simulation", {{"fold", "off"}}}})},
      // TP and DP share the GPUs' NVLink ports: the TP collectives join runs until the gradient
      // reduction's traffic meets them (then their group launches them, in a second round).
      {"TP 2 x DP 8, DDP, the reduction on the TP links", plan({{"tp", 2}, {"dp", 8}}, 2)},
      // A slow GPU: its TP peer's group waits for it; the other TP groups (two classes each)
      // run in lock-step and join their ranks' runs.
      {"TP 2 x PP 2 x DP 4 with a slow GPU", plan({{"tp", 2}, {"pp", 2}, {"dp", 4}}, 2,
                                                  {{"faults", {{"stragglers", {{{"gpu", 5}, {"slowdown", 1.2}}}}}}})},
  };
  for (const auto& [name, j0] : cases) {
    INFO(name);
    Json j = j0;
    const StepResult on = simulate_scenario(parse_scenario(j, "test.json"));
    j["simulation"]["apart"] = "off";
    const StepResult off = simulate_scenario(parse_scenario(j, "test.json"));
    REQUIRE(on.failure.empty());
    // Run apart, a collective whose batch met no other traffic joins its rank's run (fewer tasks:
    // the fingerprints differ); every figure is the same.
    CHECK(on.step_time_s == off.step_time_s);
    // (Joined collectives add their lengths as the run is built, launched ones from their tasks'
    // times: the sums may differ in the last bits.)
    CHECK(on.exposed_comm_s == Approx(off.exposed_comm_s).epsilon(1e-12));
    CHECK(on.dp_comm_total_s == off.dp_comm_total_s);
    CHECK(on.tp_comm_s == Approx(off.tp_comm_s).epsilon(1e-12));
    CHECK(on.cp_comm_s == Approx(off.cp_comm_s).epsilon(1e-12));
    CHECK(on.ep_comm_s == Approx(off.ep_comm_s).epsilon(1e-12));
    CHECK(on.pp_comm_s == off.pp_comm_s);
    CHECK(on.pipeline_bubble_s == off.pipeline_bubble_s);
    CHECK(on.peak_bytes == off.peak_bytes);
    CHECK(on.rank_peak_bytes == off.rank_peak_bytes);
    CHECK(on.events < off.events);
  }
}

TEST_CASE("simulation.apart takes on or off", "[network][apart][input]") {
  Json j = {{"model", "llama-3-8b"},
            {"cluster", {{"gpu", "h100-sxm"}, {"nodes", 1}, {"gpus_per_node", 8}}},
            {"training", {{"seq_len", 2048}, {"micro_batch", 1}, {"global_batch", 8}}},
            {"parallelism", {{"dp", 8}}},
            {"simulation", {{"network", "flow"}, {"apart", "off"}}}};
  CHECK_FALSE(parse_scenario(j, "test.json").collectives_apart);
  j["simulation"]["apart"] = "maybe";
  CHECK_THROWS_WITH(parse_scenario(j, "test.json"), Catch::Contains("/simulation/apart") && Catch::Contains("on"));
}

TEST_CASE("runs apart start the private network's clock from zero: long steps do not overflow it", "[network][apart]") {
  // Eight disjoint pairs, each all-reduce some 1.5e6 s long: together more than int64 picoseconds
  // hold (9.2e6 s) had the private clock run on from one batch to the next.
  const Topology t = build_topology(hgx(2));
  auto ends = [&](bool apart) {
    Simulator sim;
    FlowNetwork net(sim, t);
    net.set_apart(apart);
    std::vector<Time> out(8);
    for (int i = 0; i < 8; ++i)
      run_collective(net, spec(CollectiveKind::all_reduce, {2 * i, 2 * i + 1}, 6e17 * (1 + 0.01 * i), CollectiveAlgorithm::ring),
                     [&out, &sim, i] { out[std::size_t(i)] = sim.now(); });
    sim.run();
    return out;
  };
  const std::vector<Time> on = ends(true), off = ends(false);
  REQUIRE(off[0].seconds() > 1e6);
  for (std::size_t i = 0; i < on.size(); ++i) CHECK(on[i].ps() == off[i].ps());
}

TEST_CASE("simultaneous ends run in launch order either way: the traces are identical too", "[network][apart][step]") {
  // ZeRO-3 with CP and SP, every GPU simulated on two B200 nodes of four NICs: collectives of
  // several groups end at the same picosecond (a reviewer's case, where a memory counter once
  // showed two allocations of one instant swapped).
  Json j = {{"model", {{"base", "gpt2"}, {"layers", 2}}},
            {"cluster", {{"gpu", "b200"},
                         {"topology", {{"nodes", 2}, {"gpus_per_node", 8}, {"node", "nvswitch"}, {"nics_per_node", 4},
                                       {"network", "infiniband-ndr"}, {"fabric", "single-switch"}}}}},
            {"training", {{"seq_len", 2048}, {"micro_batch", 2}, {"global_batch", 8}, {"precision", "bf16-mixed"},
                          {"optimizer", "adamw"}, {"recompute", "none"}, {"attention", "flash"}}},
            {"parallelism", {{"dp", 4}, {"tp", 2}, {"pp", 1}, {"cp", 2}, {"sequence_parallel", true}, {"zero", 3}}},
            {"simulation", {{"fold", "off"}}}};
  const StepResult on = simulate_scenario(parse_scenario(j, "test.json"), true);
  j["simulation"]["apart"] = "off";
  const StepResult off = simulate_scenario(parse_scenario(j, "test.json"), true);
  REQUIRE(on.trace.size() == off.trace.size());
  for (std::size_t i = 0; i < on.trace.size(); ++i) {
    INFO("span " << i << " " << on.trace[i].name);
    CHECK(on.trace[i].name == off.trace[i].name);
    CHECK(on.trace[i].rank == off.trace[i].rank);
    CHECK(on.trace[i].start.ps() == off.trace[i].start.ps());
    CHECK(on.trace[i].end.ps() == off.trace[i].end.ps());
  }
  REQUIRE(on.memory_timeline.size() == off.memory_timeline.size());
  for (std::size_t i = 0; i < on.memory_timeline.size(); ++i) {
    CHECK(on.memory_timeline[i].first.ps() == off.memory_timeline[i].first.ps());
    CHECK(on.memory_timeline[i].second == off.memory_timeline[i].second);
  }
  CHECK(on.events < off.events);
}
