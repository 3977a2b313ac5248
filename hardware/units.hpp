#pragma once
// Physical quantities as value types, so that a bandwidth is never confused with a rate of FLOPs.
// Bytes and FLOPs are doubles: model quantities (a 405B model's FLOPs) exceed int64 comfortably
// only as doubles, and they are converted to integer Time at the edge.
#include "sim/engine/time.hpp"

namespace scaleout {

struct Bytes {
  double value = 0;
  constexpr auto operator<=>(const Bytes&) const = default;
};
struct BytesPerSecond {
  double value = 0;
  constexpr auto operator<=>(const BytesPerSecond&) const = default;
};
struct FlopsPerSecond {
  double value = 0;
  constexpr auto operator<=>(const FlopsPerSecond&) const = default;
};
struct Hertz {
  double value = 0;
};

inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Time to move `b` at rate `r` (zero rate: effectively never).
inline Time transfer_time(Bytes b, BytesPerSecond r) {
  return r.value > 0 ? Time::from_seconds(b.value / r.value) : Time::max();
}

}  // namespace scaleout
