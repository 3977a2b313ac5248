#include "sim/network/collectives.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "sim/engine/check.hpp"

namespace scaleout {
namespace {

// ---- NCCL's tuning model: src/graph/tuning.cc at NVIDIA/nccl commit b6475625 (NCCL 2.19).
// Latencies in microseconds, bandwidths in GB/s. Rows: Tree, Ring, NVLS; columns LL, LL128, Simple.
enum Hw { kHwNvlink = 0, kHwPci = 1, kHwNet = 2 };
enum Row { kRowTree = 0, kRowRing = 1, kRowNvls = 2, kRowNvlsTree = 3 };
constexpr double kBaseLat[4][3] = {{6.8, 14.0, 0}, {6.6, 14.0, 8.4}, {0, 0, 0}, {0, 0, 0}};
constexpr double kHwLat[3][4][3] = {
    /* NVLink */ {{.6, 1.25, 28}, {.6, 1.9, 3.4}, {0, 0, 23}, {0, 0, 23}},
    /* PCI */ {{1.0, 1.9, 28}, {1.0, 2.5, 5.7}, {0, 0, 0}, {0, 0, 0}},
    /* NET */ {{5.0, 8.5, 28}, {2.7, 4.0, 14.0}, {0, 0, 18}, {0, 0, 14}}};
// llMaxBws: rows Volta, Ampere, Hopper for one node (row 0, Intel CPUs, across nodes); columns
// for 1, 2, more nodes.
constexpr double kLlMaxBw[3][3] = {{39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {87.7, 22.5, 19.0}};
// "Trees are not perfectly sticking to the model for medium sizes": NCCL's static correction of
// tree bandwidth by log2(bytes / 64), 64 B to 256 MB.
constexpr double kTreeCorrection[3][23] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9}};
// NVLS: algorithm bandwidth is 5/6 of the NVLS graph's (the "ratio *= 5.0/6.0" of tuning.cc).
constexpr double kNvlsRatio = 5.0 / 6.0;
// Network post overhead per step on inter-node rings (getNetOverhead: 1 us on Intel, x3 Simple).
constexpr double kNetOverheadUs = 1.0;
// Point-to-point messages up to this size go by LL (NCCL_P2P_LL_THRESHOLD's default).
constexpr double kP2pLlThreshold = 16384;

int proto_index(Protocol p) { return int(p); }

struct Group {
  std::vector<int> order;                  // ranks by (node, local index)
  std::vector<std::vector<int>> per_node;  // the group's ranks on each node it spans
  int n = 0;
  int nodes = 0;
  int ppn_min = 0, ppn_max = 0;
  bool nvlink = true;    // every node joins its ranks by NVLink (else PCIe)
  bool nvls = false;     // one node whose NVSwitch reduces
  bool nvls_nodes = false;  // several nodes, each with a reducing NVSwitch and >= 2 of the group's GPUs
  int rails = 1;         // distinct NICs per node (the fewest over nodes)
  double intra_bw = 0;   // bytes/s a rank can send inside its node
  double inter_bw = 0;   // bytes/s a node can send to the fabric over the NICs the group uses
  double net_latency_us = 0;  // the fabric's latency between two of the group's nodes
  int pos_of_root = 0;
  CollectiveTuning tune;      // calibrated corrections (none by default)
};

// A step's hardware latency with the calibrated corrections of its link class and algorithm (a
// fitted correction may be negative; a step never costs less than nothing).
double tuned_us(double table_us, const Group& g, int hw, double algo_step_s) {
  return std::max(0.0, table_us + 1e6 * (g.tune.step_latency_s[std::size_t(hw)] + algo_step_s));
}

double out_capacity(const Topology& t, VertexId v, LinkKind kind) {
  double c = 0;
  for (auto [e, end] = boost::out_edges(v, t.graph()); e != end; ++e) {
    const Link& l = t.link(t.graph()[*e].id);
    if (l.kind == kind) c += l.capacity();
  }
  return c;
}

Group analyse(const Topology& t, const std::vector<int>& ranks) {
  Group g;
  g.n = int(ranks.size());
  g.order = ranks;
  std::sort(g.order.begin(), g.order.end(), [&](int a, int b) {
    return t.node_of(a) != t.node_of(b) ? t.node_of(a) < t.node_of(b) : a < b;
  });
  for (int r : g.order) {
    if (g.per_node.empty() || t.node_of(g.per_node.back().front()) != t.node_of(r)) g.per_node.emplace_back();
    g.per_node.back().push_back(r);
  }
  g.nodes = int(g.per_node.size());
  g.ppn_min = std::numeric_limits<int>::max();
  g.intra_bw = std::numeric_limits<double>::infinity();
  g.inter_bw = std::numeric_limits<double>::infinity();
  g.rails = std::numeric_limits<int>::max();
  for (const auto& local : g.per_node) {
    g.ppn_min = std::min(g.ppn_min, int(local.size()));
    g.ppn_max = std::max(g.ppn_max, int(local.size()));
    const NodeInfo& node = t.node(t.node_of(local.front()));
    // A bridged pair is NVLink only if the group stays inside the pair.
    const bool pair = local.size() <= 2 && t.local_index(local.front()) / 2 == t.local_index(local.back()) / 2;
    const bool nvl = node.nvlink && (node.nvswitch != kNoVertex || pair);
    g.nvlink = g.nvlink && nvl;
    for (int r : local) {
      const double c = nvl ? out_capacity(t, t.gpu_vertex(r), LinkKind::nvlink) : out_capacity(t, t.gpu_vertex(r), LinkKind::pcie);
      if (local.size() > 1) g.intra_bw = std::min(g.intra_bw, c);
    }
    std::set<VertexId> nics;
    for (int r : local)
      if (t.nic_of(r) != kNoVertex) nics.insert(t.nic_of(r));
    g.rails = std::min(g.rails, std::max(1, int(nics.size())));
    double node_out = 0;
    for (VertexId nic : nics)
      node_out += std::min(out_capacity(t, nic, LinkKind::network), out_capacity(t, nic, LinkKind::pcie));
    g.inter_bw = std::min(g.inter_bw, node_out);
  }
  if (g.nodes <= 1) g.rails = 1;
  g.tune = t.tuning();
  g.nvls = g.nodes == 1 && g.n >= 2 && t.node(t.node_of(g.order.front())).nvls;
  g.nvls_nodes = g.nodes > 1 && g.ppn_min >= 2 && g.ppn_min == g.ppn_max;
  for (const auto& local : g.per_node) g.nvls_nodes = g.nvls_nodes && t.node(t.node_of(local.front())).nvls;
  if (g.nodes > 1) {
    std::vector<LinkId> path;
    const VertexId a = t.nic_of(g.per_node[0].front()), b = t.nic_of(g.per_node[1].front());
    if (a != kNoVertex && b != kNoVertex && t.route(a, b, 0, path)) g.net_latency_us = t.path_latency(path).us();
  }
  return g;
}

int log2i(long long v) {
  int l = 0;
  while (v >>= 1) ++l;
  return l;
}

bool is_reduce_like(CollectiveKind k) { return k == CollectiveKind::all_reduce || k == CollectiveKind::reduce; }

// NCCL's latency (microseconds) of a ring of this group.
double ring_latency_us(CollectiveKind k, const Group& g, Protocol p) {
  const int pi = proto_index(p);
  const int intra_hw = g.nvlink ? kHwNvlink : kHwPci;
  const int hw = g.nodes == 1 ? intra_hw : kHwNet;
  const int n = g.n;
  double lat = kBaseLat[kRowRing][pi];
  const double ring_step = g.tune.ring_step_latency_s;
  if (k == CollectiveKind::broadcast || k == CollectiveKind::reduce) return lat + tuned_us(kHwLat[hw][kRowRing][pi], g, hw, ring_step);
  const int nsteps = k == CollectiveKind::all_reduce ? 2 * (n - 1) : n - 1;
  // Inter-node steps as later NCCL counts them (2(nodes-1) for all-reduce): never more than all.
  const int ninter = std::min(nsteps, g.nodes <= 1 ? 0 : k == CollectiveKind::all_reduce ? 2 * (g.nodes - 1) : g.nodes - 1);
  double intra = kHwLat[intra_hw][kRowRing][pi];
  if (g.nodes > 1 && p == Protocol::ll) intra *= 1.8;
  double inter = kHwLat[kHwNet][kRowRing][pi] + g.net_latency_us;
  if (p == Protocol::simple) inter += g.net_latency_us;
  if (g.nodes > 1) intra = std::max(intra, kNetOverheadUs * (p == Protocol::simple ? 3 : 1));
  intra = tuned_us(intra, g, intra_hw, ring_step);
  inter = tuned_us(inter, g, kHwNet, ring_step);
  return lat + (nsteps - ninter) * intra + ninter * inter;
}

double tree_latency_us(const Group& g, Protocol p) {
  const int pi = proto_index(p);
  const int intra_hw = g.nvlink ? kHwNvlink : kHwPci;
  double intra = kHwLat[intra_hw][kRowTree][pi];
  if (g.nodes > 1 && p == Protocol::ll) intra *= 1.8;
  double inter = kHwLat[kHwNet][kRowTree][pi] + g.net_latency_us;
  if (p == Protocol::simple) inter += g.net_latency_us;
  intra = tuned_us(intra, g, intra_hw, g.tune.tree_step_latency_s);
  inter = tuned_us(inter, g, kHwNet, g.tune.tree_step_latency_s);
  return kBaseLat[kRowTree][pi] + 2 * ((g.n / g.nodes - 1) * intra + log2i(g.nodes) * inter);
}

double nvls_latency_us() { return kHwLat[kHwNvlink][kRowNvls][proto_index(Protocol::simple)]; }

// NVLS tree: intraLat + 2 log2(nodes) interLat (+ the network latency twice for Simple).
double nvls_tree_latency_us(const Group& g) {
  const double inter = kHwLat[kHwNet][kRowNvlsTree][proto_index(Protocol::simple)] + 2 * g.net_latency_us;
  return kHwLat[kHwNvlink][kRowNvlsTree][proto_index(Protocol::simple)] + 2 * log2i(g.nodes) * inter;
}

// One point-to-point step (send/recv, a step of direct or halving-doubling).
double step_latency_us(const Group& g, Protocol p, bool crosses_nodes) {
  const int hw = crosses_nodes ? kHwNet : g.nvlink ? kHwNvlink : kHwPci;
  return tuned_us(kHwLat[hw][kRowRing][proto_index(p)], g, hw, 0) + (crosses_nodes ? g.net_latency_us : 0);
}

double ll_cap(const Topology& t, const Group& g) {
  int row = 0;
  if (g.nodes == 1) row = t.generation() == GpuGeneration::volta ? 0 : t.generation() == GpuGeneration::ampere ? 1 : 2;
  const int col = g.nodes <= 2 ? g.nodes - 1 : 2;
  return kLlMaxBw[row][col] * 1e9;
}

double protocol_efficiency_table(CollectiveAlgorithm a, Protocol p, CollectiveKind k, const Group& g);

// Fraction of the links' bandwidth the payload gets under a protocol (NCCL's refinements), times
// the calibrated bus efficiency of rings and trees.
double protocol_efficiency(CollectiveAlgorithm a, Protocol p, CollectiveKind k, const Group& g) {
  const double e = protocol_efficiency_table(a, p, k, g);
  if (a == CollectiveAlgorithm::ring) return e * g.tune.ring_bus_efficiency;
  if (a == CollectiveAlgorithm::tree) return e * g.tune.tree_bus_efficiency;
  return e;
}

double protocol_efficiency_table(CollectiveAlgorithm a, Protocol p, CollectiveKind k, const Group& g) {
  const bool ring_like = a != CollectiveAlgorithm::tree && a != CollectiveAlgorithm::nvls && a != CollectiveAlgorithm::nvls_tree;
  if (a == CollectiveAlgorithm::nvls || a == CollectiveAlgorithm::nvls_tree) return kNvlsRatio;
  if (ring_like) {
    if (p == Protocol::ll) return (g.nodes > 1 || is_reduce_like(k)) ? 1.0 / 4.0 : 1.0 / 3.0;
    if (p == Protocol::ll128) return g.n / std::max(1, g.nodes) < 2 ? 0.7 : 0.92;
    return 1.0;
  }
  if (p == Protocol::ll) return 0.92 / 3.8;
  if (p == Protocol::ll128) return 0.92 * (g.nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0);
  return 0.92;
}

double tree_correction(Protocol p, double bytes) {
  const int log_size = log2i((long long)(bytes) >> 6);
  return log_size < 23 ? kTreeCorrection[proto_index(p)][log_size] : 1.0;
}

bool ll128_allowed(const Group& g) { return g.nvlink; }

struct Candidate {
  CollectiveAlgorithm a;
  Protocol p;
};

double ring_bus(const Group& g) { return std::min(g.intra_bw, g.nodes > 1 ? g.inter_bw : std::numeric_limits<double>::infinity()); }

double latency_us(const Topology& t, const CollectiveSpec& s, const Group& g, CollectiveAlgorithm a, Protocol p);

// The tuner's time for one algorithm and protocol: latency + bytes / modelled bandwidth.
double estimate(const Topology& t, const CollectiveSpec& s, const Group& g, CollectiveAlgorithm a, Protocol p) {
  const double bytes = s.bytes;
  const int n = g.n;
  double lat = latency_us(t, s, g, a, p) * 1e-6;
  const double eff = protocol_efficiency(a, p, s.kind, g);
  double bus = ring_bus(g) * eff;
  if (p == Protocol::ll) bus = std::min(bus, ll_cap(t, g));
  switch (a) {
    case CollectiveAlgorithm::ring: {
      const double frac = s.kind == CollectiveKind::all_reduce ? 2.0 * (n - 1) / n
                          : (s.kind == CollectiveKind::broadcast || s.kind == CollectiveKind::reduce) ? 1.0
                                                                                                      : double(n - 1) / n;
      if (p == Protocol::simple && g.nodes > 1 && s.kind == CollectiveKind::all_reduce &&
          bytes / (g.rails * n) >= 64)
        lat *= t.generation() == GpuGeneration::volta ? 1.9 : 1.4;  // NCCL's ring plateau
      return lat + bytes * frac / bus;
    }
    case CollectiveAlgorithm::tree: return lat + bytes * 2 / (bus * tree_correction(p, bytes));
    case CollectiveAlgorithm::nvls: return lat + bytes * (n + 1.0) / n / (g.intra_bw * eff);
    case CollectiveAlgorithm::nvls_tree: {
      // NVLink moves S(m+1)/m per GPU; each GPU's NIC S/m (two nodes) or twice that (a tree's
      // inner nodes send up and down).
      const double m = g.ppn_max;
      const double nvl = bytes * (m + 1) / m / (g.intra_bw * eff);
      const double net = (g.nodes <= 2 ? 1 : 2) * bytes / m / (g.inter_bw / m * eff);
      return lat + std::max(nvl, net);
    }
    case CollectiveAlgorithm::hierarchical: {
      const double m = g.ppn_max;
      const double intra = g.intra_bw * eff, inter = std::min(g.inter_bw / m, g.intra_bw) * eff;
      const double in_frac = (m - 1) / m, out_frac = (g.nodes - 1.0) / g.nodes;
      double bw_time = 0;
      if (s.kind == CollectiveKind::all_reduce) bw_time = 2 * in_frac * bytes / intra + 2 * out_frac * bytes / m / inter;
      else if (s.kind == CollectiveKind::broadcast || s.kind == CollectiveKind::reduce) bw_time = bytes / inter + bytes / intra;
      else bw_time = in_frac * bytes / intra + out_frac * bytes / m / inter;
      return lat + bw_time;
    }
    case CollectiveAlgorithm::direct: {
      const double per_rank = g.nodes > 1 ? std::min(g.intra_bw, g.inter_bw / g.ppn_max) : g.intra_bw;
      double frac = double(n - 1) / n;
      if (s.kind == CollectiveKind::all_reduce) frac *= 2;
      if (s.kind == CollectiveKind::broadcast || s.kind == CollectiveKind::reduce) frac = n - 1.0;
      if (s.kind == CollectiveKind::send_recv) frac = 1;
      return lat + bytes * frac / (per_rank * eff);
    }
    case CollectiveAlgorithm::halving_doubling: {
      const double frac = s.kind == CollectiveKind::all_reduce ? 2.0 * (n - 1) / n : double(n - 1) / n;
      return lat + bytes * frac / bus;
    }
  }
  return lat;
}

double latency_us(const Topology& t, const CollectiveSpec& s, const Group& g, CollectiveAlgorithm a, Protocol p) {
  (void)t;
  switch (a) {
    case CollectiveAlgorithm::ring: return ring_latency_us(s.kind, g, p);
    case CollectiveAlgorithm::tree: return tree_latency_us(g, p);
    case CollectiveAlgorithm::nvls: return nvls_latency_us();
    case CollectiveAlgorithm::nvls_tree: return nvls_tree_latency_us(g);
    case CollectiveAlgorithm::hierarchical: {
      if (g.nodes <= 1) return ring_latency_us(s.kind, g, p);
      Group intra = g, inter = g;
      intra.n = g.ppn_max;
      intra.nodes = 1;
      inter.n = g.nodes;
      const int phases_intra = s.kind == CollectiveKind::all_reduce ? 2 : 1;
      const CollectiveKind intra_kind = s.kind == CollectiveKind::all_reduce ? CollectiveKind::reduce_scatter : s.kind;
      return phases_intra * ring_latency_us(intra_kind, intra, p) + ring_latency_us(s.kind, inter, p);
    }
    case CollectiveAlgorithm::direct: {
      const int phases = s.kind == CollectiveKind::all_reduce ? 2 : 1;
      return phases * (kBaseLat[kRowRing][proto_index(p)] + step_latency_us(g, p, g.nodes > 1));
    }
    case CollectiveAlgorithm::halving_doubling: {
      int p2 = 1;
      while (p2 * 2 <= g.n) p2 *= 2;
      int steps = log2i(p2) * (s.kind == CollectiveKind::all_reduce ? 2 : 1) + (p2 < g.n ? 2 : 0);
      return kBaseLat[kRowRing][proto_index(p)] + steps * step_latency_us(g, p, g.nodes > 1);
    }
  }
  return 0;
}

std::vector<CollectiveAlgorithm> supported_algorithms(CollectiveKind k) {
  using A = CollectiveAlgorithm;
  switch (k) {
    case CollectiveKind::all_reduce:
      return {A::ring, A::tree, A::nvls, A::nvls_tree, A::hierarchical, A::direct, A::halving_doubling};
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::all_gather: return {A::ring, A::hierarchical, A::direct, A::halving_doubling};
    case CollectiveKind::broadcast:
    case CollectiveKind::reduce: return {A::ring, A::hierarchical, A::direct};
    case CollectiveKind::all_to_all:
    case CollectiveKind::send_recv: return {A::direct};
  }
  return {};
}

std::vector<Protocol> protocols_for(CollectiveAlgorithm a, const Group& g) {
  if (a == CollectiveAlgorithm::nvls || a == CollectiveAlgorithm::nvls_tree) return {Protocol::simple};
  std::vector<Protocol> ps{Protocol::ll};
  if (ll128_allowed(g)) ps.push_back(Protocol::ll128);
  ps.push_back(Protocol::simple);
  return ps;
}

// ---- Plans: phases of flows.

struct PlannedFlow {
  std::vector<LinkId> links;
  double bytes = 0;
  Time latency;
  double cap = FlowNetwork::kNoCap;
};
using Phase = std::vector<PlannedFlow>;

struct Planner {
  const Topology& t;
  const CollectiveSpec& s;
  const Group& g;
  CollectiveAlgorithm algo;
  Protocol proto;
  double eff = 1;
  std::vector<Phase> phases;

