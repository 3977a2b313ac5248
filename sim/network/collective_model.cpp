#include "sim/network/collective_model.hpp"

#include <algorithm>
#include <cmath>

namespace scaleout {

double collective_seconds(CollectiveKind kind, std::int64_t p, double bytes, double bandwidth, double latency_s) {
  if (p <= 1 || bytes <= 0) return 0;
  const double n = double(p);
  const double frac = (n - 1) / n;
  switch (kind) {
    case CollectiveKind::all_reduce: return 2 * (n - 1) * latency_s + 2 * frac * bytes / bandwidth;
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::all_gather:
    case CollectiveKind::all_to_all: return (n - 1) * latency_s + frac * bytes / bandwidth;
    case CollectiveKind::broadcast:
    case CollectiveKind::reduce: return (n - 1) * latency_s + bytes / bandwidth;
    case CollectiveKind::send_recv: return latency_s + bytes / bandwidth;
  }
  return 0;
}

double collective_seconds_across_nodes(CollectiveKind kind, std::int64_t p, std::int64_t per_node, double bytes,
                                       const TwoTierLinks& l) {
  if (p <= 1 || bytes <= 0) return 0;
  const std::int64_t k = std::clamp<std::int64_t>(per_node, 1, p);
  if (k == 1) return collective_seconds(kind, p, bytes, l.inter_bandwidth, l.inter_latency_s);
  const double n = double(p), kk = double(k);
  if (kind == CollectiveKind::all_to_all) {
    const double latency = (n - kk) * l.inter_latency_s + (kk - 1) * l.intra_latency_s;
    return latency + std::max(bytes * (n - kk) / n / l.inter_bandwidth, bytes * (kk - 1) / n / l.intra_bandwidth);
  }
  if (kind == CollectiveKind::send_recv) return collective_seconds(kind, p, bytes, l.inter_bandwidth, l.inter_latency_s);
  const double nodes = std::ceil(n / kk);
  const double latency = ((nodes - 1) * l.inter_latency_s + (n - nodes) * l.intra_latency_s) / (n - 1);
  const double bandwidth = std::min(l.intra_bandwidth, kk * l.inter_bandwidth);
  return collective_seconds(kind, p, bytes, bandwidth, latency);
}

}  // namespace scaleout
