#include "hardware/calibration/link_fit.hpp"

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "sim/network/collectives.hpp"

namespace scaleout {
namespace {

constexpr double kProbeStepS = 1e-6;
// Efficiency probe: divided by this (a small step, so that a probe seldom crosses a kink such as
// NCCL's LL bandwidth cap, where the transfer time stops scaling).
constexpr double kProbeU = 1.01;
constexpr double kLargeBytes = 64.0 * 1024 * 1024;
constexpr int kIterations = 3;
constexpr const char* kClassNames[3] = {"nvlink", "pcie", "network"};

enum class Target { link_class, ring, tree, compare_only, ignored };

double& class_efficiency(ClusterSpec& c, int cls) {
  return cls == 0 ? c.nvlink_efficiency : cls == 1 ? c.pcie_efficiency : c.network_efficiency;
}

// The ranks a row's transfer runs between; p2p copies are taken as a send/recv of two ranks.
CollectiveSpec spec_of(const LinkRow& r) {
  CollectiveSpec s;
  s.bytes = r.bytes;
  if (r.source == LinkRow::Source::p2p) {
    s.kind = CollectiveKind::send_recv;
    s.ranks = {r.src, r.dst};
    return s;
  }
  s.kind = r.kind;
  s.ranks = r.ranks;
  if (r.algorithm == "ring") s.algorithm = CollectiveAlgorithm::ring;
  else if (r.algorithm == "tree") s.algorithm = CollectiveAlgorithm::tree;
  return s;
}

// The class of link a send/recv row's transfers cross in the model: network if any route leaves
// the node, nvlink if every route stays on NVLink, pcie otherwise.
int link_class(const Topology& t, const std::vector<int>& ranks) {
  bool network = false, all_nvlink = true;
  std::vector<LinkId> path;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const int a = ranks[i], b = ranks[(i + 1) % ranks.size()];
    if (a == b) continue;
    path.clear();
    if (!t.route_gpus(a, b, 0, path)) continue;
    for (LinkId l : path) {
      network = network || t.link(l).kind == LinkKind::network;
      all_nvlink = all_nvlink && t.link(l).kind == LinkKind::nvlink;
    }
  }
  return network ? 2 : all_nvlink ? 0 : 1;
}

Target target_of(const LinkRow& r) {
  if (r.source == LinkRow::Source::p2p) return r.src == r.dst ? Target::ignored : Target::link_class;
  if (r.ranks.size() < 2 || !(r.bytes > 0)) return Target::ignored;
  switch (r.kind) {
    case CollectiveKind::send_recv: return Target::link_class;
    case CollectiveKind::all_reduce:
      return r.algorithm == "ring" ? Target::ring : r.algorithm == "tree" ? Target::tree : Target::compare_only;
    case CollectiveKind::all_gather:
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::broadcast:
    case CollectiveKind::reduce: return r.algorithm == "tree" ? Target::compare_only : Target::ring;
    case CollectiveKind::all_to_all: return Target::compare_only;
  }
  return Target::ignored;
}

double time_on(const Topology& t, const CollectiveSpec& s, CollectiveChoice* choice = nullptr) {
  return time_collective(t, s, choice);
}

// The model's time for a row: all-reduce left to NCCL picks the faster of ring and tree (NVLS is
// off in the measurements), everything else as `scaleout collective` runs it.
double predict_on(const Topology& t, const LinkRow& row, std::string* algorithm) {
  CollectiveSpec s = spec_of(row);
  CollectiveChoice c;
  double best = 0;
  if (row.source == LinkRow::Source::collective && row.kind == CollectiveKind::all_reduce && !s.algorithm) {
    best = std::numeric_limits<double>::infinity();
    for (CollectiveAlgorithm a : {CollectiveAlgorithm::ring, CollectiveAlgorithm::tree}) {
      s.algorithm = a;
      CollectiveChoice ci;
      const double ti = time_on(t, s, &ci);
      if (ti < best) best = ti, c = ci;
    }
  } else {
    best = time_on(t, s, &c);
  }
  if (algorithm) *algorithm = std::string(algorithm_name(c.algorithm)) + "/" + protocol_name(c.protocol);
  return best;
}

// One row linearised around the current figures: t = l0 + k * step + x * u (see the header).
struct Linear {
  const LinkRow* row;
  double l0, k, x;
};

// What a parameter set changes: the step correction and the efficiency the fit moves.
struct Knobs {
  double* step;
  double* efficiency;
};

Knobs knobs_of(ClusterSpec& c, Target target, int cls) {
  if (target == Target::ring) return {&c.tuning.ring_step_latency_s, &c.tuning.ring_bus_efficiency};
  if (target == Target::tree) return {&c.tuning.tree_step_latency_s, &c.tuning.tree_bus_efficiency};
  return {&c.tuning.step_latency_s[std::size_t(cls)], &class_efficiency(c, cls)};
}

// Linearises `rows` around `cluster` for one knob set: the algorithm and protocol the model picks
// now are held fixed while probing, so that each probe moves one term only.
std::vector<Linear> linearise(const ClusterSpec& cluster, const std::vector<const LinkRow*>& rows, Target target,
                              int cls) {
  ClusterSpec step = cluster, half = cluster;
  *knobs_of(step, target, cls).step += kProbeStepS;
  *knobs_of(half, target, cls).efficiency /= kProbeU;
  const Topology t0 = build_topology(cluster), ts = build_topology(step), th = build_topology(half);
  std::vector<Linear> out;
  for (const LinkRow* r : rows) {
    CollectiveSpec s = spec_of(*r);
    const CollectiveChoice c = choose_collective(t0, s);
    s.algorithm = c.algorithm;
    s.protocol = c.protocol;
    const double base = time_on(t0, s), stepped = time_on(ts, s), halved = time_on(th, s);
    const double x = (halved - base) / (kProbeU - 1);  // transfer time scales as 1 / efficiency
    out.push_back({r, base - x, (stepped - base) / kProbeStepS, x});
  }
  return out;
}

// Weighted least squares of measured = l0 + k * step + x * u over (step, u), relative error as the
// loss; a column the rows do not excite is left at its current value.
bool solve(const std::vector<Linear>& rows, double* step, double* u) {
  if (rows.empty()) return false;
  bool use_k = false, use_x = false;
  for (const auto& r : rows) {
    use_k = use_k || std::fabs(r.k) > 1e-9;
    use_x = use_x || r.x > 1e-12 * r.row->seconds;
  }
  const int cols = int(use_k) + int(use_x);
  if (cols == 0 || int(rows.size()) < cols) return false;
  Eigen::MatrixXd a(rows.size(), cols);
  Eigen::VectorXd b(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Linear& r = rows[i];
    const double w = 1.0 / r.row->seconds;
    int c = 0;
    double rhs = r.row->seconds - r.l0;
    if (use_k) a(Eigen::Index(i), c++) = w * r.k;
    else rhs -= r.k * *step;
    if (use_x) a(Eigen::Index(i), c++) = w * r.x;
    else rhs -= r.x * *u;
    b(Eigen::Index(i)) = w * rhs;
  }
  const Eigen::VectorXd sol = a.colPivHouseholderQr().solve(b);
  int c = 0;
  if (use_k) *step = sol(c++);
  if (use_x) *u = sol(c++);
  return std::isfinite(*step) && std::isfinite(*u);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// latency + bytes / bandwidth through plain copies, relative error as the loss.
CopyLine fit_copy_line(const std::vector<const LinkRow*>& rows) {
  CopyLine line;
  line.rows = rows.size();
  if (rows.size() < 2) return line;
  Eigen::MatrixXd a(rows.size(), 2);
  Eigen::VectorXd b(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const double w = 1.0 / rows[i]->seconds;
    a(Eigen::Index(i), 0) = w;
    a(Eigen::Index(i), 1) = w * rows[i]->bytes;
    b(Eigen::Index(i)) = 1.0;
  }
  const Eigen::VectorXd sol = a.colPivHouseholderQr().solve(b);
  line.latency_s = std::max(0.0, sol(0));
  line.bandwidth = sol(1) > 0 ? 1.0 / sol(1) : 0;
  return line;
}

}  // namespace

double predict_link_row(const ClusterSpec& cluster, const LinkRow& row, std::string* algorithm) {
  return predict_on(build_topology(cluster), row, algorithm);
}

LinkFitReport fit_links(const LinkMeasurements& m, const ClusterSpec& cluster) {
  LinkFitReport rep;
  ClusterSpec c = cluster;
  const Topology topo = build_topology(c);

  // Held out: every 4th size of each series, and group sizes between the smallest and largest.
  std::map<std::tuple<int, std::string, int, int, int, std::vector<int>, std::string>, std::vector<const LinkRow*>> series;
  std::set<std::size_t> group_sizes;
  for (const LinkRow& r : m.rows) {
    if (target_of(r) == Target::ignored) continue;
    series[{int(r.source), r.method, r.src, r.dst, int(r.kind), r.ranks, r.algorithm}].push_back(&r);
    if (r.source == LinkRow::Source::collective) group_sizes.insert(r.ranks.size());
  }
  std::set<const LinkRow*> held_out;
  for (auto& [key, rows] : series) {
    std::stable_sort(rows.begin(), rows.end(), [](const LinkRow* a, const LinkRow* b) { return a->bytes < b->bytes; });
    for (std::size_t i = 3; i < rows.size(); i += 4) held_out.insert(rows[i]);
  }
  if (group_sizes.size() > 2) {
    const std::size_t lo = *group_sizes.begin(), hi = *group_sizes.rbegin();
    for (const LinkRow& r : m.rows)
      if (r.source == LinkRow::Source::collective && r.ranks.size() != lo && r.ranks.size() != hi) held_out.insert(&r);
  }

  // Plain copies: one line per (harness class, method).
  std::map<std::pair<std::string, std::string>, std::vector<const LinkRow*>> copies;
  bool warned_class = false;
  for (const LinkRow& r : m.rows) {
    if (r.source != LinkRow::Source::p2p || held_out.count(&r)) continue;
    copies[{r.link, r.method}].push_back(&r);
    if (r.src != r.dst && !warned_class && (r.link == "nvlink" || r.link == "pcie") &&
        kClassNames[link_class(topo, {r.src, r.dst})] != r.link) {
      rep.notes.push_back("GPUs " + std::to_string(r.src) + " and " + std::to_string(r.dst) + " are joined by " + r.link +
                          " (nvidia-smi topo -m) but by " + kClassNames[link_class(topo, {r.src, r.dst})] +
                          " in the cluster \"" + cluster.name + "\": is it the right cluster?");
      warned_class = true;
    }
  }
  for (auto& [key, rows] : copies) {
    CopyLine line = fit_copy_line(rows);
    line.link = key.first;
    line.method = key.second;
    rep.copies.push_back(line);
  }

  // Rows each knob set is fitted on.
  std::array<std::vector<const LinkRow*>, 3> nccl_class, copy_class;
  std::vector<const LinkRow*> ring_rows, tree_rows;
  for (const LinkRow& r : m.rows) {
    const Target tg = target_of(r);
    if (held_out.count(&r) || tg == Target::ignored || tg == Target::compare_only) continue;
    if (tg == Target::link_class) {
      if (r.source == LinkRow::Source::p2p && r.method != "memcpy") continue;
      const int cls = link_class(topo, spec_of(r).ranks);
      (r.source == LinkRow::Source::p2p ? copy_class : nccl_class)[std::size_t(cls)].push_back(&r);
    } else {
      (tg == Target::ring ? ring_rows : tree_rows).push_back(&r);
    }
  }

  // Link classes first (send/recv runs the direct algorithm, which no ring or tree figure
  // touches), then the algorithms on top of them; a few rounds, since the model's choice of
  // protocol moves with the figures.
  for (int cls = 0; cls < 3; ++cls) {
    LinkClassFit& f = rep.classes[std::size_t(cls)];
    const bool copies_only = nccl_class[std::size_t(cls)].empty();
    const auto& rows = copies_only ? copy_class[std::size_t(cls)] : nccl_class[std::size_t(cls)];
    if (rows.size() < 2) continue;
    f.from_copies = copies_only;
    f.rows = rows.size();
    for (int it = 0; it < kIterations; ++it) {
      const auto lin = linearise(c, rows, Target::link_class, cls);
      Knobs k = knobs_of(c, Target::link_class, cls);
      double step = *k.step, u = 1;
      if (!solve(lin, &step, &u) || !(u > 0)) {
        rep.notes.push_back(std::string(kClassNames[cls]) + ": the fit did not give a positive bandwidth; kept the cluster's figures");
        break;
      }
      *k.step = step;
      *k.efficiency = std::clamp(*k.efficiency / u, 1e-3, 1.0);
      f.fitted = true;
    }
    if (!f.fitted) continue;
    f.efficiency = class_efficiency(c, cls);
    f.step_latency_s = c.tuning.step_latency_s[std::size_t(cls)];
    if (f.efficiency >= 1.0)
      rep.notes.push_back(std::string(kClassNames[cls]) + ": measured faster than the cluster's datasheet bandwidth; "
                          "efficiency capped at 1 (check the cluster's bandwidth)");
    if (copies_only)
      rep.notes.push_back(std::string(kClassNames[cls]) + ": no NCCL send/recv rows; fitted on cudaMemcpyPeer copies");
  }
  for (int it = 0; it < kIterations; ++it)
    for (Target tg : {Target::ring, Target::tree}) {
      const auto& rows = tg == Target::ring ? ring_rows : tree_rows;
      AlgorithmFit& f = tg == Target::ring ? rep.ring : rep.tree;
      if (rows.size() < 2) continue;
      f.rows = rows.size();
      const auto lin = linearise(c, rows, tg, 0);
      Knobs k = knobs_of(c, tg, 0);
      double step = *k.step, u = 1;
      if (!solve(lin, &step, &u) || !(u > 0)) continue;
      *k.step = step;
      *k.efficiency = std::clamp(*k.efficiency / u, 1e-3, 4.0);
      f.fitted = true;
      f.step_latency_s = step;
      f.bus_efficiency = *k.efficiency;
    }
  for (const auto* f : {&rep.ring, &rep.tree})
    if (!f->fitted && f->rows == 0)
      rep.notes.push_back(std::string(f == &rep.ring ? "ring" : "tree") + ": no rows to fit (NCCL's figures kept)");

  // Every NCCL row of two or more ranks through the fitted model.
  const Topology fitted = build_topology(c);
  std::vector<double> fit_err, held_err, busbw_err;
  for (const LinkRow& r : m.rows) {
    if (r.source != LinkRow::Source::collective || target_of(r) == Target::ignored) continue;
    LinkResidual res;
    res.row = &r;
    res.held_out = held_out.count(&r) > 0 || target_of(r) == Target::compare_only;
    res.predicted_s = predict_on(fitted, r, &res.algorithm);
    const double err = std::fabs(res.predicted_s - r.seconds) / r.seconds;
    (res.held_out ? held_err : fit_err).push_back(err);
    if (res.held_out && r.bytes >= kLargeBytes) busbw_err.push_back(std::fabs(r.seconds / res.predicted_s - 1));
    rep.residuals.push_back(res);
  }
  rep.stats.fitted = fit_err.size();
  rep.stats.held_out = held_err.size();
  rep.stats.fitted_median_rel_error = median(fit_err);
  rep.stats.held_out_median_rel_error = median(held_err);
  rep.stats.held_out_worst_rel_error = held_err.empty() ? 0 : *std::max_element(held_err.begin(), held_err.end());
  rep.stats.held_out_large = busbw_err.size();
  rep.stats.busbw_median_rel_error = median(busbw_err);
  rep.stats.busbw_worst_rel_error = busbw_err.empty() ? 0 : *std::max_element(busbw_err.begin(), busbw_err.end());
  if (held_err.empty()) rep.notes.push_back("no held-out NCCL rows: nothing to report the error on");

  for (int cls = 0; cls < 3; ++cls)
    if (rep.classes[std::size_t(cls)].fitted) {
      const double e = rep.classes[std::size_t(cls)].efficiency;
      (cls == 0 ? rep.links.nvlink_efficiency : cls == 1 ? rep.links.pcie_efficiency : rep.links.network_efficiency) = e;
    }
  rep.links.tuning = c.tuning;
  rep.links.measured_on = m.measured_on;
  rep.cluster = c;
  return rep;
}

}  // namespace scaleout