  std::uint64_t hash(int a, int b, int channel) const {
    return flow_hash(std::uint64_t(a), std::uint64_t(b), (std::uint64_t(std::uint32_t(s.tag)) << 16) ^ std::uint64_t(channel));
  }

  void path(int a, int b, int channel, std::vector<LinkId>& out) const {
    const bool ok = t.route_gpus(a, b, hash(a, b, channel), out);
    SCALEOUT_CHECK(ok, "collective: no route from rank " + std::to_string(a) + " to rank " + std::to_string(b));
  }

  // A step of a ring or chain between nodes rides the rail of the receiving GPU's NIC: the data
  // crosses NVLink to the sender-side GPU on that rail first (NCCL's PXN) when the sender's own
  // NIC is on another rail, so rails stay separate in a rail-optimised fabric.
  void ring_path(int a, int b, int channel, std::vector<LinkId>& out) const {
    const int na = t.node_of(a), nb = t.node_of(b);
    if (na == nb || t.nic_of(a) == kNoVertex || t.nic_of(b) == kNoVertex) return path(a, b, channel, out);
    const int rail = t.vertex(t.nic_of(b)).index;
    if (t.vertex(t.nic_of(a)).index == rail || !t.node(na).nvlink || t.node(na).nvswitch == kNoVertex)
      return path(a, b, channel, out);
    const NodeInfo& node = t.node(na);
    for (int x = node.first_rank; x < node.first_rank + node.gpus; ++x)
      if (t.nic_of(x) != kNoVertex && t.vertex(t.nic_of(x)).index == rail) {
        path(a, x, channel, out);
        path(x, b, channel, out);
        return;
      }
    path(a, b, channel, out);
  }

