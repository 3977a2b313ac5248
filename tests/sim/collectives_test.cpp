// Collectives as flows: closed forms on uncongested rings (NCCL's latency model + the alpha-beta
// bandwidth term), NVLS, rails across nodes, NCCL's choice per size, contention between
// concurrent collectives, and the errors of impossible requests.
#include <catch2/catch.hpp>

#include <numeric>

#include "hardware/cluster.hpp"
#include "tests/sim/dgx_cluster.hpp"
#include "sim/network/collective_model.hpp"
#include "sim/network/collectives.hpp"

using namespace scaleout;

namespace {

using test::dgx;

std::vector<int> iota(int lo, int n) {
  std::vector<int> v(std::size_t(n), 0);
  std::iota(v.begin(), v.end(), lo);
  return v;
}

CollectiveSpec spec(CollectiveKind k, std::vector<int> ranks, double bytes, std::optional<CollectiveAlgorithm> a = {},
                    std::optional<Protocol> p = {}) {
  CollectiveSpec s;
  s.kind = k;
  s.ranks = std::move(ranks);
  s.bytes = bytes;
  s.algorithm = a;
  s.protocol = p;
  return s;
}


}  // namespace

TEST_CASE("ring all-reduce on an uncongested ring: 2(p-1)a + 2(p-1)/p S/B after NCCL's base latency", "[sim]") {
  // One H100 NVSwitch node: B = 450 GB/s x 20.6/25 per direction, a = 3.4 us (NCCL ring Simple
  // per NVLink step), base 8.4 us.
  const Topology t = build_topology(dgx(GpuGeneration::hopper, 1));
  const double b = 450e9 * 20.6 / 25;
  for (int p : {2, 4, 8}) {
    const auto s = spec(CollectiveKind::all_reduce, iota(0, p), 256e6, CollectiveAlgorithm::ring, Protocol::simple);
    const double expected = 8.4e-6 + collective_seconds(CollectiveKind::all_reduce, p, s.bytes, b, 3.4e-6);
    CHECK(time_collective(t, s) == Approx(expected).epsilon(1e-6));
  }
}

TEST_CASE("ring all-gather and reduce-scatter: (p-1)a + (p-1)/p S/B", "[sim]") {
  const Topology t = build_topology(dgx(GpuGeneration::ampere, 1));
  const double b = 300e9 * 0.8;
  for (auto k : {CollectiveKind::all_gather, CollectiveKind::reduce_scatter}) {
    const auto s = spec(k, iota(0, 8), 1e9, CollectiveAlgorithm::ring, Protocol::simple);
    CHECK(time_collective(t, s) == Approx(8.4e-6 + collective_seconds(k, 8, 1e9, b, 3.4e-6)).epsilon(1e-6));
  }
}

TEST_CASE("broadcast pipelines along the ring: a + S/B", "[sim]") {
  const Topology t = build_topology(dgx(GpuGeneration::ampere, 1));
  const auto s = spec(CollectiveKind::broadcast, iota(0, 8), 1e9, CollectiveAlgorithm::ring, Protocol::simple);
  CHECK(time_collective(t, s) == Approx(8.4e-6 + 3.4e-6 + 1e9 / 240e9).epsilon(1e-6));
}

TEST_CASE("NVLS all-reduce: each GPU moves S(p+1)/p through the switch at 5/6 of NVLink", "[sim]") {
  const Topology t = build_topology(dgx(GpuGeneration::hopper, 1));
  const double b = 450e9 * 20.6 / 25;
  const auto s = spec(CollectiveKind::all_reduce, iota(0, 8), 8 * kGiB, CollectiveAlgorithm::nvls);
  const double time = time_collective(t, s);
  CHECK(time == Approx(23e-6 + s.bytes * 9 / 8 / (b * 5 / 6)).epsilon(1e-6));
  // nccl-tests' bus bandwidth: about 480 GB/s on 8 H100.
  CHECK(s.bytes / time * 1.75 / 1e9 == Approx(480).epsilon(0.01));
}

TEST_CASE("ring across nodes: one channel per NIC rail, bus bandwidth = rails x NIC", "[sim]") {
  // Two DGX A100, 8 HDR NICs: 8 x 25 GB/s x 0.96 = 192 GB/s (NVIDIA measures 192, nccl#812).
  const Topology t = build_topology(dgx(GpuGeneration::ampere, 2));
  const auto s = spec(CollectiveKind::all_reduce, iota(0, 16), 8 * kGiB, CollectiveAlgorithm::ring, Protocol::simple);
  const double busbw = s.bytes / time_collective(t, s) * bus_bandwidth_factor(s.kind, 16);
  CHECK(busbw / 1e9 == Approx(192).epsilon(0.005));
}

