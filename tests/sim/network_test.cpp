// The flow network: max-min fair sharing solved by progressive filling, re-solved when flows
// start or end, completion at latency + bytes over the rates received.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <vector>

#include "hardware/cluster.hpp"
#include "sim/network/flow_network.hpp"

using namespace scaleout;

namespace {

// Hand-built line of switches: v0 -a-> v1 -b-> v2 with capacities in bytes/s.
struct Line {
  Topology t;
  LinkId a = 0, b = 0;
  Line(double ca, double cb) {
    t.add_node(false, true, false);
    const VertexId v0 = t.add_vertex(VertexKind::pcie_switch, 0);
    const VertexId v1 = t.add_vertex(VertexKind::pcie_switch, 0);
    const VertexId v2 = t.add_vertex(VertexKind::pcie_switch, 0);
    a = t.add_link(v0, v1, ca, Time::zero(), 1.0, LinkKind::pcie);
    b = t.add_link(v1, v2, cb, Time::zero(), 1.0, LinkKind::pcie);
  }
};

ClusterSpec nodes_of(int nodes, int gpus, int nics) {
  ClusterSpec c;
  c.gpu = "h100-sxm";
  c.nodes = nodes;
  c.gpus_per_node = gpus;
  c.node_kind = NodeKind::nvswitch;
  c.nvlink_bandwidth = BytesPerSecond{900e9};
  c.pcie_bandwidth = BytesPerSecond{64e9};
  c.pcie_efficiency = 1;
  c.nics_per_node = nics;
  c.nic_bandwidth = BytesPerSecond{50e9};
  c.network_efficiency = 1;
  c.nic_latency = Time::zero();
  c.switch_latency = Time::zero();
  c.pcie_latency = Time::zero();
  c.nvlink_latency = Time::zero();
  return c;
}

}  // namespace

TEST_CASE("one flow takes latency + S / capacity", "[sim]") {
  // t = L + S / B with S = 1 GB, B = 25 GB/s, L = 2 us.
  Topology t;
  t.add_node(false, true, false);
  t.add_gpu(0);
  t.add_gpu(0);
  t.add_link(0, 1, 50e9, Time::from_us(2), 0.5, LinkKind::pcie);
  Simulator sim;
  FlowNetwork net(sim, t);
  Time done;
  net.send(0, 1, 1e9, [&] { done = sim.now(); });
  sim.run();
  CHECK(done.seconds() == Approx(2e-6 + 1e9 / 25e9).epsilon(1e-9));
  CHECK(net.active_flows() == 0);
}

TEST_CASE("max-min fairness on a hand-checked example", "[sim]") {
  // Link a (1 GB/s) carries f1 and f2; link b (2 GB/s) carries f2 and f3. Progressive filling:
  // a saturates first at 0.5 each; b has 1.5 left for f3. Then f1 and f2 (0.5 GB each) end at
  // 1 s; f3 (2 GB) has sent 1.5 and gets all of b: 0.5 GB at 2 GB/s, ending at 1.25 s.
  Line line(1e9, 2e9);
  Simulator sim;
  FlowNetwork net(sim, line.t);
  std::vector<double> end(3);
  const LinkId f1[] = {line.a}, f2[] = {line.a, line.b}, f3[] = {line.b};
  const FlowId i1 = net.start(f1, 0.5e9, Time::zero(), [&] { end[0] = sim.now().seconds(); });
  const FlowId i2 = net.start(f2, 0.5e9, Time::zero(), [&] { end[1] = sim.now().seconds(); });
  const FlowId i3 = net.start(f3, 2e9, Time::zero(), [&] { end[2] = sim.now().seconds(); });
  sim.run(Time::from_us(1));
  CHECK(net.rate(i1) == Approx(0.5e9));
  CHECK(net.rate(i2) == Approx(0.5e9));
  CHECK(net.rate(i3) == Approx(1.5e9));
  CHECK(net.link_rate(line.a) == Approx(1e9));
  sim.run();
  CHECK(end[0] == Approx(1.0));
  CHECK(end[1] == Approx(1.0));
  CHECK(end[2] == Approx(1.25));
  CHECK_FALSE(net.active(i1));
}

TEST_CASE("a flow that ends gives its share back to the others", "[sim]") {
  // Two flows of 1 and 3 GB on a 2 GB/s link: 1 GB/s each until 1 s, then 2 GB/s: the second
  // ends at 1 + 2/2 = 2 s.
  Line line(2e9, 2e9);
  Simulator sim;
  FlowNetwork net(sim, line.t);
  double e1 = 0, e2 = 0;
  const LinkId l[] = {line.a};
  net.start(l, 1e9, Time::zero(), [&] { e1 = sim.now().seconds(); });
  net.start(l, 3e9, Time::zero(), [&] { e2 = sim.now().seconds(); });
  sim.run();
  CHECK(e1 == Approx(1.0));
  CHECK(e2 == Approx(2.0));
}