  Time lat(double us) const { return Time::from_us(us); }

  // Index in `local` of the first GPU on each distinct NIC, in order.
  std::vector<int> rail_entries(const std::vector<int>& local) const {
    std::vector<int> entries;
    std::vector<VertexId> seen;
    for (int i = 0; i < int(local.size()); ++i) {
      const VertexId nic = t.nic_of(local[std::size_t(i)]);
      if (std::find(seen.begin(), seen.end(), nic) != seen.end()) continue;
      seen.push_back(nic);
      entries.push_back(i);
    }
    if (entries.empty()) entries.push_back(0);
    return entries;
  }

  std::vector<int> rotated(const std::vector<int>& v, int start) const {
    std::vector<int> out;
    out.reserve(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out.push_back(v[(std::size_t(start) + i) % v.size()]);
    return out;
  }

  // The ring of channel c over a set of per-node rank lists: each node's ranks rotated so that
  // channel c enters the node on its c-th NIC.
  std::vector<int> ring_order(const std::vector<std::vector<int>>& per_node, int c) const {
    std::vector<int> seq;
    for (const auto& local : per_node) {
      const auto entries = rail_entries(local);
      const auto r = per_node.size() > 1 ? rotated(local, entries[std::size_t(c) % entries.size()]) : local;
      seq.insert(seq.end(), r.begin(), r.end());
    }
    return seq;
  }

  // Ring over `per_node`, `channels` coupled flows, each member carrying `member_bytes`.
  void add_ring(Phase& ph, CollectiveKind kind, const std::vector<std::vector<int>>& per_node, double total_bytes,
                double latency_us, int channels, int root_rank) {
    int n = 0;
    for (const auto& l : per_node) n += int(l.size());
    if (n <= 1) return;
    double frac = kind == CollectiveKind::all_reduce ? 2.0 * (n - 1) / n : double(n - 1) / n;
    const bool chain = kind == CollectiveKind::broadcast || kind == CollectiveKind::reduce;
    if (chain) frac = 1;
    for (int c = 0; c < channels; ++c) {
      std::vector<int> seq = ring_order(per_node, c);
      PlannedFlow f;
      if (chain) {
        const auto it = std::find(seq.begin(), seq.end(), root_rank);
        std::rotate(seq.begin(), it == seq.end() ? seq.begin() : it, seq.end());
        for (int i = 0; i + 1 < n; ++i) {
          if (kind == CollectiveKind::broadcast) ring_path(seq[std::size_t(i)], seq[std::size_t(i + 1)], c, f.links);
          else ring_path(seq[std::size_t(i + 1)], seq[std::size_t(i)], c, f.links);
        }
      } else {
        for (int i = 0; i < n; ++i) ring_path(seq[std::size_t(i)], seq[std::size_t((i + 1) % n)], c, f.links);
      }
      f.bytes = total_bytes * frac / channels / eff;
      f.latency = lat(latency_us);
      // llMaxBw caps the payload's bus bandwidth; the flow carries payload / eff on the wire.
      if (proto == Protocol::ll) f.cap = ll_cap(t, g) / (channels * eff);
      ph.push_back(std::move(f));
    }
  }

  void plan_ring() {
    phases.emplace_back();
    const int root = s.ranks[std::size_t(s.root)];
    add_ring(phases.back(), s.kind, g.per_node, s.bytes, ring_latency_us(s.kind, g, proto), g.nodes > 1 ? g.rails : 1, root);
  }

  static int btree_parent(int i, int n) {
    if (i == 0) return -1;
    int bit = 1;
    while (!(i & bit)) bit <<= 1;
    int up = (i ^ bit) | (bit << 1);
    if (up >= n) up = i ^ bit;
    return up;
  }

  void plan_tree() {
    phases.emplace_back();
    Phase& ph = phases.back();
    const double latency_us = tree_latency_us(g, proto);
    const double corr = tree_correction(proto, s.bytes);
    const int channels = g.nodes > 1 ? g.rails : 1;
    for (int c = 0; c < channels; ++c) {
      for (int tree = 0; tree < 2; ++tree) {
        PlannedFlow f;
        std::vector<int> heads;
        for (const auto& local : g.per_node) {
          // Inside a node a chain from the head; the two trees use different heads (NICs).
          const auto entries = rail_entries(local);
          std::vector<int> chain = rotated(local, entries[std::size_t(2 * c + tree) % entries.size()]);
          if (g.nodes == 1 && tree == 1) std::reverse(chain.begin(), chain.end());
          heads.push_back(chain.front());
          for (std::size_t i = 0; i + 1 < chain.size(); ++i) {
            path(chain[i + 1], chain[i], c, f.links);
            path(chain[i], chain[i + 1], c, f.links);
          }
        }
        const int nn = g.nodes;
        for (int i = 0; i < nn; ++i) {
          // The second tree mirrors the first (odd node counts: shifts it), so that a node is a
          // leaf in one tree and inside the other.
          int pos = i;
          if (tree == 1) pos = nn % 2 ? (i - 1 + nn) % nn : nn - 1 - i;
          const int ppos = btree_parent(pos, nn);
          if (ppos < 0) continue;
          int parent = ppos;
          if (tree == 1) parent = nn % 2 ? (ppos + 1) % nn : nn - 1 - ppos;
          ring_path(heads[std::size_t(i)], heads[std::size_t(parent)], c, f.links);
          ring_path(heads[std::size_t(parent)], heads[std::size_t(i)], c, f.links);
        }
        f.bytes = s.bytes / 2 / channels / (eff * corr);
        f.latency = lat(latency_us);
        // Tree: algbw = busbw / 2 and each member carries a quarter of a channel's traffic.
        if (proto == Protocol::ll) f.cap = ll_cap(t, g) / (4.0 * channels * eff);
        ph.push_back(std::move(f));
      }
    }
  }

  void plan_nvls() {
    phases.emplace_back();
    PlannedFlow f;
    const VertexId sw = t.node(t.node_of(g.order.front())).nvswitch;
    for (int r : g.order) {
      const bool up = t.route(t.gpu_vertex(r), sw, hash(r, -1, 0), f.links);
      const bool down = t.route(sw, t.gpu_vertex(r), hash(-1, r, 0), f.links);
      SCALEOUT_CHECK(up && down, "collective: NVLS without a path to the NVSwitch");
    }
    f.bytes = s.bytes * (g.n + 1.0) / g.n / eff;
    f.latency = lat(nvls_latency_us());
    phases.back().push_back(std::move(f));
  }

  void plan_nvls_tree() {
    phases.emplace_back();
    Phase& ph = phases.back();
    const Time latency = lat(nvls_tree_latency_us(g));
    const int m = g.ppn_max;
    // Inside each node the switch reduces and multicasts, as in NVLS.
    for (const auto& local : g.per_node) {
      PlannedFlow f;
      const VertexId sw = t.node(t.node_of(local.front())).nvswitch;
      for (int r : local) {
        const bool up = t.route(t.gpu_vertex(r), sw, hash(r, -1, 0), f.links);
        const bool down = t.route(sw, t.gpu_vertex(r), hash(-1, r, 0), f.links);
        SCALEOUT_CHECK(up && down, "collective: NVLS without a path to the NVSwitch");
      }
      f.bytes = s.bytes * (m + 1.0) / m / eff;
      f.latency = latency;
      ph.push_back(std::move(f));
    }
    // Between nodes, GPU j of every node joins a double binary tree over its own rail for its
    // 1/m of the data, half per tree, up and down pipelined.
    const int nn = g.nodes;
    for (int j = 0; j < m; ++j)
      for (int tree = 0; tree < 2; ++tree) {
        PlannedFlow f;
        for (int i = 0; i < nn; ++i) {
          const int pos = tree == 1 ? (nn % 2 ? (i - 1 + nn) % nn : nn - 1 - i) : i;
          const int ppos = btree_parent(pos, nn);
          if (ppos < 0) continue;
          const int parent = tree == 1 ? (nn % 2 ? (ppos + 1) % nn : nn - 1 - ppos) : ppos;
          const int a = g.per_node[std::size_t(i)][std::size_t(j)], b = g.per_node[std::size_t(parent)][std::size_t(j)];
          path(a, b, j, f.links);
          path(b, a, j, f.links);
        }
        f.bytes = s.bytes / m / 2 / eff;
        f.latency = latency;
        if (!f.links.empty()) ph.push_back(std::move(f));
      }
  }

  void plan_hierarchical() {
    if (g.nodes <= 1) return plan_ring();
    const int m = g.ppn_max;
    Group intra_g = g, inter_g = g;
    intra_g.n = m;
    intra_g.nodes = 1;
    inter_g.n = g.nodes;
    const int root = s.ranks[std::size_t(s.root)];
    int root_node = 0, root_local = 0;
    for (int i = 0; i < g.nodes; ++i)
      for (int j = 0; j < int(g.per_node[std::size_t(i)].size()); ++j)
        if (g.per_node[std::size_t(i)][std::size_t(j)] == root) root_node = i, root_local = j;
    auto intra = [&](CollectiveKind k, double bytes, int local_root) {
      Phase ph;
      for (const auto& local : g.per_node)
        add_ring(ph, k, {local}, bytes, ring_latency_us(k, intra_g, proto), 1, local[std::size_t(local_root)]);
      phases.push_back(std::move(ph));
    };
    auto inter = [&](CollectiveKind k, double bytes) {
      Phase ph;
      for (int j = 0; j < m; ++j) {
        std::vector<std::vector<int>> column;
        for (const auto& local : g.per_node) column.push_back({local[std::size_t(j)]});
        add_ring(ph, k, column, bytes, ring_latency_us(k, inter_g, proto), 1,
                 g.per_node[std::size_t(root_node)][std::size_t(j)]);
      }
      phases.push_back(std::move(ph));
    };
    switch (s.kind) {
      case CollectiveKind::all_reduce:
        intra(CollectiveKind::reduce_scatter, s.bytes, 0);
        inter(CollectiveKind::all_reduce, s.bytes / m);
        intra(CollectiveKind::all_gather, s.bytes, 0);
        break;
      case CollectiveKind::reduce_scatter:
        intra(CollectiveKind::reduce_scatter, s.bytes, 0);
        inter(CollectiveKind::reduce_scatter, s.bytes / m);
        break;
      case CollectiveKind::all_gather:
        inter(CollectiveKind::all_gather, s.bytes / m);
        intra(CollectiveKind::all_gather, s.bytes, 0);
        break;
      case CollectiveKind::broadcast: {
        Phase ph;
        std::vector<std::vector<int>> column;
        for (const auto& local : g.per_node) column.push_back({local[std::size_t(root_local)]});
        add_ring(ph, CollectiveKind::broadcast, column, s.bytes, ring_latency_us(CollectiveKind::broadcast, inter_g, proto), 1, root);
        phases.push_back(std::move(ph));
        intra(CollectiveKind::broadcast, s.bytes, root_local);
        break;
      }
      case CollectiveKind::reduce: {
        intra(CollectiveKind::reduce, s.bytes, root_local);
        Phase ph;
        std::vector<std::vector<int>> column;
        for (const auto& local : g.per_node) column.push_back({local[std::size_t(root_local)]});
        add_ring(ph, CollectiveKind::reduce, column, s.bytes, ring_latency_us(CollectiveKind::reduce, inter_g, proto), 1, root);
        phases.push_back(std::move(ph));
        break;
      }
      default: SCALEOUT_CHECK(false, "collective: hierarchical does not implement this collective");
    }
  }

  void add_p2p(Phase& ph, int a, int b, double bytes, double extra_us = 0) {
    PlannedFlow f;
    path(a, b, 0, f.links);
    f.bytes = bytes / eff;
    f.latency = lat(step_latency_us(g, proto, t.node_of(a) != t.node_of(b)) + extra_us);
    ph.push_back(std::move(f));
  }

  void plan_direct() {
    const int n = g.n;
    const auto& r = g.order;
    const double base = kBaseLat[kRowRing][proto_index(proto)];
    // Every rank to every other: a rank's sends are posted together and progress together, so
    // they are one coupled flow per rank (two: the sends inside its node and those leaving it, which
    // run at different speeds). p^2 independent flows would re-solve the network p^2 times.
    auto all_pairs = [&](double bytes) {
      Phase ph;
      for (int i = 0; i < n; ++i) {
        PlannedFlow local, remote;
        const int a = r[std::size_t(i)];
        for (int j = 0; j < n; ++j) {
          const int b = r[std::size_t(j)];
          if (i == j) continue;
          path(a, b, 0, t.node_of(a) == t.node_of(b) ? local.links : remote.links);
        }
        for (auto* f : {&local, &remote}) {
          if (f->links.empty()) continue;
          f->bytes = bytes / eff;
          f->latency = lat(base + step_latency_us(g, proto, f == &remote));
          ph.push_back(std::move(*f));
        }
      }
      phases.push_back(std::move(ph));
    };
    const int root = s.ranks[std::size_t(s.root)];
    switch (s.kind) {
      case CollectiveKind::all_to_all:
      case CollectiveKind::all_gather:
      case CollectiveKind::reduce_scatter: all_pairs(s.bytes / n); break;
      case CollectiveKind::all_reduce:
        all_pairs(s.bytes / n);
        all_pairs(s.bytes / n);
        break;
      case CollectiveKind::broadcast:
      case CollectiveKind::reduce: {
        Phase ph;
        for (int x : r)
          if (x != root) {
            if (s.kind == CollectiveKind::broadcast) add_p2p(ph, root, x, s.bytes, base);
            else add_p2p(ph, x, root, s.bytes, base);
          }
        phases.push_back(std::move(ph));
        break;
      }
      case CollectiveKind::send_recv: {
        // As nccl-tests' sendrecv: each rank sends to the next one in the list.
        Phase ph;
        const auto& in = s.ranks;
        for (std::size_t i = 0; i < in.size() && in.size() > 1; ++i) add_p2p(ph, in[i], in[(i + 1) % in.size()], s.bytes, base);
        phases.push_back(std::move(ph));
        break;
      }
    }
  }

  void plan_halving_doubling() {
    const int n = g.n;
    const auto& r = g.order;
    int p2 = 1;
    while (p2 * 2 <= n) p2 *= 2;
    const int extra = n - p2;
    const int steps = log2i(p2);
    const double base = kBaseLat[kRowRing][proto_index(proto)];
    bool first = true;
    auto step = [&](auto&& pairs) {
      Phase ph;
      pairs(ph, first ? base : 0.0);
      first = false;
      phases.push_back(std::move(ph));
    };
    const bool reduce = s.kind != CollectiveKind::all_gather;
    const bool gather = s.kind != CollectiveKind::reduce_scatter;
    // Ranks past the largest power of two fold into a partner first and get the result after.
    if (extra > 0)
      step([&](Phase& ph, double b) {
        for (int i = 0; i < extra; ++i)
          add_p2p(ph, r[std::size_t(p2 + i)], r[std::size_t(i)], reduce ? s.bytes : s.bytes / n, b);
      });
    if (reduce)
      for (int k = 0; k < steps; ++k)
        step([&](Phase& ph, double b) {
          const int d = p2 >> (k + 1);
          for (int i = 0; i < p2; ++i) add_p2p(ph, r[std::size_t(i)], r[std::size_t(i ^ d)], s.bytes / double(2 << k), b);
        });
    if (gather)
      for (int k = steps - 1; k >= 0; --k)
        step([&](Phase& ph, double b) {
          const int d = p2 >> (k + 1);
          for (int i = 0; i < p2; ++i) add_p2p(ph, r[std::size_t(i)], r[std::size_t(i ^ d)], s.bytes / double(2 << k), b);
        });
    if (extra > 0)
      step([&](Phase& ph, double b) {
        for (int i = 0; i < extra; ++i)
          add_p2p(ph, r[std::size_t(i)], r[std::size_t(p2 + i)], gather ? s.bytes : s.bytes / n, b);
      });
  }

  void plan() {
    eff = protocol_efficiency(algo, proto, s.kind, g);
    switch (algo) {
      case CollectiveAlgorithm::ring: plan_ring(); break;
      case CollectiveAlgorithm::tree: plan_tree(); break;
      case CollectiveAlgorithm::nvls: plan_nvls(); break;
      case CollectiveAlgorithm::nvls_tree: plan_nvls_tree(); break;
      case CollectiveAlgorithm::hierarchical: plan_hierarchical(); break;
      case CollectiveAlgorithm::direct: plan_direct(); break;
      case CollectiveAlgorithm::halving_doubling: plan_halving_doubling(); break;
    }
  }
};

// Runs the phases one after another; owned by the network while it runs.
struct Runner {
  FlowNetwork* net = nullptr;
  std::shared_ptr<const std::vector<Phase>> phases;  // shared by every run of the same spec
  std::size_t next = 0;
  std::size_t outstanding = 0;
  bool started = false;
  std::vector<FlowId> flows;  // the current phase's, in the phase's order
  std::function<void()> done;
  std::int64_t done_priority = 1;  // see run_collectives
  std::function<void(Time)> ended;  // told the end at once (no event): watch_batches