TEST_CASE("closed form across nodes: members per node multiply the NIC bandwidth of a ring", "[sim]") {
  // 16 GPUs in two nodes of eight, 22.5 GB/s NIC share each, 240 GB/s NVLink.
  const TwoTierLinks l{240e9, 3e-6, 22.5e9, 6e-6};
  const double s = 8e9;
  // One member per node: the plain ring on the NIC share.
  CHECK(collective_seconds_across_nodes(CollectiveKind::all_reduce, 16, 1, s, l) ==
        Approx(collective_seconds(CollectiveKind::all_reduce, 16, s, 22.5e9, 6e-6)));
  // Eight per node: 8 x 22.5 = 180 GB/s, under NVLink; 2 of 15 ring steps cross nodes.
  const double lat = (1 * 6e-6 + 14 * 3e-6) / 15;
  CHECK(collective_seconds_across_nodes(CollectiveKind::all_reduce, 16, 8, s, l) ==
        Approx(collective_seconds(CollectiveKind::all_reduce, 16, s, 180e9, lat)));
  CHECK(collective_seconds_across_nodes(CollectiveKind::all_gather, 16, 8, s, l) ==
        Approx(collective_seconds(CollectiveKind::all_gather, 16, s, 180e9, lat)));
  // NVLink caps it when the NICs would be faster.
  const TwoTierLinks fast{240e9, 3e-6, 50e9, 6e-6};
  CHECK(collective_seconds_across_nodes(CollectiveKind::reduce_scatter, 16, 8, s, fast) ==
        Approx(collective_seconds(CollectiveKind::reduce_scatter, 16, s, 240e9, lat)));
  // All-to-all: 8/16 of the buffer leaves the node through the GPU's NIC share, 7/16 stays on
  // NVLink at the same time.
  CHECK(collective_seconds_across_nodes(CollectiveKind::all_to_all, 16, 8, s, l) ==
        Approx(8 * 6e-6 + 7 * 3e-6 + s * 8 / 16 / 22.5e9));
}

TEST_CASE("NCCL's choice: LL for small messages, Simple (or NVLS) for large, tree across nodes when small", "[sim]") {
  const Topology one = build_topology(dgx(GpuGeneration::ampere, 1));
  const auto small = choose_collective(one, spec(CollectiveKind::all_reduce, iota(0, 8), 8));
  CHECK(small.protocol == Protocol::ll);
  // 8 GPUs, LL ring: 6.6 + 14 x 0.6 us.
  CHECK(small.latency_s == Approx(15e-6));
  const auto large = choose_collective(one, spec(CollectiveKind::all_reduce, iota(0, 8), kGiB));
  CHECK(large.algorithm == CollectiveAlgorithm::ring);
  CHECK(large.protocol == Protocol::simple);
  const Topology h100 = build_topology(dgx(GpuGeneration::hopper, 1));
  CHECK(choose_collective(h100, spec(CollectiveKind::all_reduce, iota(0, 8), kGiB)).algorithm ==
        CollectiveAlgorithm::nvls);
  const Topology four = build_topology(dgx(GpuGeneration::ampere, 4));
  const auto across = choose_collective(four, spec(CollectiveKind::all_reduce, iota(0, 32), 1024));
  CHECK(across.algorithm == CollectiveAlgorithm::tree);
  CHECK(choose_collective(four, spec(CollectiveKind::all_gather, iota(0, 32), kGiB)).algorithm ==
        CollectiveAlgorithm::ring);
}

TEST_CASE("the executed ring matches the tuner's estimate on an idle network", "[sim]") {
  const Topology t = build_topology(dgx(GpuGeneration::ampere, 4));
  for (double bytes : {1e4, 1e6, 1e9}) {
    auto s = spec(CollectiveKind::all_reduce, iota(0, 32), bytes, CollectiveAlgorithm::ring);
    CollectiveChoice c;
    const double time = time_collective(t, s, &c);
    // The plateau factor (x1.4 of latency) is a tuner-only heuristic of NCCL's: allow for it.
    CHECK(time == Approx(c.estimate_s).epsilon(0.02 + 0.4 * c.latency_s / c.estimate_s));
  }
}

