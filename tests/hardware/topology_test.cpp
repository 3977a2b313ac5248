// Topology graphs: what the builders make of a cluster spec, the routes through them (NVLink
// before PCIe, the host bridge without P2P, deterministic ECMP), fat-tree shapes and their
// oversubscription, and the connectivity check.
#include <catch2/catch.hpp>

#include <set>

#include "hardware/cluster.hpp"

using namespace scaleout;

namespace {

ClusterSpec dgx(int nodes, int nics = 8) {
  ClusterSpec c;
  c.name = "test-dgx";
  c.gpu = "a100-80g";
  c.generation = GpuGeneration::ampere;
  c.nodes = nodes;
  c.gpus_per_node = 8;
  c.node_kind = NodeKind::nvswitch;
  c.nvlink_bandwidth = BytesPerSecond{600e9};
  c.nvlink_efficiency = 0.8;
  c.pcie_bandwidth = BytesPerSecond{32e9};
  c.nics_per_node = nics;
  c.nic_bandwidth = BytesPerSecond{25e9};
  c.switch_radix = 40;
  return c;
}

int count_kind(const Topology& t, VertexKind k) {
  int n = 0;
  for (VertexId v = 0; v < t.vertex_count(); ++v) n += t.vertex(v).kind == k;
  return n;
}

std::vector<LinkId> route(const Topology& t, int a, int b, std::uint64_t hash = 7) {
  std::vector<LinkId> p;
  REQUIRE(t.route_gpus(a, b, hash, p));
  return p;
}

}  // namespace

TEST_CASE("a DGX node: GPUs are vertices 0..7, one NVSwitch, a NIC per GPU", "[hardware]") {
  const Topology t = build_topology(dgx(1));
  CHECK(t.gpu_count() == 8);
  CHECK(count_kind(t, VertexKind::nvswitch) == 1);
  CHECK(count_kind(t, VertexKind::nic) == 8);
  CHECK(count_kind(t, VertexKind::pcie_switch) == 4);
  CHECK(count_kind(t, VertexKind::host_bridge) == 1);
  for (int r = 0; r < 8; ++r) {
    CHECK(t.vertex(t.gpu_vertex(r)).kind == VertexKind::gpu);
    CHECK(t.vertex(t.gpu_vertex(r)).index == r);
    CHECK(t.vertex(t.nic_of(r)).index == r);
  }
  CHECK_FALSE(t.find_disconnected());
}

TEST_CASE("GPU to GPU inside an NVSwitch node rides NVLink, each direction half the quoted figure", "[hardware]") {
  const Topology t = build_topology(dgx(1));
  // GPUs 0 and 1 also share a PCIe switch (two hops either way): NVLink must win the tie.
  for (auto [a, b] : {std::pair{0, 1}, std::pair{0, 7}, std::pair{5, 2}}) {
    const auto p = route(t, a, b);
    REQUIRE(p.size() == 2);
    for (LinkId l : p) {
      CHECK(t.link(l).kind == LinkKind::nvlink);
      CHECK(t.link(l).bandwidth == Approx(300e9));
      CHECK(t.link(l).capacity() == Approx(240e9));
    }
  }
}

TEST_CASE("a link is a pair of directed edges of the same figures", "[hardware]") {
  Topology t;
  t.add_node(false, true, false);
  t.add_gpu(0);
  t.add_gpu(0);
  const VertexId sw = t.add_vertex(VertexKind::pcie_switch, 0);
  const LinkId l = t.add_link(0, sw, 32e9, Time::from_ns(250), 0.75, LinkKind::pcie);
  CHECK(t.link_count() == 2);
  CHECK(t.link(l).src == 0);
  CHECK(t.link(l).dst == sw);
  CHECK(t.link(l + 1).src == sw);
  CHECK(t.link(l + 1).dst == 0);
  CHECK(t.link(l + 1).capacity() == Approx(24e9));
  CHECK(boost::num_edges(t.graph()) == 2);
}