  void flow_done() {
    if (--outstanding == 0) start_next();
  }

  void start_next() {
    started = true;
    const std::size_t n_phases = phases ? phases->size() : 0;
    while (next < n_phases && (*phases)[next].empty()) ++next;
    if (next == n_phases) {
      if (ended) ended(net->simulator().now());
      auto d = std::move(done);
      FlowNetwork* n = net;
      const std::int64_t priority = done_priority;
      n->release(this);  // destroys *this
      if (d) n->simulator().schedule_in(Time::zero(), std::move(d), priority);
      return;
    }
    const Phase& ph = (*phases)[next++];
    outstanding = ph.size();
    flows.clear();
    for (const PlannedFlow& f : ph) {
      Runner* self = this;
      flows.push_back(net->start(f.links, f.bytes, f.latency, [self] { self->flow_done(); }, f.cap));
    }
  }
};

// Starts a run of `phases` from an event at the current time (so that `done` never runs inside
// the caller); `done` runs from an event of `done_priority`.
Runner* launch(FlowNetwork& net, std::shared_ptr<const std::vector<Phase>> phases, std::function<void()> done,
               std::int64_t done_priority, std::function<void(Time)> ended = nullptr) {
  auto runner = std::make_shared<Runner>();
  runner->net = &net;
  runner->done = std::move(done);
  runner->done_priority = done_priority;
  runner->ended = std::move(ended);
  runner->phases = std::move(phases);
  Runner* r = runner.get();
  net.hold(std::move(runner));
  net.simulator().schedule_in(Time::zero(), [r] { r->start_next(); });
  return r;
}

std::string lower(std::string_view s) {
  std::string out;
  for (char c : s)
    if (c != '_' && c != '-') out.push_back(char(std::tolower(static_cast<unsigned char>(c))));
  return out;
}

}  // namespace

const char* collective_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::all_reduce: return "all_reduce";
    case CollectiveKind::reduce_scatter: return "reduce_scatter";
    case CollectiveKind::all_gather: return "all_gather";
    case CollectiveKind::broadcast: return "broadcast";
    case CollectiveKind::reduce: return "reduce";
    case CollectiveKind::all_to_all: return "all_to_all";
    case CollectiveKind::send_recv: return "send_recv";
  }
  return "?";
}

