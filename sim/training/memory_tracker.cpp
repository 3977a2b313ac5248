#include "sim/training/memory_tracker.hpp"

#include <algorithm>
#include <cmath>

#include "sim/engine/check.hpp"

namespace scaleout {

void MemoryTracker::freed_too_much() { fail_check("total > -1.0", __FILE__, __LINE__, "memory tracker: freed more than allocated"); }

bool MemoryTracker::Block::build() {
  if (changes.empty()) return false;
  net = {};
  at_peak = {};
  net_total = 0;
  for (std::size_t i = 0; i < changes.size(); ++i) {
    const Change& x = changes[i];
    if (i > 0 && x.offset < changes[i - 1].offset) return false;
    if (!(std::fabs(x.bytes) < 0x1p50) || std::floor(x.bytes) != x.bytes) return false;
    net[static_cast<std::size_t>(x.c)] += x.bytes;
    net_total += x.bytes;
    if (i == 0 || net_total > peak_gain) {  // (the first highest, as applying them one by one keeps it)
      peak_gain = net_total;
      at_peak = net;
      peak_offset = x.offset;
    }
    low_gain = i == 0 ? net_total : std::min(low_gain, net_total);
  }
  span = changes.back().offset - changes.front().offset;
  return true;
}

bool MemoryTracker::whole() const {
  if (std::floor(total_) != total_ || !(std::fabs(total_) < 0x1p52)) return false;
  return std::all_of(now_.begin(), now_.end(), [](double x) { return std::floor(x) == x && std::fabs(x) < 0x1p52; });
}

void MemoryTracker::apply_block(const Block& b, Time start) {
  if (!(total_ + b.low_gain > -1.0)) freed_too_much();
  if (total_ + b.peak_gain > peak_) {
    peak_ = total_ + b.peak_gain;
    for (std::size_t c = 0; c < kMemCategoryCount; ++c) at_peak_[c] = now_[c] + b.at_peak[c];
    peak_time_ = start + b.peak_offset;
  }
  for (std::size_t c = 0; c < kMemCategoryCount; ++c) now_[c] += b.net[c];
  total_ += b.net_total;
}

void MemoryTracker::expand(std::size_t i) {
  const Block& b = *pending_[i].block;
  const Time start = pending_[i].at - b.changes.front().offset;
  std::vector<Pending> each;
  each.reserve(b.changes.size());
  for (const Block::Change& x : b.changes) each.push_back({start + x.offset, x.bytes, nullptr, x.c});
  pending_[i] = each.front();
  pending_.insert(pending_.begin() + std::ptrdiff_t(i) + 1, each.begin() + 1, each.end());
}

void MemoryTracker::drain_pending(Time upto) {
  while (head_ < pending_.size() && !(upto < pending_[head_].at)) {
    const Pending& p = pending_[head_];
    if (!p.block) {
      apply(p.c, p.bytes, p.at);
      ++head_;
    } else if (!(upto < p.at + p.block->span) && whole()) {
      apply_block(*p.block, p.at - p.block->changes.front().offset);
      ++head_;
    } else {
      expand(head_);  // (cut by `upto`, or not in whole bytes: one by one)
    }
  }
  if (head_ == pending_.size()) {
    pending_.clear();
    head_ = 0;
  }
}

void MemoryTracker::insert_pending(MemCategory c, double signed_bytes, Time at) {
  // After the first change at a later time (stable among equal times).
  auto after = [&] {
    return std::upper_bound(pending_.begin() + std::ptrdiff_t(head_), pending_.end(), at,
                            [](Time t, const Pending& p) { return t < p.at; });
  };
  auto pos = after();
  // Inside a block's span: the block one by one first.
  if (pos != pending_.begin() + std::ptrdiff_t(head_) && (pos - 1)->block && at < (pos - 1)->at + (pos - 1)->block->span) {
    expand(std::size_t(pos - 1 - pending_.begin()));
    pos = after();
  }
  pending_.insert(pos, {at, signed_bytes, nullptr, c});
}

void MemoryTracker::settle() { drain(Time::max()); }

}  // namespace scaleout
