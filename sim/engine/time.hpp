#pragma once
// Simulated time: integer picoseconds in a strong type. int64 picoseconds cover about 106 days,
// far beyond any training step; conversion to seconds happens only at the edges (reports).
#include <cmath>
#include <compare>
#include <cstdint>
#include <limits>

namespace scaleout {

class Time {
 public:
  constexpr Time() = default;
  static constexpr Time from_ps(std::int64_t ps) { return Time(ps); }
  static constexpr Time from_ns(double ns) { return Time(round_ps(ns * 1e3)); }
  static constexpr Time from_us(double us) { return Time(round_ps(us * 1e6)); }
  static constexpr Time from_seconds(double s) { return Time(round_ps(s * 1e12)); }
  static constexpr Time zero() { return Time(0); }
  static constexpr Time max() { return Time(std::numeric_limits<std::int64_t>::max()); }

  constexpr std::int64_t ps() const { return ps_; }
  constexpr double seconds() const { return static_cast<double>(ps_) * 1e-12; }
  constexpr double us() const { return static_cast<double>(ps_) * 1e-6; }

  constexpr Time operator+(Time o) const { return Time(ps_ + o.ps_); }
  constexpr Time operator-(Time o) const { return Time(ps_ - o.ps_); }
  constexpr Time& operator+=(Time o) { ps_ += o.ps_; return *this; }
  constexpr Time& operator-=(Time o) { ps_ -= o.ps_; return *this; }
  constexpr auto operator<=>(const Time&) const = default;

 private:
  constexpr explicit Time(std::int64_t ps) : ps_(ps) {}
  // Durations come from models in double seconds; saturate instead of overflowing on absurd inputs.
  static constexpr std::int64_t round_ps(double ps) {
    if (!(ps < 9.2e18)) return std::numeric_limits<std::int64_t>::max();
    if (ps < 0) return 0;
    return static_cast<std::int64_t>(ps + 0.5);
  }
  std::int64_t ps_ = 0;
};

constexpr Time max(Time a, Time b) { return a < b ? b : a; }

}  // namespace scaleout
