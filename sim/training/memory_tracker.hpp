#pragma once
// Follows allocations through the step and remembers the peak and what made it up.
#include <array>
#include <vector>

#include "models/tape.hpp"
#include "sim/engine/time.hpp"

namespace scaleout {

class MemoryTracker {
 public:
  void alloc(MemCategory c, double bytes, Time at);
  void free(MemCategory c, double bytes, Time at);
  // A change known ahead of its time (inside a run of kernels folded into one task): applied in
  // time order, before any later alloc() or free(), or by settle().
  void later(MemCategory c, double signed_bytes, Time at) {
    // Runs follow one another on a stream, so changes mostly come in time order: appended here.
    if (pending_.size() == head_ || !(at < pending_.back().at)) {
      pending_.push_back({at, c, signed_bytes});
      return;
    }
    insert_pending(c, signed_bytes, at);
  }
  // Applies every change still waiting; call before reading the peak.
  void settle();
  double current() const { return total_; }
  double peak() const { return peak_; }
  Time peak_time() const { return peak_time_; }
  const std::array<double, kMemCategoryCount>& peak_breakdown() const { return at_peak_; }
  // (time, bytes in use) after every change, for the trace's memory counter.
  const std::vector<std::pair<Time, double>>& timeline() const { return timeline_; }
  void keep_timeline(bool on) { keep_ = on; }

 private:
  std::array<double, kMemCategoryCount> now_{}, at_peak_{};
  double total_ = 0, peak_ = 0;
  Time peak_time_;
  bool keep_ = false;
  std::vector<std::pair<Time, double>> timeline_;
  struct Pending {
    Time at;
    MemCategory c;
    double bytes;
  };
  // In time order (changes arrive in runs that follow one another on one stream; one that does
  // not is put in its place), applied from `head_`.
  std::vector<Pending> pending_;
  std::size_t head_ = 0;
  void drain(Time upto);
  void insert_pending(MemCategory c, double signed_bytes, Time at);
  void apply(MemCategory c, double bytes, Time at);
};

}  // namespace scaleout
