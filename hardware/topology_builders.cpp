// Builders: a ClusterSpec into a Topology. Nodes first (GPUs, NVSwitch or NVLink bridges, PCIe
// switches, host bridge, NICs), then the fabric over the NICs (one switch, a fat-tree of two or
// three levels, or rail-optimised leaves under a spine).
//
// Fat-trees keep the oversubscription exact for any ratio: a leaf with d ports down gives its
// spines d * B / oversubscription of uplink bandwidth in total, split evenly over its uplinks.
// With radix k a leaf has d = k * s / (1 + s) ports down and k / (1 + s) up (s = 1: half and
// half, the non-blocking folded Clos of Leiserson 1985 / Al-Fares et al. 2008).
#include <algorithm>
#include <cmath>

#include "hardware/cluster.hpp"
#include "sim/engine/check.hpp"

namespace scaleout {

double default_nvlink_efficiency(GpuGeneration g) {
  // NCCL src/graph/topo.h: SM70/SM80_NVLINK_BW 20.0, SM90_NVLINK_BW 20.6 (per 25 GB/s lane),
  // SM100_NVLINK_BW 40.1 (per 50 GB/s lane).
  switch (g) {
    case GpuGeneration::volta: return 20.0 / 25.0;
    case GpuGeneration::ampere: return 20.0 / 25.0;
    case GpuGeneration::hopper: return 20.6 / 25.0;
    case GpuGeneration::blackwell: return 40.1 / 50.0;
  }
  return 0.8;
}

namespace {

struct Builder {
  const ClusterSpec& s;
  Topology t;
  std::vector<VertexId> nics;  // every NIC, node-major

  double fabric_bw() const { return s.fabric_link_bandwidth.value > 0 ? s.fabric_link_bandwidth.value : s.nic_bandwidth.value; }

  void add_fabric_link(VertexId a, VertexId b, double bandwidth) {
    t.add_link(a, b, bandwidth, s.switch_latency, s.network_efficiency, LinkKind::network);
  }

  void build_nodes() {
    for (int n = 0; n < s.nodes; ++n)
      t.add_node(s.node_kind != NodeKind::pcie, s.pcie_p2p, s.nvls && s.node_kind == NodeKind::nvswitch);
    for (int n = 0; n < s.nodes; ++n)
      for (int g = 0; g < s.gpus_per_node; ++g) t.add_gpu(n);
    const double nvl = s.nvlink_bandwidth.value / 2;  // vendors quote both directions together
    const double pcie = s.pcie_bandwidth.value;
    for (int n = 0; n < s.nodes; ++n) {
      const int first = n * s.gpus_per_node;
      const VertexId host = t.add_vertex(VertexKind::host_bridge, n);
      const int per_switch = std::max(1, s.gpus_per_pcie_switch);
      const int switches = (s.gpus_per_node + per_switch - 1) / per_switch;
      std::vector<VertexId> pcie_switches;
      for (int i = 0; i < switches; ++i) {
        const VertexId sw = t.add_vertex(VertexKind::pcie_switch, n, i);
        pcie_switches.push_back(sw);
        t.add_link(sw, host, pcie, s.pcie_latency, s.pcie_efficiency, LinkKind::pcie);
      }
      for (int g = 0; g < s.gpus_per_node; ++g)
        t.add_link(t.gpu_vertex(first + g), pcie_switches[std::size_t(g / per_switch)], pcie, s.pcie_latency,
                   s.pcie_efficiency, LinkKind::pcie);
      if (s.node_kind == NodeKind::nvswitch && nvl > 0) {
        // The NVSwitches of a node act as one non-blocking crossbar: each GPU's links, spread over
        // all of them, are one link of its total bandwidth to a single switch vertex.
        const VertexId nvs = t.add_vertex(VertexKind::nvswitch, n);
        for (int g = 0; g < s.gpus_per_node; ++g)
          t.add_link(t.gpu_vertex(first + g), nvs, nvl, s.nvlink_latency, s.nvlink_efficiency, LinkKind::nvlink);
      } else if (s.node_kind == NodeKind::nvlink_bridge_pairs && nvl > 0) {
        for (int g = 0; g + 1 < s.gpus_per_node; g += 2)
          t.add_link(t.gpu_vertex(first + g), t.gpu_vertex(first + g + 1), nvl, s.nvlink_latency, s.nvlink_efficiency,
                     LinkKind::nvlink);
      }
      // NICs spread evenly over the GPUs; each sits on the PCIe switch of the first GPU it serves
      // (GPUDirect RDMA then stays below the host bridge).
      for (int i = 0; i < s.nics_per_node; ++i) {
        const VertexId nic = t.add_vertex(VertexKind::nic, n, i);
        nics.push_back(nic);
        const int gpu = int(std::int64_t(i) * s.gpus_per_node / s.nics_per_node);
        t.add_link(nic, pcie_switches[std::size_t(gpu / per_switch)], pcie, s.pcie_latency, s.pcie_efficiency,
                   LinkKind::pcie);
      }
      for (int g = 0; g < s.gpus_per_node && s.nics_per_node > 0; ++g) {
        const int nic = int(std::int64_t(g) * s.nics_per_node / s.gpus_per_node);
        t.set_nic(first + g, nics[std::size_t(n * s.nics_per_node + nic)]);
      }
    }
  }

