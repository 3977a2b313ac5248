#include "hardware/topology.hpp"

#include <algorithm>
#include <deque>

#include "sim/engine/check.hpp"

namespace scaleout {

const char* vertex_kind_name(VertexKind k) {
  switch (k) {
    case VertexKind::gpu: return "GPU";
    case VertexKind::nvswitch: return "NVSwitch";
    case VertexKind::pcie_switch: return "PCIe switch";
    case VertexKind::host_bridge: return "host bridge";
    case VertexKind::nic: return "NIC";
    case VertexKind::net_switch: return "network switch";
  }
  return "?";
}

const char* link_kind_name(LinkKind k) {
  switch (k) {
    case LinkKind::nvlink: return "NVLink";
    case LinkKind::pcie: return "PCIe";
    case LinkKind::network: return "network";
  }
  return "?";
}

std::uint64_t flow_hash(std::uint64_t a, std::uint64_t b, std::uint64_t c) {
  std::uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xC2B2AE3D27D4EB4Full ^
                    (c + 0x165667B19E3779F9ull) * 0xFF51AFD7ED558CCDull;
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

int Topology::add_node(bool nvlink, bool pcie_p2p, bool nvls) {
  NodeInfo n;
  n.first_rank = gpu_count();
  n.nvlink = nvlink;
  n.pcie_p2p = pcie_p2p;
  n.nvls = nvls;
  nodes_.push_back(std::move(n));
  return node_count() - 1;
}

VertexId Topology::add_gpu(int node) {
  SCALEOUT_CHECK(node >= 0 && node < node_count(), "topology: GPU of an unknown node");
  SCALEOUT_CHECK(vertex_count() == rank_node_.size(), "topology: GPUs must be added before other vertices");
  SCALEOUT_CHECK(rank_node_.empty() || node >= rank_node_.back(), "topology: GPUs must be added node by node");
  NodeInfo& n = nodes_[std::size_t(node)];
  if (n.gpus == 0) n.first_rank = gpu_count();
  const VertexId v = add_vertex(VertexKind::gpu, node, gpu_count());
  ++n.gpus;
  rank_node_.push_back(node);
  rank_nic_.push_back(kNoVertex);
  return v;
}

VertexId Topology::add_vertex(VertexKind kind, int node, int index) {
  SCALEOUT_CHECK(kind != VertexKind::gpu || vertex_count() == rank_node_.size(),
                 "topology: GPUs must be added before other vertices");
  const VertexId v = VertexId(boost::add_vertex(VertexProps{kind, node, index}, graph_));
  node_slot_.push_back(-1);
  fabric_slot_.push_back(-1);
  switch_slot_.push_back(kind == VertexKind::net_switch ? switch_count_++ : -1);
  if (node >= 0) {
    SCALEOUT_CHECK(node < node_count(), "topology: vertex of an unknown node");
    NodeInfo& n = nodes_[std::size_t(node)];
    node_slot_[v] = int(n.vertices.size());
    n.vertices.push_back(v);
    if (kind == VertexKind::nvswitch && n.nvswitch == kNoVertex) n.nvswitch = v;
    if (kind == VertexKind::host_bridge && n.host_bridge == kNoVertex) n.host_bridge = v;
  }
  if (kind == VertexKind::nic || kind == VertexKind::net_switch) {
    fabric_slot_[v] = int(fabric_vertices_.size());
    fabric_vertices_.push_back(v);
  }
  dist_cache_.clear();
  return v;
}

LinkId Topology::add_link(VertexId a, VertexId b, double bandwidth, Time latency, double efficiency, LinkKind kind) {
  SCALEOUT_CHECK(a < vertex_count() && b < vertex_count() && a != b, "topology: link between unknown vertices");
  SCALEOUT_CHECK(bandwidth > 0 && efficiency > 0 && efficiency <= 1, "topology: link needs a positive bandwidth");
  const LinkId ab = LinkId(links_.size());
  links_.push_back(Link{a, b, bandwidth, efficiency, latency, kind});
  links_.push_back(Link{b, a, bandwidth, efficiency, latency, kind});
  boost::add_edge(a, b, LinkProps{ab}, graph_);
  boost::add_edge(b, a, LinkProps{ab + 1}, graph_);
  dist_cache_.clear();
  return ab;
}

void Topology::degrade_link(LinkId id, double factor) {
  SCALEOUT_CHECK(id < links_.size() && factor > 0 && factor <= 1, "degrade_link: unknown link or factor outside (0, 1]");
  const LinkId a = id & ~LinkId(1);
  has_faults_ = true;
  links_[a].bandwidth *= factor;
  links_[a + 1].bandwidth *= factor;
}

bool Topology::fail_link(LinkId id) {
  SCALEOUT_CHECK(id < links_.size(), "fail_link: unknown link");
  const LinkId a = id & ~LinkId(1);
  links_[a].failed = links_[a + 1].failed = true;
  has_faults_ = true;
  dist_cache_.clear();
  route_cache_.clear();
  // A NIC cut off from the fabric: its GPUs use another NIC of the node that still reaches it.
  for (const VertexId end : {links_[a].src, links_[a].dst}) {
    if (graph_[end].kind != VertexKind::nic) continue;
    bool reaches = false;
    for (auto [e, last] = boost::out_edges(end, graph_); e != last; ++e)
      if (!links_[graph_[*e].id].failed && links_[graph_[*e].id].kind == LinkKind::network) reaches = true;
    if (reaches) continue;
    const NodeInfo& n = nodes_[std::size_t(graph_[end].node)];
    VertexId replacement = kNoVertex;
    for (VertexId v : n.vertices) {
      if (graph_[v].kind != VertexKind::nic || v == end) continue;
      for (auto [e, last] = boost::out_edges(v, graph_); e != last; ++e)
        if (!links_[graph_[*e].id].failed && links_[graph_[*e].id].kind == LinkKind::network) replacement = v;
      if (replacement != kNoVertex) break;
    }
    for (int r = n.first_rank; r < n.first_rank + n.gpus; ++r)
      if (rank_nic_[std::size_t(r)] == end) {
        if (replacement == kNoVertex) return false;
        rank_nic_[std::size_t(r)] = replacement;
      }
  }
  return true;
}

void Topology::set_nic(int rank, VertexId nic) {
  SCALEOUT_CHECK(rank >= 0 && rank < gpu_count() && nic < vertex_count() && graph_[nic].kind == VertexKind::nic,
                 "topology: set_nic of an unknown rank or a vertex that is not a NIC");
  rank_nic_[std::size_t(rank)] = nic;
  route_cache_.clear();
}

bool Topology::transit(VertexId v, Scope s) const {
  const VertexKind k = graph_[v].kind;
  if (s == Scope::fabric || s == Scope::switches) return k == VertexKind::net_switch;
  if (s == Scope::nvlink) return k == VertexKind::nvswitch;
  return k == VertexKind::nvswitch || k == VertexKind::pcie_switch || k == VertexKind::host_bridge;
}

// Backwards breadth-first search from `dst`: the hop count from every vertex of the scope that can
// reach it, expanding only through transit vertices.
const Topology::DistTable& Topology::distances(VertexId dst, Scope s) const {
  const std::uint64_t key = (std::uint64_t(dst) << 2) | std::uint64_t(s);
  if (auto it = dist_cache_.find(key); it != dist_cache_.end()) return it->second;
  // Bound the cache (a few hundred MB at 16K GPUs would be waste): forget everything past a size.
  if (dist_cache_.size() > 65536) dist_cache_.clear();
  DistTable t;
  const std::size_t n = s == Scope::fabric     ? fabric_vertices_.size()
                        : s == Scope::switches ? std::size_t(switch_count_)
                                               : nodes_[std::size_t(graph_[dst].node)].vertices.size();
  t.dist.assign(n, std::numeric_limits<std::uint16_t>::max());
  std::deque<VertexId> queue;
  t.dist[std::size_t(slot(dst, s))] = 0;
  queue.push_back(dst);
  while (!queue.empty()) {
    const VertexId v = queue.front();
    queue.pop_front();
    if (v != dst && !transit(v, s)) continue;
    const std::uint16_t d = t.dist[std::size_t(slot(v, s))];
    for (auto [e, end] = boost::in_edges(v, graph_); e != end; ++e) {
      if (!usable(graph_[*e].id, s)) continue;
      const VertexId u = VertexId(boost::source(*e, graph_));
      const int su = slot(u, s);
      if (su < 0) continue;
      if (!across_nodes(s) && graph_[u].node != graph_[dst].node) continue;
      if (t.dist[std::size_t(su)] != std::numeric_limits<std::uint16_t>::max()) continue;
      t.dist[std::size_t(su)] = std::uint16_t(d + 1);
      queue.push_back(u);
    }
  }
  return dist_cache_.emplace(key, std::move(t)).first->second;
}

namespace {
using Edge = boost::graph_traits<TopologyGraph>::edge_descriptor;

// Among u's out-edges that ok(edge) accepts, the one `h` picks (h modulo their count); false if
// none is accepted.
template <class Ok>
bool pick_out_edge(const TopologyGraph& g, VertexId u, std::uint64_t h, Ok&& ok, Edge& chosen) {
  std::uint32_t count = 0;
  for (auto [e, end] = boost::out_edges(u, g); e != end; ++e) count += ok(*e) ? 1 : 0;
  if (count == 0) return false;
  std::uint32_t pick = std::uint32_t(h % count);
  for (auto [e, end] = boost::out_edges(u, g); e != end; ++e)
    if (ok(*e) && pick-- == 0) {
      chosen = *e;
      return true;
    }
  return false;
}
}  // namespace

// Follows decreasing distance from src to dst; among equal-cost next hops (parallel links
// included) the hash of the flow and the current vertex picks one.
bool Topology::walk(VertexId src, VertexId dst, Scope s, std::uint64_t hash, std::vector<LinkId>& out) const {
  const DistTable& t = distances(dst, s);
  constexpr auto kFar = std::numeric_limits<std::uint16_t>::max();
  // A NIC walking the switches' table: one hop more than its nearest switch, as the fabric's
  // table (whose search reaches a NIC from the switches it links to) would say.
  auto dist_of = [&](VertexId u) -> std::uint16_t {
    if (const int su = slot(u, s); su >= 0) return t.dist[std::size_t(su)];
    if (s != Scope::switches || graph_[u].kind != VertexKind::nic) return kFar;
    std::uint16_t best = kFar;
    for (auto [e, end] = boost::out_edges(u, graph_); e != end; ++e) {
      const int sw = slot(VertexId(boost::target(*e, graph_)), s);
      if (sw >= 0 && usable(graph_[*e].id, s) && t.dist[std::size_t(sw)] != kFar)
        best = std::min<std::uint16_t>(best, std::uint16_t(t.dist[std::size_t(sw)] + 1));
    }
    return best;
  };
  if (dist_of(src) == kFar) return false;
  VertexId u = src;
  while (u != dst) {
    const std::uint16_t du = dist_of(u);
    auto downhill = [&](const Edge& e) {
      const VertexId w = VertexId(boost::target(e, graph_));
      const int sw = slot(w, s);
      return sw >= 0 && usable(graph_[e].id, s) && (across_nodes(s) || graph_[w].node == graph_[u].node) &&
             t.dist[std::size_t(sw)] + 1 == du && (w == dst || transit(w, s));
    };
    Edge next;
    if (!pick_out_edge(graph_, u, flow_hash(hash, u, du), downhill, next)) return false;
    out.push_back(graph_[next].id);
    u = VertexId(boost::target(next, graph_));
  }
  return true;
}

bool Topology::segment(VertexId src, VertexId dst, Scope s, std::uint64_t hash, std::vector<LinkId>& out) const {
  if (src == dst) return true;
  if (s == Scope::fabric && graph_[dst].kind == VertexKind::nic) {
    // A NIC hangs off one leaf (or several): distances to the leaf serve every NIC below it, so
    // the fabric needs one table per leaf switch, not one per NIC.
    VertexId anchor = kNoVertex;
    bool unique = true;
    for (auto [e, end] = boost::in_edges(dst, graph_); e != end; ++e) {
      const VertexId u = VertexId(boost::source(*e, graph_));
      if (graph_[u].kind != VertexKind::net_switch) continue;
      if (anchor != kNoVertex && anchor != u) unique = false;
      anchor = u;
    }
    if (anchor != kNoVertex && unique && src != anchor) {
      if (!walk(src, anchor, Scope::switches, hash, out)) return false;
      // The last hop: among the leaf's links to the NIC that have not failed.
      Edge last;
      if (!pick_out_edge(
              graph_, anchor, flow_hash(hash, anchor, dst),
              [&](const Edge& e) { return boost::target(e, graph_) == dst && usable(graph_[e].id, s); }, last))
        return false;
      out.push_back(graph_[last].id);
      return true;
    }
  }
  return walk(src, dst, s, hash, out);
}

bool Topology::route(VertexId src, VertexId dst, std::uint64_t hash, std::vector<LinkId>& out, VertexId src_nic,
                     VertexId dst_nic) const {
  const RouteKey key{src, dst, src_nic, dst_nic, hash};
  if (auto it = route_cache_.find(key); it != route_cache_.end()) {
    out.insert(out.end(), it->second.links.begin(), it->second.links.end());
    return it->second.ok;
  }
  if (route_cache_.size() > (std::size_t(1) << 20)) route_cache_.clear();
  CachedRoute r;
  r.ok = route_uncached(src, dst, hash, r.links, src_nic, dst_nic);
  out.insert(out.end(), r.links.begin(), r.links.end());
  const bool ok = r.ok;
  route_cache_.emplace(key, std::move(r));
  return ok;
}

bool Topology::route_uncached(VertexId src, VertexId dst, std::uint64_t hash, std::vector<LinkId>& out, VertexId src_nic,
                              VertexId dst_nic) const {
  if (src >= vertex_count() || dst >= vertex_count()) return false;
  if (src == dst) return true;
  const VertexProps& a = graph_[src];
  const VertexProps& b = graph_[dst];
  const auto size0 = out.size();
  auto fail = [&] {
    out.resize(size0);
    return false;
  };
  if (a.node >= 0 && a.node == b.node && src_nic == kNoVertex && dst_nic == kNoVertex) {
    const NodeInfo& n = nodes_[std::size_t(a.node)];
    // Without peer-to-peer the data is copied through host memory: up to the host bridge and down.
    if (!n.pcie_p2p && a.kind == VertexKind::gpu && b.kind == VertexKind::gpu && n.host_bridge != kNoVertex &&
        !n.nvlink) {
      if (!segment(src, n.host_bridge, Scope::node, hash, out)) return fail();
      if (!segment(n.host_bridge, dst, Scope::node, flow_hash(hash, 1, 0), out)) return fail();
      return true;
    }
    // GPU to GPU takes NVLink when NVLink joins them (as NCCL does), PCIe otherwise.
    if (n.nvlink && a.kind == VertexKind::gpu && b.kind == VertexKind::gpu && segment(src, dst, Scope::nvlink, hash, out))
      return true;
    return segment(src, dst, Scope::node, hash, out) || fail();
  }
  const bool explicit_nic = src_nic != kNoVertex || dst_nic != kNoVertex;
  if (!explicit_nic && fabric_slot_[src] >= 0 && fabric_slot_[dst] >= 0)
    return segment(src, dst, Scope::fabric, hash, out) || fail();
  // Between nodes: to a NIC inside the source node, across the fabric, from a NIC to the target.
  // A GPU uses its own NIC unless told otherwise; a NIC or a network switch is its own way out.
  const VertexId sn = src_nic != kNoVertex ? src_nic : a.kind == VertexKind::gpu ? rank_nic_[std::size_t(a.index)] : src;
  const VertexId dn = dst_nic != kNoVertex ? dst_nic : b.kind == VertexKind::gpu ? rank_nic_[std::size_t(b.index)] : dst;
  if (sn == kNoVertex || dn == kNoVertex || fabric_slot_[sn] < 0 || fabric_slot_[dn] < 0) return fail();
  if (sn != src && (graph_[sn].node != a.node || !segment(src, sn, Scope::node, hash, out))) return fail();
  if (sn != dn && !segment(sn, dn, Scope::fabric, flow_hash(hash, 2, 0), out)) return fail();
  if (dn != dst && (graph_[dn].node != b.node || !segment(dn, dst, Scope::node, flow_hash(hash, 3, 0), out)))
    return fail();
  return true;
}

bool Topology::route_gpus(int src_rank, int dst_rank, std::uint64_t hash, std::vector<LinkId>& out) const {
  if (src_rank < 0 || dst_rank < 0 || src_rank >= gpu_count() || dst_rank >= gpu_count()) return false;
  return route(gpu_vertex(src_rank), gpu_vertex(dst_rank), hash, out);
}

Time Topology::path_latency(const std::vector<LinkId>& path) const {
  Time t;
  for (LinkId l : path) t += links_[l].latency;
  return t;
}

std::optional<std::string> Topology::find_disconnected() const {
  if (gpu_count() == 0) return std::string("the cluster has no GPUs");
  std::vector<LinkId> scratch;
  for (int n = 0; n < node_count(); ++n) {
    const NodeInfo& node = nodes_[std::size_t(n)];
    if (node.gpus == 0) return "node " + std::to_string(n) + " has no GPUs";
    for (int r = node.first_rank + 1; r < node.first_rank + node.gpus; ++r) {
      scratch.clear();
      if (!route_gpus(node.first_rank, r, 0, scratch) || !route_gpus(r, node.first_rank, 0, scratch))
        return "rank " + std::to_string(node.first_rank) + " and rank " + std::to_string(r) + " of node " +
               std::to_string(n) + " have no path between them inside the node";
    }
  }
  if (node_count() == 1) return std::nullopt;
  for (int r = 0; r < gpu_count(); ++r) {
    const VertexId nic = rank_nic_[std::size_t(r)];
    if (nic == kNoVertex)
      return "rank " + std::to_string(r) + " has no NIC but the cluster has " + std::to_string(node_count()) + " nodes";
    scratch.clear();
    if (!route(gpu_vertex(r), nic, 0, scratch) || !route(nic, gpu_vertex(r), 0, scratch))
      return "rank " + std::to_string(r) + " cannot reach its NIC";
  }
  const VertexId first = rank_nic_[0];
  std::vector<char> seen(vertex_count(), 0);
  for (int r = 0; r < gpu_count(); ++r) {
    const VertexId nic = rank_nic_[std::size_t(r)];
    if (seen[nic]) continue;
    seen[nic] = 1;
    scratch.clear();
    if (nic != first && (!route(first, nic, 0, scratch) || !route(nic, first, 0, scratch)))
      return "the NIC of rank 0 (node 0) cannot reach the NIC of rank " + std::to_string(r) + " (node " +
             std::to_string(node_of(r)) + ") through the fabric";
  }
  return std::nullopt;
}

}  // namespace scaleout
