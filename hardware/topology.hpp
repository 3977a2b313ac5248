#pragma once
// A cluster as a graph: GPUs, NVSwitches, PCIe switches, host bridges, NICs and network switches
// joined by directed links, each with a bandwidth, a latency and the fraction of that bandwidth
// payload can use (protocol and encoding overhead). A physical link is a pair of directed edges:
// both directions carry traffic independently (full duplex).
//
// Routing: shortest paths by hop count, equal-cost next hops chosen by a hash of (src, dst, flow),
// so the same flow always takes the same path (deterministic ECMP). GPUs and NICs never forward
// traffic: inside a node only switches and host bridges are transit, in the fabric only network
// switches. Traffic between nodes leaves through the sending GPU's NIC and enters through the
// receiving GPU's NIC (NCCL's GPU-NIC affinity); collectives may pick other NICs explicitly.
//
// Distances to a destination are computed by a backwards breadth-first search and cached (per
// node for node-internal segments, per leaf switch for the fabric), so a route costs its length
// times the fan-out of its vertices. The cache makes a Topology single-threaded: use one per
// simulation.
#include <boost/graph/adjacency_list.hpp>

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "sim/engine/time.hpp"

namespace scaleout {

enum class VertexKind : std::uint8_t { gpu, nvswitch, pcie_switch, host_bridge, nic, net_switch };
enum class LinkKind : std::uint8_t { nvlink, pcie, network };
// NCCL tunes its protocols per GPU architecture (compute capability 7.0, 8.0, 9.0, 10.0).
enum class GpuGeneration : std::uint8_t { volta, ampere, hopper, blackwell };

const char* vertex_kind_name(VertexKind k);
const char* link_kind_name(LinkKind k);

using VertexId = std::uint32_t;
using LinkId = std::uint32_t;
inline constexpr VertexId kNoVertex = std::numeric_limits<VertexId>::max();

// A well-mixed hash of three values (ECMP's choice of path for a flow).
std::uint64_t flow_hash(std::uint64_t a, std::uint64_t b, std::uint64_t c);

struct VertexProps {
  VertexKind kind = VertexKind::gpu;
  int node = -1;  // the node a vertex belongs to; -1 for the fabric (network switches)
  int index = 0;  // GPU: rank; NIC: index within the node; switch: level (1 = leaf)
};

struct LinkProps {
  LinkId id = 0;
};

using TopologyGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS, VertexProps, LinkProps>;

// One directed link. capacity() is what payload can use: bandwidth times efficiency.
struct Link {
  VertexId src = 0, dst = 0;
  double bandwidth = 0;   // bytes/s, this direction
  double efficiency = 1;  // fraction usable by payload
  Time latency;
  LinkKind kind = LinkKind::nvlink;
  bool failed = false;    // a failed link carries nothing and routes avoid it
  double capacity() const { return failed ? 0.0 : bandwidth * efficiency; }
};

// Calibrated corrections to NCCL's collective model (fitted by hardware/calibration/link_fit.hpp
// from NCCL timings): a latency added to every step by the class of link the step crosses, and
// per algorithm a latency added to every step and a factor on the bandwidth its payload gets.
// The defaults (zeros and ones) leave NCCL's model as it is.
struct CollectiveTuning {
  std::array<double, 3> step_latency_s{};  // by LinkKind: nvlink, pcie, network
  double ring_step_latency_s = 0;
  double tree_step_latency_s = 0;
  double ring_bus_efficiency = 1;
  double tree_bus_efficiency = 1;
};

struct NodeInfo {
  int first_rank = 0;
  int gpus = 0;
  bool nvlink = false;         // GPUs of the node talk over NVLink (else PCIe)
  bool pcie_p2p = true;        // false: GPU-to-GPU traffic bounces through the host bridge
  bool nvls = false;           // the NVSwitch reduces and multicasts (NVLink SHARP)
  VertexId nvswitch = kNoVertex;
  VertexId host_bridge = kNoVertex;
  std::vector<VertexId> vertices;  // every vertex of the node, GPUs first
};

class Topology {
 public:
  Topology() = default;

  // Building. GPUs come first, in rank order, so that a GPU's vertex is its rank; nodes are
  // declared in order, each before its vertices.
  int add_node(bool nvlink, bool pcie_p2p, bool nvls);
  VertexId add_gpu(int node);
  VertexId add_vertex(VertexKind kind, int node, int index = 0);
  // A full-duplex link: two directed links of the same figures. Returns the a->b link (b->a is +1).
  LinkId add_link(VertexId a, VertexId b, double bandwidth, Time latency, double efficiency, LinkKind kind);
  void set_nic(int rank, VertexId nic);  // the NIC a GPU sends and receives inter-node traffic on
  // Faults: a full-duplex link (both directions of `id`'s pair) running at `factor` of its
  // bandwidth, or failed; routes are recomputed around a failed link (ECMP picks among what is
  // left). A GPU whose NIC lost its network link moves to the nearest other NIC of its node
  // (NCCL's PXN, or the NIC excluded at restart). Returns false when nothing can replace it.
  void degrade_link(LinkId id, double factor);
  bool fail_link(LinkId id);
  // Whether any link has been degraded or failed.
  bool has_faults() const { return has_faults_; }
  void set_generation(GpuGeneration g) { generation_ = g; }
  void set_tuning(const CollectiveTuning& t) { tuning_ = t; }
  void set_name(std::string name) { name_ = std::move(name); }