TEST_CASE("a flow crossing a link twice takes two shares; a cap bounds a rate", "[sim]") {
  Line line(3e9, 3e9);
  Simulator sim;
  FlowNetwork net(sim, line.t);
  const LinkId twice[] = {line.a, line.a}, once[] = {line.a};
  const FlowId coupled = net.start(twice, 1e9, Time::zero(), nullptr);
  const FlowId single = net.start(once, 1e9, Time::zero(), nullptr);
  const LinkId on_b[] = {line.b};
  const FlowId capped = net.start(on_b, 1e9, Time::zero(), nullptr, 0.5e9);
  sim.run(Time::from_us(1));
  // a: 3 GB/s over three shares, 1 GB/s each.
  CHECK(net.rate(coupled) == Approx(1e9));
  CHECK(net.rate(single) == Approx(1e9));
  CHECK(net.rate(capped) == Approx(0.5e9));
  CHECK(net.flows_on(line.a) == 3);
}

TEST_CASE("a link one flow crosses alone caps it; shared links are filled, few or many", "[sim]") {
  // a (3 GB/s) carries f1 and f2; b (1 GB/s) carries f1 alone: f1 is held to 1 GB/s by b and f2
  // takes the 2 GB/s of a left.
  Line line(3e9, 1e9);
  Simulator sim;
  FlowNetwork net(sim, line.t);
  const LinkId both[] = {line.a, line.b}, on_a[] = {line.a};
  const FlowId f1 = net.start(both, 1e9, Time::zero(), nullptr);
  const FlowId f2 = net.start(on_a, 1e9, Time::zero(), nullptr);
  sim.run(Time::from_us(1));
  CHECK(net.rate(f1) == Approx(1e9));
  CHECK(net.rate(f2) == Approx(2e9));
  // Pairs of flows on links of 1, 2, 3, ... GB/s, each link also crossed by a third flow that
  // goes on through a slow link of its own (0.1 GB/s): a pair's flows get (c - 0.1) / 2. With 8
  // shared links each round scans them; with 80 a heap keeps them (see FlowNetwork::solve).
  for (const int n : {8, 80}) {
    Topology t;
    t.add_node(false, true, false);
    std::vector<VertexId> v;
    for (int i = 0; i < 2 * n + 1; ++i) v.push_back(t.add_vertex(VertexKind::pcie_switch, 0));
    std::vector<LinkId> shared, own;
    for (int i = 0; i < n; ++i) {
      shared.push_back(t.add_link(v[std::size_t(2 * i)], v[std::size_t(2 * i + 1)], 1e9 * (i + 1), Time::zero(), 1.0, LinkKind::pcie));
      own.push_back(t.add_link(v[std::size_t(2 * i + 1)], v[std::size_t(2 * i + 2)], 0.1e9, Time::zero(), 1.0, LinkKind::pcie));
    }
    Simulator s2;
    FlowNetwork n2(s2, t);
    std::vector<FlowId> pair;
    for (int i = 0; i < n; ++i) {
      const LinkId one[] = {shared[std::size_t(i)]}, through[] = {shared[std::size_t(i)], own[std::size_t(i)]};
      pair.push_back(n2.start(one, 1e9, Time::zero(), nullptr));
      pair.push_back(n2.start(one, 1e9, Time::zero(), nullptr));
      n2.start(through, 1e9, Time::zero(), nullptr);
    }
    s2.run(Time::from_us(1));
    for (int i = 0; i < n; ++i) {
      INFO(n << " links, link " << i);
      CHECK(n2.rate(pair[std::size_t(2 * i)]) == Approx((1e9 * (i + 1) - 0.1e9) / 2));
      CHECK(n2.rate(pair[std::size_t(2 * i + 1)]) == Approx((1e9 * (i + 1) - 0.1e9) / 2));
    }
  }
}