  // Ports down and up of a leaf of radix k under oversubscription s (at least one of each).
  std::pair<int, int> leaf_ports() const {
    const int k = std::max(2, s.switch_radix);
    int down = int(std::lround(k * s.oversubscription / (1 + s.oversubscription)));
    down = std::clamp(down, 1, k - 1);
    return {down, k - down};
  }

  void attach_nic(VertexId nic, VertexId leaf) {
    t.add_link(nic, leaf, s.nic_bandwidth.value, s.nic_latency, s.network_efficiency, LinkKind::network);
  }

  // Leaves over `groups` of NICs, spines above them (two levels) or pods and cores (three).
  void build_tree(const std::vector<std::vector<VertexId>>& groups, int levels) {
    const auto [down, up] = leaf_ports();
    std::vector<VertexId> leaves;
    for (const auto& g : groups) {
      for (std::size_t i = 0; i < g.size(); i += std::size_t(down)) {
        const VertexId leaf = t.add_vertex(VertexKind::net_switch, -1, 1);
        leaves.push_back(leaf);
        for (std::size_t j = i; j < std::min(g.size(), i + std::size_t(down)); ++j) attach_nic(g[j], leaf);
      }
    }
    if (leaves.size() <= 1 && groups.size() <= 1) return;
    // Every leaf's uplink capacity is its downlink capacity over the oversubscription.
    const double leaf_up = double(down) * fabric_bw() / s.oversubscription;
    const int k = std::max(2, s.switch_radix);
    if (levels <= 2) {
      std::vector<VertexId> spines;
      for (int i = 0; i < up; ++i) spines.push_back(t.add_vertex(VertexKind::net_switch, -1, 2));
      for (VertexId leaf : leaves)
        for (VertexId sp : spines) add_fabric_link(leaf, sp, leaf_up / double(up));
      return;
    }
    // Three levels: pods of k/2 leaves, each pod with `up` aggregation switches; aggregation
    // switch j of every pod joins core plane j (k/2 cores, non-blocking above the leaves).
    const std::size_t pod = std::size_t(std::max(1, k / 2));
    const int cores = std::max(1, k / 2);
    auto planes = std::vector<std::vector<VertexId>>(std::size_t(up));
    const std::size_t pods = (leaves.size() + pod - 1) / pod;
    for (int j = 0; j < up && pods > 1; ++j)
      for (int c = 0; c < cores; ++c) planes[std::size_t(j)].push_back(t.add_vertex(VertexKind::net_switch, -1, 3));
    for (std::size_t p = 0; p < pods; ++p) {
      const std::size_t lo = p * pod, hi = std::min(leaves.size(), lo + pod);
      for (int j = 0; j < up; ++j) {
        const VertexId agg = t.add_vertex(VertexKind::net_switch, -1, 2);
        for (std::size_t l = lo; l < hi; ++l) add_fabric_link(leaves[l], agg, leaf_up / double(up));
        const double agg_up = double(hi - lo) * leaf_up / double(up);
        for (VertexId core : planes[std::size_t(j)]) add_fabric_link(agg, core, agg_up / double(cores));
      }
    }
  }

  void build_fabric() {
    if (s.nics_per_node <= 0 || s.nodes <= 1) return;
    switch (s.fabric) {
      case FabricKind::single_switch: {
        const VertexId sw = t.add_vertex(VertexKind::net_switch, -1, 1);
        for (VertexId nic : nics) attach_nic(nic, sw);
        return;
      }
      case FabricKind::fat_tree: {
        if (s.levels <= 1) {
          const VertexId sw = t.add_vertex(VertexKind::net_switch, -1, 1);
          for (VertexId nic : nics) attach_nic(nic, sw);
          return;
        }
        build_tree({nics}, s.levels);
        return;
      }
      case FabricKind::rail_optimized: {
        // Rail r: the r-th NIC of every node, under its own leaves; the spine joins the rails.
        std::vector<std::vector<VertexId>> rails(std::size_t(s.nics_per_node));
        for (int n = 0; n < s.nodes; ++n)
          for (int r = 0; r < s.nics_per_node; ++r)
            rails[std::size_t(r)].push_back(nics[std::size_t(n * s.nics_per_node + r)]);
        build_tree(rails, std::max(2, s.levels));
        return;
      }
    }
  }
};

}  // namespace

Topology build_topology(const ClusterSpec& spec) {
  SCALEOUT_CHECK(spec.nodes >= 1 && spec.gpus_per_node >= 1, "build_topology: empty cluster");
  SCALEOUT_CHECK(spec.oversubscription >= 1, "build_topology: oversubscription below 1");
  Builder b{spec, Topology{}, {}};
  b.t.set_name(spec.name);
  b.t.set_generation(spec.generation);
  b.t.set_tuning(spec.tuning);
  b.build_nodes();
  b.build_fabric();
  return std::move(b.t);
}

}  // namespace scaleout