const char* algorithm_name(CollectiveAlgorithm a) {
  switch (a) {
    case CollectiveAlgorithm::ring: return "ring";
    case CollectiveAlgorithm::tree: return "tree";
    case CollectiveAlgorithm::nvls: return "nvls";
    case CollectiveAlgorithm::nvls_tree: return "nvls_tree";
    case CollectiveAlgorithm::hierarchical: return "hierarchical";
    case CollectiveAlgorithm::direct: return "direct";
    case CollectiveAlgorithm::halving_doubling: return "halving_doubling";
  }
  return "?";
}

const char* protocol_name(Protocol p) {
  switch (p) {
    case Protocol::ll: return "LL";
    case Protocol::ll128: return "LL128";
    case Protocol::simple: return "Simple";
  }
  return "?";
}

std::optional<CollectiveKind> parse_collective(std::string_view s) {
  const std::string x = lower(s);
  if (x == "allreduce") return CollectiveKind::all_reduce;
  if (x == "reducescatter") return CollectiveKind::reduce_scatter;
  if (x == "allgather") return CollectiveKind::all_gather;
  if (x == "broadcast" || x == "bcast") return CollectiveKind::broadcast;
  if (x == "reduce") return CollectiveKind::reduce;
  if (x == "alltoall") return CollectiveKind::all_to_all;
  if (x == "sendrecv") return CollectiveKind::send_recv;
  return std::nullopt;
}