TEST_CASE("a watched link tells its flows' and reservations' busy times", "[sim]") {
  Line line(1e9, 1e9);
  Simulator sim;
  FlowNetwork net(sim, line.t);
  const LinkId on_a[] = {line.a}, on_b[] = {line.b};
  net.watch(on_a, 0);
  net.start(on_a, 1e9, Time::zero(), nullptr);  // 0 .. 1 s
  net.start(on_b, 1e9, Time::zero(), nullptr);  // not watched
  sim.run();
  sim.schedule_in(Time::from_seconds(1), [&] { net.reserve(on_a, sim.now() + Time::from_seconds(0.5), nullptr); });
  sim.run();
  const auto& busy = net.busy(0);
  REQUIRE(busy.size() == 2);
  CHECK(busy[0].first == Time::zero());
  CHECK(busy[0].second.seconds() == Approx(1.0));
  CHECK(busy[1].first.seconds() == Approx(2.0));
  CHECK(busy[1].second.seconds() == Approx(2.5));
  CHECK(net.busy(1).empty());
  // Handed over: the same intervals, and none left behind.
  const auto before = net.busy(0);
  const auto taken = net.take_busy(0);
  CHECK(taken == before);
  CHECK(net.busy(0).empty());
  CHECK(net.take_busy(7).empty());
}

TEST_CASE("flows starting at the same instant are solved once", "[sim]") {
  Line line(1e9, 1e9);
  Simulator sim;
  FlowNetwork net(sim, line.t);
  const LinkId l[] = {line.a};
  for (int i = 0; i < 100; ++i) net.start(l, 1e6, Time::zero(), nullptr);
  sim.run(Time::from_us(1));
  CHECK(net.solves() == 1);
  sim.run();
  CHECK(net.active_flows() == 0);
  CHECK(net.flows_started() == 100);
}

TEST_CASE("eight GPUs behind one NIC get an eighth of it each", "[sim]") {
  // 8 flows node 0 -> node 1 through one 50 GB/s NIC per node: 6.25 GB/s each; 1 GB takes 0.16 s.
  const Topology t = build_topology(nodes_of(2, 8, 1));
  Simulator sim;
  FlowNetwork net(sim, t);
  std::vector<FlowId> ids;
  double last = 0;
  for (int g = 0; g < 8; ++g) ids.push_back(net.send(g, 8 + g, 1e9, [&] { last = sim.now().seconds(); }, g));
  sim.run(Time::from_us(1));
  for (FlowId id : ids) CHECK(net.rate(id) == Approx(50e9 / 8));
  sim.run();
  CHECK(last == Approx(1e9 / (50e9 / 8)));
}

TEST_CASE("a 2:1 oversubscribed leaf halves cross-leaf bandwidth", "[sim]") {
  // Four single-GPU nodes, two per leaf. Radix 3 at 2:1 gives 2 ports down and one uplink of
  // 2 x 50 / 2 = 50 GB/s: two flows leaving a leaf share it, 25 GB/s each. At 1:1 (radix 2: one
  // NIC per leaf, one uplink of 50 GB/s) the same flows run at 50 GB/s.
  auto rates = [](double oversub, int radix) {
    ClusterSpec c = nodes_of(4, 1, 1);
    c.fabric = FabricKind::fat_tree;
    c.oversubscription = oversub;
    c.switch_radix = radix;
    const Topology t = build_topology(c);
    Simulator sim;
    FlowNetwork net(sim, t);
    const FlowId f1 = net.send(0, 2, 1e9, nullptr);
    const FlowId f2 = net.send(1, 3, 1e9, nullptr);
    sim.run(Time::from_us(1));
    return std::pair{net.rate(f1), net.rate(f2)};
  };
  const auto [a2, b2] = rates(2, 3);
  const auto [a1, b1] = rates(1, 2);
  CHECK(a2 == Approx(25e9));
  CHECK(b2 == Approx(25e9));
  CHECK(a1 == Approx(50e9));
  CHECK(b1 == Approx(50e9));
}

TEST_CASE("flows in disjoint parts of the network do not disturb each other", "[sim]") {
  Line line(1e9, 1e9);
  Simulator sim;
  FlowNetwork net(sim, line.t);
  double end_a = 0;
  const LinkId on_a[] = {line.a}, on_b[] = {line.b};
  net.start(on_a, 1e9, Time::zero(), [&] { end_a = sim.now().seconds(); });
  // Flows come and go on b meanwhile.
  for (int i = 0; i < 10; ++i)
    sim.schedule_at(Time::from_seconds(0.05 * i), [&] { net.start(on_b, 1e7, Time::zero(), nullptr); });
  sim.run();
  CHECK(end_a == Approx(1.0));
}

