#include "sim/training/memory_tracker.hpp"

#include <algorithm>
#include <functional>

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
  while (!pending_.empty() && !(upto < pending_.front().at)) {
    std::pop_heap(pending_.begin(), pending_.end(), std::greater<>());
    const Pending p = pending_.back();
    pending_.pop_back();
    apply(p.c, p.bytes, p.at);
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

void MemoryTracker::later(MemCategory c, double signed_bytes, Time at) {
  pending_.push_back({at, seq_++, c, signed_bytes});
  std::push_heap(pending_.begin(), pending_.end(), std::greater<>());
}

void MemoryTracker::settle() { drain(Time::max()); }

}  // namespace scaleout
