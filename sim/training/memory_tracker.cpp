#include "sim/training/memory_tracker.hpp"

#include <algorithm>

#include "sim/engine/check.hpp"

namespace scaleout {

void MemoryTracker::apply(MemCategory c, double bytes, Time at) {
  now_[static_cast<std::size_t>(c)] += bytes;
  total_ += bytes;
  SCALEOUT_CHECK(total_ > -1.0, "memory tracker: freed more than allocated");
  if (total_ > peak_) {
    peak_ = total_;
    at_peak_ = now_;
    peak_time_ = at;
  }
  if (keep_) timeline_.emplace_back(at, total_);
}

void MemoryTracker::drain(Time upto) {
  while (head_ < pending_.size() && !(upto < pending_[head_].at)) {
    const Pending& p = pending_[head_++];
    apply(p.c, p.bytes, p.at);
  }
  if (head_ == pending_.size()) {
    pending_.clear();
    head_ = 0;
  }
}

void MemoryTracker::alloc(MemCategory c, double bytes, Time at) {
  drain(at);
  apply(c, bytes, at);
}

void MemoryTracker::free(MemCategory c, double bytes, Time at) {
  drain(at);
  apply(c, -bytes, at);
}

void MemoryTracker::insert_pending(MemCategory c, double signed_bytes, Time at) {
  // After the first change at a later time (stable among equal times).
  const auto pos = std::upper_bound(pending_.begin() + std::ptrdiff_t(head_), pending_.end(), at,
                                    [](Time t, const Pending& p) { return t < p.at; });
  pending_.insert(pos, {at, c, signed_bytes});
}

void MemoryTracker::settle() { drain(Time::max()); }

}  // namespace scaleout
