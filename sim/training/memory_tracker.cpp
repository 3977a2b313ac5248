#include "sim/training/memory_tracker.hpp"

#include "sim/engine/check.hpp"

namespace scaleout {

void MemoryTracker::alloc(MemCategory c, double bytes, Time at) {
  now_[static_cast<std::size_t>(c)] += bytes;
  total_ += bytes;
  if (total_ > peak_) {
    peak_ = total_;
    at_peak_ = now_;
    peak_time_ = at;
  }
  if (keep_) timeline_.emplace_back(at, total_);
}

void MemoryTracker::free(MemCategory c, double bytes, Time at) {
  now_[static_cast<std::size_t>(c)] -= bytes;
  total_ -= bytes;
  SCALEOUT_CHECK(total_ > -1.0, "memory tracker: freed more than allocated");
  if (keep_) timeline_.emplace_back(at, total_);
}

}  // namespace scaleout
