#include "sim/network/collective_model.hpp"

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

}  // namespace scaleout