TEST_CASE("concurrent collectives contend where they share links, not elsewhere", "[sim]") {
  const Topology t = build_topology(dgx(GpuGeneration::ampere, 1));
  const auto a = spec(CollectiveKind::all_reduce, iota(0, 4), 1e9, CollectiveAlgorithm::ring, Protocol::simple);
  const auto b = spec(CollectiveKind::all_reduce, iota(4, 4), 1e9, CollectiveAlgorithm::ring, Protocol::simple);
  const double alone = time_collective(t, a);
  auto together = [&](const CollectiveSpec& x, const CollectiveSpec& y) {
    Simulator sim;
    FlowNetwork net(sim, t);
    double ex = 0, ey = 0;
    run_collective(net, x, [&] { ex = sim.now().seconds(); });
    run_collective(net, y, [&] { ey = sim.now().seconds(); });
    sim.run();
    return std::pair{ex, ey};
  };
  // Disjoint halves of an NVSwitch node: no shared link.
  const auto [d1, d2] = together(a, b);
  CHECK(d1 == Approx(alone));
  CHECK(d2 == Approx(alone));
  // The same four GPUs twice: their NVLinks are shared, the bandwidth term doubles.
  auto a2 = a;
  a2.tag = 1;
  const auto [s1, s2] = together(a, a2);
  const double latency = choose_collective(t, a).latency_s;
  CHECK(s1 - latency == Approx(2 * (alone - latency)).epsilon(1e-6));
  CHECK(s2 == Approx(s1));
}

TEST_CASE("data-parallel rings on different rails do not meet", "[sim]") {
  // An all-reduce between rank i and rank i + 8 rides rail i: two of them, on rails 0 and 1, do
  // not meet; a third one over GPUs sharing rail 0's NIC would.
  const Topology t = build_topology(dgx(GpuGeneration::ampere, 2));
  const auto r0 = spec(CollectiveKind::all_reduce, {0, 8}, 1e9, CollectiveAlgorithm::ring, Protocol::simple);
  const double alone = time_collective(t, r0);
  Simulator sim;
  FlowNetwork net(sim, t);
  double e0 = 0, e1 = 0;
  run_collective(net, r0, [&] { e0 = sim.now().seconds(); });
  auto r1 = spec(CollectiveKind::all_reduce, {1, 9}, 1e9, CollectiveAlgorithm::ring, Protocol::simple);
  run_collective(net, r1, [&] { e1 = sim.now().seconds(); });
  sim.run();
  CHECK(e0 == Approx(alone));
  CHECK(e1 == Approx(alone));
}

TEST_CASE("all-to-all goes direct: (p-1)/p S over each GPU's link", "[sim]") {
  const Topology t = build_topology(dgx(GpuGeneration::ampere, 1));
  const auto s = spec(CollectiveKind::all_to_all, iota(0, 8), 1e9);
  CollectiveChoice c;
  const double time = time_collective(t, s, &c);
  CHECK(c.algorithm == CollectiveAlgorithm::direct);
  CHECK(time == Approx(c.latency_s + 7.0 / 8 * 1e9 / 240e9).epsilon(1e-6));
}

TEST_CASE("two nodes: the tree moves half the ring's inter-node bytes (NCCL's 2-node tree effect)", "[sim]") {
  const Topology t = build_topology(dgx(GpuGeneration::ampere, 2));
  const double ring = time_collective(t, spec(CollectiveKind::all_reduce, iota(0, 16), kGiB, CollectiveAlgorithm::ring,
                                              Protocol::simple));
  const double tree = time_collective(t, spec(CollectiveKind::all_reduce, iota(0, 16), kGiB, CollectiveAlgorithm::tree,
                                              Protocol::simple));
  CHECK(tree < ring);
}

TEST_CASE("every algorithm finishes every collective it implements, on odd groups too", "[sim]") {
  const Topology t = build_topology(dgx(GpuGeneration::hopper, 2));
  const std::vector<int> group = {0, 1, 2, 8, 9, 10};  // 3 per node, 6 ranks: not a power of two
  for (auto k : {CollectiveKind::all_reduce, CollectiveKind::reduce_scatter, CollectiveKind::all_gather,
                 CollectiveKind::broadcast, CollectiveKind::reduce, CollectiveKind::all_to_all, CollectiveKind::send_recv})
    for (auto a : {CollectiveAlgorithm::ring, CollectiveAlgorithm::tree, CollectiveAlgorithm::hierarchical,
                   CollectiveAlgorithm::direct, CollectiveAlgorithm::halving_doubling}) {
      auto s = spec(k, group, 1e8, a);
      s.root = 4;
      if (check_collective(t, s)) continue;
      const double time = time_collective(t, s);
      INFO(collective_name(k) << " " << algorithm_name(a));
      CHECK(time > 0);
      CHECK(time < 1.0);
    }
}