std::optional<CollectiveAlgorithm> parse_algorithm(std::string_view s) {
  const std::string x = lower(s);
  if (x == "ring") return CollectiveAlgorithm::ring;
  if (x == "tree" || x == "doublebinarytree") return CollectiveAlgorithm::tree;
  if (x == "nvls") return CollectiveAlgorithm::nvls;
  if (x == "nvlstree") return CollectiveAlgorithm::nvls_tree;
  if (x == "hierarchical") return CollectiveAlgorithm::hierarchical;
  if (x == "direct") return CollectiveAlgorithm::direct;
  if (x == "halvingdoubling" || x == "rhd" || x == "recursivehalvingdoubling") return CollectiveAlgorithm::halving_doubling;
  return std::nullopt;
}

std::optional<Protocol> parse_protocol(std::string_view s) {
  const std::string x = lower(s);
  if (x == "ll") return Protocol::ll;
  if (x == "ll128") return Protocol::ll128;
  if (x == "simple") return Protocol::simple;
  return std::nullopt;
}

double bus_bandwidth_factor(CollectiveKind k, int n) {
  if (n <= 1) return 1;
  switch (k) {
    case CollectiveKind::all_reduce: return 2.0 * (n - 1) / n;
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::all_gather:
    case CollectiveKind::all_to_all: return double(n - 1) / n;
    case CollectiveKind::broadcast:
    case CollectiveKind::reduce:
    case CollectiveKind::send_recv: return 1;
  }
  return 1;
}

std::optional<std::string> check_collective(const Topology& topo, const CollectiveSpec& spec) {
  if (spec.ranks.empty()) return std::string("the group has no ranks");
  std::set<int> seen;
  for (int r : spec.ranks) {
    if (r < 0 || r >= topo.gpu_count())
      return "rank " + std::to_string(r) + " is not in the cluster (ranks 0.." + std::to_string(topo.gpu_count() - 1) + ")";
    if (!seen.insert(r).second) return "rank " + std::to_string(r) + " appears twice in the group";
  }
  if (!(spec.bytes >= 0) || !std::isfinite(spec.bytes)) return std::string("bytes must be finite and non-negative");
  if (spec.root < 0 || spec.root >= int(spec.ranks.size())) return std::string("root is not a position in the group");
  if (!spec.algorithm) return std::nullopt;
  const auto supported = supported_algorithms(spec.kind);
  if (std::find(supported.begin(), supported.end(), *spec.algorithm) == supported.end())
    return std::string(algorithm_name(*spec.algorithm)) + " does not implement " + collective_name(spec.kind);
  const Group g = analyse(topo, spec.ranks);
  if (*spec.algorithm == CollectiveAlgorithm::nvls && !g.nvls)
    return std::string("nvls needs a group inside one node whose NVSwitch reduces (Hopper or later, nvls: true)");
  if (*spec.algorithm == CollectiveAlgorithm::nvls_tree && !g.nvls_nodes)
    return std::string("nvls_tree needs two or more nodes whose NVSwitches reduce, the same number (>= 2) of the "
                       "group's GPUs on each");
  if (*spec.algorithm == CollectiveAlgorithm::hierarchical && g.ppn_min != g.ppn_max)
    return std::string("hierarchical needs the same number of ranks on every node of the group");
  if (spec.protocol && *spec.protocol == Protocol::ll128 && !ll128_allowed(g))
    return std::string("LL128 needs NVLink between the group's GPUs");
  if (spec.protocol && *spec.protocol != Protocol::simple &&
      (*spec.algorithm == CollectiveAlgorithm::nvls || *spec.algorithm == CollectiveAlgorithm::nvls_tree))
    return std::string("NVLS algorithms run the Simple protocol only");
  return std::nullopt;
}

CollectiveChoice choose_collective(const Topology& topo, const CollectiveSpec& spec) {
  const Group g = analyse(topo, spec.ranks);
  std::vector<CollectiveAlgorithm> algos;
  if (spec.algorithm) {
    algos.push_back(*spec.algorithm);
  } else {
    using A = CollectiveAlgorithm;
    switch (spec.kind) {
      case CollectiveKind::all_reduce:
        algos = {A::ring, A::tree};
        if (g.nvls) algos.push_back(A::nvls);
        if (g.nvls_nodes) algos.push_back(A::nvls_tree);
        break;
      case CollectiveKind::reduce_scatter:
      case CollectiveKind::all_gather:
      case CollectiveKind::broadcast:
      case CollectiveKind::reduce: algos = {A::ring}; break;
      case CollectiveKind::all_to_all:
      case CollectiveKind::send_recv: algos = {A::direct}; break;
    }
  }
  CollectiveChoice best;
  best.estimate_s = std::numeric_limits<double>::infinity();
  for (CollectiveAlgorithm a : algos) {
    std::vector<Protocol> protos;
    if (spec.protocol) protos = {*spec.protocol};
    else if (a == CollectiveAlgorithm::direct || a == CollectiveAlgorithm::halving_doubling) {
      // Point-to-point: LL up to NCCL's P2P LL threshold, Simple above.
      const double per_peer = spec.kind == CollectiveKind::send_recv ? spec.bytes : spec.bytes / std::max(1, g.n);
      protos = {per_peer <= kP2pLlThreshold ? Protocol::ll : Protocol::simple};
    } else protos = protocols_for(a, g);
    for (Protocol p : protos) {
      const double e = g.n <= 1 ? 0 : estimate(topo, spec, g, a, p);
      if (e < best.estimate_s) {
        best.algorithm = a;
        best.protocol = p;
        best.estimate_s = e;
        best.latency_s = latency_us(topo, spec, g, a, p) * 1e-6;
      }
    }
  }
  return best;
}