TEST_CASE("NVLink-bridged pairs: NVLink inside a pair, PCIe between pairs", "[hardware]") {
  ClusterSpec c = dgx(1, 1);
  c.node_kind = NodeKind::nvlink_bridge_pairs;
  c.gpus_per_pcie_switch = 4;
  const Topology t = build_topology(c);
  const auto pair = route(t, 0, 1);
  REQUIRE(pair.size() == 1);
  CHECK(t.link(pair[0]).kind == LinkKind::nvlink);
  const auto across = route(t, 1, 2);
  CHECK(across.size() == 2);  // GPU -> PCIe switch -> GPU
  for (LinkId l : across) CHECK(t.link(l).kind == LinkKind::pcie);
  const auto far = route(t, 0, 5);  // different PCIe switches: through the host bridge
  CHECK(far.size() == 4);
}

TEST_CASE("PCIe box: peer-to-peer stays under the switch, without it traffic bounces off the host", "[hardware]") {
  ClusterSpec c = dgx(1, 1);
  c.node_kind = NodeKind::pcie;
  c.pcie_p2p = true;
  const Topology p2p = build_topology(c);
  CHECK(route(p2p, 0, 1).size() == 2);
  CHECK(route(p2p, 0, 2).size() == 4);
  c.pcie_p2p = false;
  const Topology host = build_topology(c);
  const auto p = route(host, 0, 1);
  CHECK(p.size() == 4);
  bool via_host = false;
  for (LinkId l : p) via_host = via_host || host.vertex(host.link(l).dst).kind == VertexKind::host_bridge;
  CHECK(via_host);
  CHECK_FALSE(host.find_disconnected());
}

TEST_CASE("between nodes a GPU leaves by its own NIC and arrives by the peer's", "[hardware]") {
  const Topology t = build_topology(dgx(2));
  const auto p = route(t, 3, 11);
  REQUIRE(p.size() >= 4);
  CHECK(t.link(p[0]).kind == LinkKind::pcie);
  bool leaves_by_own_nic = false, arrives_by_peer_nic = false;
  for (LinkId l : p) {
    leaves_by_own_nic = leaves_by_own_nic || t.link(l).src == t.nic_of(3);
    arrives_by_peer_nic = arrives_by_peer_nic || t.link(l).dst == t.nic_of(11);
  }
  CHECK(leaves_by_own_nic);
  CHECK(arrives_by_peer_nic);
}

TEST_CASE("ECMP is deterministic per flow and spreads flows over the spines", "[hardware]") {
  ClusterSpec c = dgx(8, 1);
  c.gpus_per_node = 1;
  c.fabric = FabricKind::fat_tree;
  c.switch_radix = 8;  // 4 NICs per leaf, 4 spines
  const Topology t = build_topology(c);
  CHECK(route(t, 0, 7, 42) == route(t, 0, 7, 42));
  std::set<VertexId> spines;
  for (std::uint64_t h = 0; h < 64; ++h) {
    const auto p = route(t, 0, 7, flow_hash(0, 7, h));
    for (LinkId l : p)
      if (t.vertex(t.link(l).dst).kind == VertexKind::net_switch && t.vertex(t.link(l).dst).index == 2)
        spines.insert(t.link(l).dst);
  }
  CHECK(spines.size() == 4);
}

TEST_CASE("two-level fat-tree: leaves of radix k, uplinks sized by the oversubscription", "[hardware]") {
  ClusterSpec c = dgx(16, 1);
  c.gpus_per_node = 1;
  c.fabric = FabricKind::fat_tree;
  c.switch_radix = 12;
  c.oversubscription = 2;  // 8 ports down, 4 up
  const Topology t = build_topology(c);
  int leaves = 0, spines = 0;
  for (VertexId v = 0; v < t.vertex_count(); ++v)
    if (t.vertex(v).kind == VertexKind::net_switch) (t.vertex(v).index == 1 ? leaves : spines)++;
  CHECK(leaves == 2);
  CHECK(spines == 4);
  // Each leaf: 8 x 25 GB/s down, 100 GB/s up over its 4 uplinks.
  double up = 0;
  for (LinkId l = 0; l < t.link_count(); ++l) {
    const Link& k = t.link(l);
    if (t.vertex(k.src).kind == VertexKind::net_switch && t.vertex(k.src).index == 1 &&
        t.vertex(k.dst).kind == VertexKind::net_switch)
      up += k.bandwidth;
  }
  CHECK(up == Approx(2 * 8 * 25e9 / 2));
  CHECK_FALSE(t.find_disconnected());
}

