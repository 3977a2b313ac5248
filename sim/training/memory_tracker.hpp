#pragma once
// Follows allocations through the step and remembers the peak and what made it up.
#include <array>
#include <vector>

#include "models/tape.hpp"
#include "sim/engine/time.hpp"

namespace scaleout {

class MemoryTracker {
 public:
  void alloc(MemCategory c, double bytes, Time at) {
    drain(at);
    apply(c, bytes, at);
  }
  void free(MemCategory c, double bytes, Time at) {
    drain(at);
    apply(c, -bytes, at);
  }
  // A change known ahead of its time (inside a run of kernels folded into one task): applied in
  // time order, before any later alloc() or free(), or by settle().
  void later(MemCategory c, double signed_bytes, Time at) {
    // Runs follow one another on a stream, so changes mostly come in time order: appended here.
    if (pending_.size() == head_ || !(at < back_end_)) {
      pending_.push_back({at, signed_bytes, nullptr, c});
      back_end_ = at;
      return;
    }
    insert_pending(c, signed_bytes, at);
  }
  // A recorded run's changes, summed up ahead so that they can be applied at once: the same
  // level, peak and breakdown as applying them one by one, where nothing else of the GPU's falls
  // between its first change and its last and every byte count is whole (sums of whole numbers
  // below 2^53 are exact in any order). Anything else is told them one by one.
  struct Block {
    struct Change {
      Time offset;  // from the run's start
      double bytes;
      MemCategory c;
    };
    std::vector<Change> changes;  // in time order
    std::array<double, kMemCategoryCount> net{}, at_peak{};  // their sum; the sum up to the highest running total
    double net_total = 0, peak_gain = 0, low_gain = 0;       // the sum; the highest and lowest running totals
    Time peak_offset, span;                                   // where the highest is; last change's offset - first's
    // Sums the changes up; false where they do not qualify (out of time order, a part of a byte).
    bool build();
  };
  // The block's changes, for a run that started at `start`.
  void later_block(const Block& b, Time start) {
    const Time first = start + b.changes.front().offset;
    if (!keep_ && (pending_.size() == head_ || !(first < back_end_))) {
      pending_.push_back({first, 0.0, &b, MemCategory::other});
      back_end_ = first + b.span;
      return;
    }
    for (const Block::Change& x : b.changes) later(x.c, x.bytes, start + x.offset);
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
    Time at;  // a block's: its first change's
    double bytes;
    const Block* block;  // or a change of its own
    MemCategory c;
  };
  // In time order (changes arrive in runs that follow one another on one stream; one that does
  // not is put in its place), applied from `head_`. Nothing falls inside a block's span: a change
  // that would is met by the block told one by one in its place (`expand`).
  std::vector<Pending> pending_;
  std::size_t head_ = 0;
  Time back_end_;  // the last pending entry's time (a block's: its last change's)
  // Applies the pending changes up to `upto` (inline: mostly there are none).
  void drain(Time upto) {
    if (head_ < pending_.size()) drain_pending(upto);
  }
  void drain_pending(Time upto);
  void insert_pending(MemCategory c, double signed_bytes, Time at);
  void expand(std::size_t i);
  bool whole() const;
  void apply(MemCategory c, double bytes, Time at) {
    now_[static_cast<std::size_t>(c)] += bytes;
    total_ += bytes;
    if (!(total_ > -1.0)) freed_too_much();
    if (total_ > peak_) {
      peak_ = total_;
      at_peak_ = now_;
      peak_time_ = at;
    }
    if (keep_) timeline_.emplace_back(at, total_);
  }
  [[noreturn]] static void freed_too_much();
  void apply_block(const Block& b, Time start);
};

}  // namespace scaleout