// A batch run alone from time zero, as it stands once every event at or before an instant has
// run: each collective's progress and its current phase's flows (in the phase's order). Kept flat,
// the states of every instant one after another.
struct AloneStates {
  struct Run {
    bool finished = false, started = false;
    std::uint32_t next = 0, outstanding = 0;
    std::uint32_t first_flow = 0, flows = 0;  // in `snapshots`
  };
  std::vector<Time> at;  // the instants, in order; the runs of instant k are runs[k * plans, ...)
  std::vector<Run> runs;
  std::vector<FlowNetwork::Snapshot> snapshots;
};

// Collectives launched together: their plans, every link they use, and (once needed) how they
// run alone.
struct CollectiveBatch {
  std::vector<std::shared_ptr<const std::vector<Phase>>> plans;
  std::vector<LinkId> links;  // sorted, once each
  // `links` named on the network that reserves them (FlowNetwork::link_set and serial), once it
  // first did.
  mutable std::uint64_t link_set_net = 0;
  mutable std::uint32_t link_set = 0;
  mutable bool timed = false;
  mutable Time first_end, busy_until;  // alone, from the start: the first one's end, the last byte sent
  mutable std::vector<Time> ends;      // alone, from the start: each one's end
  // Once the batch was first evicted: its states alone, one per instant an event ran at (an
  // eviction reads the state of the instant before it instead of replaying the run).
  mutable AloneStates states;
};

namespace {
struct LaunchEnds;
// A batch run apart while its links stay its own: one event for its first collective's end.
struct AloneRun {
  std::shared_ptr<const CollectiveBatch> batch;
  Time start, until;  // until: its links' reservation
  std::function<void()> done;
  std::int64_t priority = 1;
  EventId event = 0;
  bool fired = false;
  std::uint32_t generation = 0;  // of its slot: counts the runs the slot has held
  std::shared_ptr<LaunchEnds> watch;  // watch_batches: told each collective's end
};

// One launch of a batch under watch_batches: each collective's end as it comes, compared with the
// first collective's.
struct LaunchEnds {
  const CollectiveBatch* batch = nullptr;
  std::vector<Time> ends;  // Time::max(): not yet
  const std::function<void(const CollectiveBatch&, std::size_t, Time)>* skew = nullptr;
  void ended(std::size_t i, Time t) {
    ends[i] = t;
    if (i == 0) {
      for (std::size_t j = 1; j < ends.size(); ++j)
        if (ends[j] != Time::max() && ends[j] != t) (*skew)(*batch, j, ends[j] - t);
    } else if (ends[0] != Time::max() && t != ends[0]) {
      (*skew)(*batch, i, t - ends[0]);
    }
  }
  // Every collective ran alone from `start` (a run apart that was never evicted).
  void alone(Time start) {
    for (std::size_t i = 0; i < ends.size(); ++i) ended(i, start + batch->ends[i]);
  }
};

// The plans of the collectives run on one network, by spec: a step launches the same collective
// (group, size, algorithm) over and over, and its plan (checks, group analysis, the algorithm's
// choice, every flow's route) depends on nothing else. And a network of its own, idle between
// uses, where batches run alone.
struct PlanMemo {
  using Key = std::tuple<int, std::vector<int>, double, int, int, int, int>;
  std::map<Key, std::shared_ptr<const CollectiveBatch>> plans;  // a batch of the one spec
  std::unique_ptr<Simulator> alone_sim;
  std::unique_ptr<FlowNetwork> alone_net;
  std::int64_t launches = 0;
  Simulator* sim = nullptr;  // the network's
  // Runs apart in flight, by slot (their events and reservations name the slot: no allocation per
  // collective); a slot is free once the run's end has fired and its reservation lapsed, or it was
  // evicted.
  std::vector<AloneRun> runs;
  std::vector<std::uint32_t> free_runs;
  std::function<void(const CollectiveBatch&, std::size_t, Time)> skew;  // watch_batches
  std::uint32_t new_run() {
    if (!free_runs.empty()) {
      const std::uint32_t s = free_runs.back();
      free_runs.pop_back();
      return s;
    }
    runs.emplace_back();
    return std::uint32_t(runs.size() - 1);
  }
  void free_run(std::uint32_t s) {
    if (runs[s].watch) runs[s].watch->alone(runs[s].start);  // ran alone to its end
    const std::uint32_t g = runs[s].generation + 1;
    runs[s] = AloneRun{};
    runs[s].generation = g;
    free_runs.push_back(s);
  }
};

PlanMemo& memo_of(FlowNetwork& net) {
  if (!net.memo()) {
    auto m = std::make_shared<PlanMemo>();
    m->sim = &net.simulator();
    net.memo() = std::move(m);
  }
  return *static_cast<PlanMemo*>(net.memo().get());
}

// The private network, idle and at time zero (its clock would otherwise add up every batch's run
// and could pass what picoseconds in 64 bits hold, where the step does not).
FlowNetwork& alone_network(FlowNetwork& net) {
  PlanMemo& m = memo_of(net);
  if (!m.alone_net) {
    m.alone_sim = std::make_unique<Simulator>();
    m.alone_net = std::make_unique<FlowNetwork>(*m.alone_sim, net.topology());
  }
  m.alone_net->rewind();
  return *m.alone_net;
}

std::shared_ptr<const std::vector<Phase>> plan_of(const Topology& topo, const CollectiveSpec& spec) {
  const auto problem = check_collective(topo, spec);
  SCALEOUT_CHECK(!problem, "collective: " + problem.value_or(""));
  const Group g = analyse(topo, spec.ranks);
  std::vector<Phase> phases;
  if (g.n > 1 && spec.bytes > 0) {
    const CollectiveChoice c = choose_collective(topo, spec);
    Planner p{topo, spec, g, c.algorithm, c.protocol, 1.0, {}};
    p.plan();
    phases = std::move(p.phases);
  }
  return std::make_shared<const std::vector<Phase>>(std::move(phases));
}

std::shared_ptr<CollectiveBatch> batch_of(std::vector<std::shared_ptr<const std::vector<Phase>>> plans) {
  auto b = std::make_shared<CollectiveBatch>();
  for (const auto& p : plans)
    for (const Phase& ph : *p)
      for (const PlannedFlow& f : ph) b->links.insert(b->links.end(), f.links.begin(), f.links.end());
  std::sort(b->links.begin(), b->links.end());
  b->links.erase(std::unique(b->links.begin(), b->links.end()), b->links.end());
  b->plans = std::move(plans);
  return b;
}

// The batch alone on the private network, from time zero.
void time_alone(FlowNetwork& net, const CollectiveBatch& b) {
  FlowNetwork& alone = alone_network(net);
  Simulator& sim = alone.simulator();
  Time first_end;
  b.ends.assign(b.plans.size(), Time::zero());
  for (std::size_t i = 0; i < b.plans.size(); ++i)
    launch(alone, b.plans[i], i == 0 ? std::function<void()>([&] { first_end = sim.now(); }) : nullptr, 1,
           [&b, i](Time t) { b.ends[i] = t; });
  sim.run();
  b.first_end = first_end;
  b.busy_until = alone.last_drained();
  b.timed = true;
}

// The batch alone on the private network from time zero, its state kept after each instant.
void record_alone(FlowNetwork& net, const CollectiveBatch& b) {
  FlowNetwork& alone = alone_network(net);
  Simulator& sim = alone.simulator();
  const auto& plans = b.plans;
  std::vector<Runner*> runners;
  std::vector<char> finished(plans.size(), 0);
  for (std::size_t i = 0; i < plans.size(); ++i)
    runners.push_back(launch(alone, plans[i], [&finished, i] { finished[i] = 1; }, 1));
  AloneStates& st = b.states;
  st = AloneStates{};
  for (Time t = sim.next_event_time(); t != Time::max(); t = sim.next_event_time()) {
    sim.run(t);
    st.at.push_back(t);
    for (std::size_t i = 0; i < plans.size(); ++i) {
      AloneStates::Run& run = st.runs.emplace_back();
      run.finished = finished[i];
      if (run.finished) continue;  // its runner is gone
      const Runner& r = *runners[i];
      run.started = r.started;
      run.next = std::uint32_t(r.next);
      run.outstanding = std::uint32_t(r.outstanding);
      run.first_flow = std::uint32_t(st.snapshots.size());
      run.flows = std::uint32_t(r.flows.size());
      for (FlowId f : r.flows) st.snapshots.push_back(alone.snapshot(f));
    }
  }
  st.at.shrink_to_fit();
  st.runs.shrink_to_fit();
  st.snapshots.shrink_to_fit();
}

// A flow came onto the links of a batch run apart: carry its unfinished runs, as the batch alone
// stood just before now, with their flows as they were, onto the network.
void evict(FlowNetwork& net, std::uint32_t slot) {
  PlanMemo& memo = memo_of(net);
  AloneRun x = std::move(memo.runs[slot]);
  memo.runs[slot].watch = nullptr;  // moved out: its ends are told below
  memo.free_run(slot);
  if (!x.fired) net.simulator().cancel(x.event);
  const CollectiveBatch& b = *x.batch;
  const Time elapsed = net.simulator().now() - x.start;
  // The state after every event of the run alone before `elapsed` (none ran at zero elapsed: the
  // runs are launched, not started).
  const auto& plans = b.plans;
  const AloneStates::Run* st = nullptr;  // the runs' states, by plan
  if (elapsed > Time::zero()) {
    if (b.states.at.empty()) record_alone(net, b);
    const auto& at = b.states.at;
    const auto after = std::upper_bound(at.begin(), at.end(), elapsed - Time::from_ps(1));
    SCALEOUT_CHECK(after != at.begin(), "collectives: no state of a run alone before its eviction");
    st = &b.states.runs[std::size_t(after - at.begin() - 1) * plans.size()];
  }
  const std::int64_t offset = x.start.ps();  // the run alone started at zero
  for (std::size_t i = 0; i < plans.size(); ++i) {
    std::function<void(Time)> ended;
    if (x.watch) ended = [w = x.watch, i](Time t) { w->ended(i, t); };
    if (st && st[i].finished) {
      if (ended) ended(x.start + b.ends[i]);
      continue;
    }
    std::function<void()> done = i == 0 && !x.fired ? std::move(x.done) : nullptr;
    if (!st || !st[i].started) {
      launch(net, plans[i], std::move(done), x.priority, std::move(ended));
      continue;
    }
    const AloneStates::Run& r = st[i];
    auto copy = std::make_shared<Runner>();
    copy->net = &net;
    copy->phases = plans[i];
    copy->next = r.next;
    copy->outstanding = r.outstanding;
    copy->started = true;
    copy->done = std::move(done);
    copy->done_priority = x.priority;
    copy->ended = std::move(ended);
    const Phase& ph = (*plans[i])[r.next - 1];
    Runner* self = copy.get();
    for (std::size_t j = 0; j < r.flows; ++j) {
      const FlowNetwork::Snapshot& snap = b.states.snapshots[r.first_flow + j];
      copy->flows.push_back(snap.live ? net.adopt(ph[j].links, snap, offset, [self] { self->flow_done(); }) : FlowId(0));
    }
    net.hold(std::move(copy));
  }
}

}  // namespace