TEST_CASE("halving-doubling moves 2(p-1)/p S per rank in log2 p steps each way", "[sim]") {
  const Topology t = build_topology(dgx(GpuGeneration::ampere, 1));
  const auto s = spec(CollectiveKind::all_reduce, iota(0, 8), 1e9, CollectiveAlgorithm::halving_doubling, Protocol::simple);
  // 6 steps of 3.4 us after the 8.4 us base; bytes S/2 + S/4 + S/8 twice at 240 GB/s.
  CHECK(time_collective(t, s) == Approx(8.4e-6 + 6 * 3.4e-6 + 2 * 0.875e9 / 240e9).epsilon(1e-6));
}

TEST_CASE("impossible requests are refused with a reason", "[sim]") {
  const Topology a100 = build_topology(dgx(GpuGeneration::ampere, 2));
  CHECK_THAT(check_collective(a100, spec(CollectiveKind::all_reduce, {0, 1}, 8, CollectiveAlgorithm::nvls)).value_or(""),
             Catch::Contains("nvls needs"));
  CHECK_THAT(check_collective(a100, spec(CollectiveKind::all_gather, {0, 1}, 8, CollectiveAlgorithm::tree)).value_or(""),
             Catch::Contains("does not implement all_gather"));
  CHECK_THAT(check_collective(a100, spec(CollectiveKind::all_reduce, {0, 0}, 8)).value_or(""),
             Catch::Contains("appears twice"));
  CHECK_THAT(check_collective(a100, spec(CollectiveKind::all_reduce, {0, 99}, 8)).value_or(""),
             Catch::Contains("not in the cluster"));
  CHECK_THAT(check_collective(a100, spec(CollectiveKind::all_reduce, {0, 1, 8}, 8, CollectiveAlgorithm::hierarchical))
                 .value_or(""),
             Catch::Contains("same number of ranks"));
  CHECK_FALSE(check_collective(a100, spec(CollectiveKind::all_reduce, {0, 1, 8, 9}, 8, CollectiveAlgorithm::hierarchical)));
}

TEST_CASE("nccl-tests' bus bandwidth factors", "[sim]") {
  CHECK(bus_bandwidth_factor(CollectiveKind::all_reduce, 8) == Approx(1.75));
  CHECK(bus_bandwidth_factor(CollectiveKind::all_gather, 8) == Approx(0.875));
  CHECK(bus_bandwidth_factor(CollectiveKind::reduce_scatter, 4) == Approx(0.75));
  CHECK(bus_bandwidth_factor(CollectiveKind::all_to_all, 2) == Approx(0.5));
  CHECK(bus_bandwidth_factor(CollectiveKind::broadcast, 8) == 1);
  CHECK(parse_collective("allreduce") == CollectiveKind::all_reduce);
  CHECK(parse_collective("all-gather") == CollectiveKind::all_gather);
  CHECK(parse_algorithm("halving_doubling") == CollectiveAlgorithm::halving_doubling);
  CHECK(parse_protocol("LL128") == Protocol::ll128);
  CHECK_FALSE(parse_collective("gossip"));
}

TEST_CASE("a one-rank or empty collective finishes at once", "[sim]") {
  const Topology t = build_topology(dgx(GpuGeneration::ampere, 1));
  CHECK(time_collective(t, spec(CollectiveKind::all_reduce, {3}, 1e9)) == 0);
  CHECK(time_collective(t, spec(CollectiveKind::all_reduce, iota(0, 8), 0)) == 0);
}

TEST_CASE("two H100 nodes: NVLS inside, a tree between, for large all-reduces", "[sim]") {
  // NVLink bound: S(m+1)/m at 5/6 of 370.8 GB/s per GPU, while each NIC carries only S/m.
  const Topology t = build_topology(dgx(GpuGeneration::hopper, 2));
  auto s = spec(CollectiveKind::all_reduce, iota(0, 16), 8 * kGiB);
  CollectiveChoice c;
  const double time = time_collective(t, s, &c);
  CHECK(c.algorithm == CollectiveAlgorithm::nvls_tree);
  const double nvl = 450e9 * 20.6 / 25 * 5 / 6;
  CHECK(time == Approx(c.latency_s + s.bytes * 9 / 8 / nvl).epsilon(1e-6));
  s.algorithm = CollectiveAlgorithm::nvls_tree;
  CHECK_FALSE(check_collective(t, s));
  s.ranks = {0, 8};
  CHECK_THAT(check_collective(t, s).value_or(""), Catch::Contains("nvls_tree needs"));
}