TEST_CASE("the same flows give the same times, event for event", "[sim]") {
  auto once = [] {
    const Topology t = build_topology(nodes_of(2, 8, 2));
    Simulator sim;
    FlowNetwork net(sim, t);
    std::vector<double> ends;
    for (int i = 0; i < 16; ++i)
      net.send(i, (i * 5 + 3) % 16, 1e8 * (1 + i % 3), [&] { ends.push_back(sim.now().seconds()); }, i);
    sim.run();
    ends.push_back(double(sim.events_executed()));
    return ends;
  };
  CHECK(once() == once());
}

TEST_CASE("a component met again takes the rates it was solved to, whatever order its flows came in", "[sim]") {
  // Rates are remembered by the multiset of the component's routes and caps (FlowNetwork's
  // header): a component solved afresh with its flows started in one order, and the same flows
  // started in another order, once solved afresh and once from memory, get the same rates bit for
  // bit. Scanned (8 shared links) and heaped (80), with capped flows among them.
  for (const int n : {8, 80}) {
    INFO(n << " shared links");
    Topology t;
    t.add_node(false, true, false);
    std::vector<VertexId> v;
    for (int i = 0; i < 2 * n + 1; ++i) v.push_back(t.add_vertex(VertexKind::pcie_switch, 0));
    std::vector<std::vector<LinkId>> routes;
    std::vector<double> caps;
    for (int i = 0; i < n; ++i) {
      const LinkId s = t.add_link(v[std::size_t(2 * i)], v[std::size_t(2 * i + 1)], 1e9 * (1 + i % 7), Time::zero(), 1.0, LinkKind::pcie);
      const LinkId o = t.add_link(v[std::size_t(2 * i + 1)], v[std::size_t(2 * i + 2)], 0.3e9, Time::zero(), 1.0, LinkKind::pcie);
      routes.push_back({s});
      caps.push_back(FlowNetwork::kNoCap);
      routes.push_back({s, o});
      caps.push_back(FlowNetwork::kNoCap);
      routes.push_back({s, s});  // crosses its link twice
      caps.push_back(i % 3 == 0 ? 0.2e9 : FlowNetwork::kNoCap);
      if (i > 0) {
        routes.push_back({LinkId(s - 2), s});  // couples neighbouring links into one component
        caps.push_back(0.45e9 + 1e7 * i);
      }
    }
    // And a link shared by three flows of one route, two of them capped at a third of its
    // capacity: the caps tie the link's share, and freezing one at its cap can leave the share an
    // ulp under the other's (which of the two gets which is then a matter of order).
    {
      const VertexId a = t.add_vertex(VertexKind::pcie_switch, 0), b = t.add_vertex(VertexKind::pcie_switch, 0);
      const LinkId x = t.add_link(a, b, 1e9, Time::zero(), 1.0, LinkKind::pcie);
      for (double cap : {1e9 / 3, 1e9 / 3, FlowNetwork::kNoCap}) {
        routes.push_back({x});
        caps.push_back(cap);
      }
    }
    // Flows of the same route and cap are indistinguishable: rates are compared as each such
    // group's sorted list.
    auto by_group = [&](const std::vector<double>& r) {
      std::map<std::pair<std::vector<LinkId>, double>, std::vector<double>> g;
      for (std::size_t i = 0; i < r.size(); ++i) g[{routes[i], caps[i]}].push_back(r[i]);
      for (auto& entry : g) std::sort(entry.second.begin(), entry.second.end());
      return g;
    };
    // Each route's rate, with the flows started in the given order.
    auto rates = [&](FlowNetwork& net, Simulator& sim, bool reversed) {
      std::vector<FlowId> ids(routes.size());
      for (std::size_t k = 0; k < routes.size(); ++k) {
        const std::size_t i = reversed ? routes.size() - 1 - k : k;
        ids[i] = net.start(routes[i], 1e9, Time::zero(), nullptr, caps[i]);
      }
      sim.run(sim.now() + Time::from_ns(1));
      std::vector<double> r;
      for (FlowId id : ids) r.push_back(net.rate(id));
      sim.run();  // every flow ends: the component is gone
      return r;
    };
    Simulator s1, s2;
    FlowNetwork fresh(s1, t), again(s2, t);
    const std::vector<double> reversed_fresh = rates(fresh, s1, true);
    const std::vector<double> forward_fresh = rates(again, s2, false);
    const std::uint64_t before = again.solves_remembered();
    const std::vector<double> reversed_remembered = rates(again, s2, true);
    CHECK(by_group(forward_fresh) == by_group(reversed_fresh));
    CHECK(by_group(reversed_remembered) == by_group(reversed_fresh));
    CHECK(fresh.solves() == again.solves() / 2);
    CHECK(again.solves_remembered() > before);  // from memory, not solved again
    for (double r : reversed_fresh) CHECK(r > 0);
  }
}