// A batch's end runs after everything else of its instant that is not another batch's end, and
// the ends of one instant run in the order the batches were launched: whether a batch ran apart
// or as flows (whose last delivery is queued when its last byte leaves), one instant's events then
// run in the same order.

void run_collectives(FlowNetwork& net, const std::shared_ptr<const CollectiveBatch>& b, std::function<void()> done) {
  PlanMemo& memo = memo_of(net);
  const std::int64_t priority = ++memo.launches;
  std::shared_ptr<LaunchEnds> watch;
  if (memo.skew && b->plans.size() > 1) {
    watch = std::make_shared<LaunchEnds>();
    watch->batch = b.get();
    watch->ends.assign(b->plans.size(), Time::max());
    watch->skew = &memo.skew;
  }
  if (net.apart() && !b->links.empty() && net.idle(b->links)) {
    if (!b->timed) time_alone(net, *b);
    Simulator& sim = net.simulator();
    const std::uint32_t slot = memo.new_run();
    AloneRun& x = memo.runs[slot];
    x.batch = b;
    x.start = sim.now();
    x.until = sim.now() + b->busy_until;
    x.done = std::move(done);
    x.priority = priority;
    x.watch = std::move(watch);
    x.event = sim.schedule_in(
        b->first_end,
        [m = &memo, slot] {
          AloneRun& r = m->runs[slot];
          r.fired = true;
          auto d = std::move(r.done);
          r.done = nullptr;
          if (m->sim->now() >= r.until) {
            m->free_run(slot);
          } else {
            // A shadow still runs: the reservation may still evict it, until it lapses.
            m->sim->schedule_at(r.until, [m, slot, g = r.generation] {
              if (m->runs[slot].generation == g) m->free_run(slot);
            });
          }
          if (d) d();
        },
        priority);
    if (b->link_set_net != net.serial()) {
      b->link_set = net.link_set(b->links);
      b->link_set_net = net.serial();
    }
    net.reserve(b->link_set, x.until, [&net, slot] { evict(net, slot); });
    return;
  }
  for (std::size_t i = 0; i < b->plans.size(); ++i) {
    std::function<void(Time)> ended;
    if (watch) ended = [watch, i](Time t) { watch->ended(i, t); };
    launch(net, b->plans[i], i == 0 ? std::move(done) : nullptr, priority, std::move(ended));
  }
}

void watch_batches(FlowNetwork& net, std::function<void(const CollectiveBatch&, std::size_t, Time)> skew) {
  memo_of(net).skew = std::move(skew);
}

namespace {
std::shared_ptr<const CollectiveBatch> single(FlowNetwork& net, const CollectiveSpec& spec) {
  auto& plans = memo_of(net).plans;
  const PlanMemo::Key key{int(spec.kind), spec.ranks, spec.bytes, spec.algorithm ? int(*spec.algorithm) : -1,
                          spec.protocol ? int(*spec.protocol) : -1, spec.root, spec.tag};
  auto found = plans.find(key);
  if (found == plans.end()) found = plans.emplace(key, batch_of({plan_of(net.topology(), spec)})).first;
  return found->second;
}
}  // namespace

void run_collective(FlowNetwork& net, const CollectiveSpec& spec, std::function<void()> done) {
  run_collectives(net, single(net, spec), std::move(done));
}

std::shared_ptr<const CollectiveBatch> prepare_collectives(FlowNetwork& net, const std::vector<CollectiveSpec>& specs) {
  std::vector<std::shared_ptr<const std::vector<Phase>>> plans;
  for (const CollectiveSpec& s : specs) plans.push_back(single(net, s)->plans.front());
  return batch_of(std::move(plans));
}

AloneTiming batch_alone(FlowNetwork& net, const CollectiveBatch& b) {
  if (b.links.empty()) return {};
  if (!b.timed) time_alone(net, b);
  const bool together = b.busy_until <= b.first_end &&
                        std::all_of(b.ends.begin(), b.ends.end(), [&b](Time t) { return t == b.first_end; });
  return {b.first_end, together};
}

std::span<const LinkId> batch_links(const CollectiveBatch& b) { return b.links; }

double time_collective(const Topology& topo, const CollectiveSpec& spec, CollectiveChoice* choice) {
  Simulator sim;
  FlowNetwork net(sim, topo);
  Time end;
  run_collective(net, spec, [&] { end = sim.now(); });
  sim.run();
  if (choice) *choice = choose_collective(topo, spec);
  return end.seconds();
}

}  // namespace scaleout