  // Reading.
  const std::string& name() const { return name_; }
  GpuGeneration generation() const { return generation_; }
  const CollectiveTuning& tuning() const { return tuning_; }
  int gpu_count() const { return int(rank_node_.size()); }
  int node_count() const { return int(nodes_.size()); }
  const NodeInfo& node(int n) const { return nodes_[std::size_t(n)]; }
  int node_of(int rank) const { return rank_node_[std::size_t(rank)]; }
  int local_index(int rank) const { return rank - nodes_[std::size_t(node_of(rank))].first_rank; }
  VertexId gpu_vertex(int rank) const { return VertexId(rank); }
  VertexId nic_of(int rank) const { return rank_nic_[std::size_t(rank)]; }
  std::size_t vertex_count() const { return boost::num_vertices(graph_); }
  std::size_t link_count() const { return links_.size(); }
  const Link& link(LinkId id) const { return links_[id]; }
  const VertexProps& vertex(VertexId v) const { return graph_[v]; }
  const TopologyGraph& graph() const { return graph_; }

  // Routing: appends the links of one path to `out`. Returns false when there is none.
  // route_gpus() is what a point-to-point transfer between two ranks takes.
  bool route_gpus(int src_rank, int dst_rank, std::uint64_t hash, std::vector<LinkId>& out) const;
  // A path between any two vertices: inside one node through its switches, between a NIC and
  // another node's NIC through the fabric, and GPU/NIC of one node to GPU/NIC of another by way
  // of the given NICs (the GPUs' own when kNoVertex).
  bool route(VertexId src, VertexId dst, std::uint64_t hash, std::vector<LinkId>& out, VertexId src_nic = kNoVertex,
             VertexId dst_nic = kNoVertex) const;
  Time path_latency(const std::vector<LinkId>& path) const;

  // The first pair of ranks that cannot reach each other, described in words; nullopt when every
  // GPU reaches every other one.
  std::optional<std::string> find_disconnected() const;

 private:
  // node: inside one node over any link; nvlink: inside one node over NVLink only (GPU to GPU
  // traffic prefers it, as NCCL does); fabric: NICs and network switches.
  // switches: the fabric's network switches only, for the way to the leaf a NIC hangs off (its
  // distance table a few hundred entries, not one per NIC of the cluster).
  enum class Scope : std::uint8_t { node, fabric, nvlink, switches };
  struct DistTable {
    std::vector<std::uint16_t> dist;  // indexed by the scope-local index of a vertex
  };
  bool transit(VertexId v, Scope s) const;
  int slot(VertexId v, Scope s) const {
    return s == Scope::fabric ? fabric_slot_[v] : s == Scope::switches ? switch_slot_[v] : node_slot_[v];
  }
  static bool across_nodes(Scope s) { return s == Scope::fabric || s == Scope::switches; }
  bool usable(LinkId l, Scope s) const {
    return !links_[l].failed && (s != Scope::nvlink || links_[l].kind == LinkKind::nvlink);
  }
  const DistTable& distances(VertexId dst, Scope s) const;
  bool segment(VertexId src, VertexId dst, Scope s, std::uint64_t hash, std::vector<LinkId>& out) const;
  bool walk(VertexId src, VertexId dst, Scope s, std::uint64_t hash, std::vector<LinkId>& out) const;

  TopologyGraph graph_;
  std::vector<Link> links_;
  std::vector<NodeInfo> nodes_;
  std::vector<int> rank_node_;
  std::vector<VertexId> rank_nic_;
  std::vector<int> node_slot_;             // per vertex: index in its node's vertex list, or -1
  std::vector<int> fabric_slot_;           // per vertex: index among NICs and network switches, or -1
  std::vector<VertexId> fabric_vertices_;
  std::vector<int> switch_slot_;           // per vertex: index among network switches, or -1
  int switch_count_ = 0;
  std::string name_;
  GpuGeneration generation_ = GpuGeneration::hopper;
  bool has_faults_ = false;
  CollectiveTuning tuning_;
  mutable std::unordered_map<std::uint64_t, DistTable> dist_cache_;
  // Routes already walked (a step repeats the same collectives thousands of times): the key
  // packs src, dst, both NICs and the flow hash; the value is the path, or none.
  struct RouteKey {
    VertexId src, dst, src_nic, dst_nic;
    std::uint64_t hash;
    bool operator==(const RouteKey&) const = default;
  };
  struct RouteKeyHash {
    std::size_t operator()(const RouteKey& k) const {
      return std::size_t(flow_hash(k.hash, (std::uint64_t(k.src) << 32) | k.dst, (std::uint64_t(k.src_nic) << 32) | k.dst_nic));
    }
  };
  struct CachedRoute {
    bool ok = false;
    std::vector<LinkId> links;
  };
  mutable std::unordered_map<RouteKey, CachedRoute, RouteKeyHash> route_cache_;
  bool route_uncached(VertexId src, VertexId dst, std::uint64_t hash, std::vector<LinkId>& out, VertexId src_nic,
                      VertexId dst_nic) const;
};

// A 64-bit mix of (a, b, c) for deterministic ECMP choices (splitmix64 finaliser).
std::uint64_t flow_hash(std::uint64_t a, std::uint64_t b, std::uint64_t c);

}  // namespace scaleout