TEST_CASE("three-level fat-tree: traffic between pods climbs to the core", "[hardware]") {
  ClusterSpec c = dgx(32, 1);
  c.gpus_per_node = 1;
  c.fabric = FabricKind::fat_tree;
  c.levels = 3;
  c.switch_radix = 4;  // 2 NICs per leaf, pods of 2 leaves
  const Topology t = build_topology(c);
  CHECK_FALSE(t.find_disconnected());
  // NIC-leaf-agg-core-agg-leaf-NIC plus the PCIe hops at both ends.
  CHECK(route(t, 0, 31).size() == 2 + 6 + 2);
  CHECK(route(t, 0, 1).size() == 2 + 2 + 2);  // same leaf
}

TEST_CASE("rail-optimised: the same rail of two nodes meets at one leaf", "[hardware]") {
  const Topology t = build_topology(dgx(4));
  // GPU 2 of node 0 to GPU 2 of node 3: PCIe, NIC -> rail leaf -> NIC, PCIe.
  CHECK(route(t, 2, 26).size() == 2 + 2 + 2);
  // Across rails the spine joins them.
  CHECK(route(t, 2, 27).size() == 2 + 4 + 2);
}

TEST_CASE("connectivity: a multi-node cluster without NICs is reported, naming a rank", "[hardware]") {
  const Topology t = build_topology(dgx(2, 0));
  const auto problem = t.find_disconnected();
  REQUIRE(problem);
  CHECK_THAT(*problem, Catch::Contains("rank 0 has no NIC"));
}

TEST_CASE("connectivity: GPUs of a node with no link between them are reported", "[hardware]") {
  Topology t;
  t.add_node(false, true, false);
  t.add_gpu(0);
  t.add_gpu(0);
  const auto problem = t.find_disconnected();
  REQUIRE(problem);
  CHECK_THAT(*problem, Catch::Contains("inside the node"));
}

TEST_CASE("a failed one of parallel links from the leaf to a NIC is never the last hop", "[hardware]") {
  // Two nodes of one GPU and one NIC under a leaf switch; the second NIC hangs off the leaf by two
  // parallel links, one of them failed: every flow into it takes the other (ECMP picks among what
  // is left), whatever its hash.
  Topology t;
  t.add_node(false, true, false);
  t.add_node(false, true, false);
  const VertexId g0 = t.add_gpu(0), g1 = t.add_gpu(1);
  const VertexId sw0 = t.add_vertex(VertexKind::pcie_switch, 0), sw1 = t.add_vertex(VertexKind::pcie_switch, 1);
  const VertexId nic0 = t.add_vertex(VertexKind::nic, 0), nic1 = t.add_vertex(VertexKind::nic, 1);
  const VertexId leaf = t.add_vertex(VertexKind::net_switch, -1);
  t.add_link(g0, sw0, 32e9, Time::zero(), 1.0, LinkKind::pcie);
  t.add_link(sw0, nic0, 32e9, Time::zero(), 1.0, LinkKind::pcie);
  t.add_link(g1, sw1, 32e9, Time::zero(), 1.0, LinkKind::pcie);
  t.add_link(sw1, nic1, 32e9, Time::zero(), 1.0, LinkKind::pcie);
  t.add_link(nic0, leaf, 25e9, Time::zero(), 1.0, LinkKind::network);
  const LinkId up = t.add_link(nic1, leaf, 25e9, Time::zero(), 1.0, LinkKind::network);
  const LinkId spare = t.add_link(nic1, leaf, 25e9, Time::zero(), 1.0, LinkKind::network);
  t.set_nic(0, nic0);
  t.set_nic(1, nic1);
  REQUIRE(t.fail_link(up));
  std::set<LinkId> last_hops;
  for (std::uint64_t hash = 0; hash < 64; ++hash) {
    std::vector<LinkId> p;
    REQUIRE(t.route_gpus(0, 1, hash, p));
    for (LinkId l : p) CHECK_FALSE(t.link(l).failed);
    REQUIRE(p.size() == 6);
    last_hops.insert(p[3]);  // gpu0 -> switch -> nic0 -> leaf -> nic1 -> switch -> gpu1
  }
  CHECK(last_hops == std::set<LinkId>{LinkId(spare + 1)});
}
