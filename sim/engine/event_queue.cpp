#include "sim/engine/event_queue.hpp"

#include <algorithm>

#include "sim/engine/check.hpp"

namespace scaleout {

namespace {
constexpr int kSlotBits = 32;
// Four children a node: half the levels of a binary heap, and a node's children in two cache
// lines; the order of (time, priority, insertion counter) is total, so events come out in the
// same order from any heap.
constexpr std::size_t kArity = 4;
}  // namespace

void EventQueue::sift_up(std::size_t i, Key k) {
  while (i > 0) {
    const std::size_t parent = (i - 1) / kArity;
    if (!(heap_[parent] > k)) break;
    heap_[i] = heap_[parent];
    i = parent;
  }
  heap_[i] = k;
}

void EventQueue::pop_top() {
  const Key last = heap_.back();
  heap_.pop_back();
  const std::size_t n = heap_.size();
  if (n == 0) return;
  std::size_t i = 0;
  for (;;) {
    const std::size_t first = kArity * i + 1;
    if (first >= n) break;
    const std::size_t end = std::min(first + kArity, n);
    std::size_t least = first;
    for (std::size_t c = first + 1; c < end; ++c)
      if (heap_[least] > heap_[c]) least = c;
    if (!(last > heap_[least])) break;
    heap_[i] = heap_[least];
    i = least;
  }
  heap_[i] = last;
}

// An EventId packs the insertion counter (high bits) and the slot (low bits), so a stale id whose
// slot was reused is recognised and cancel() of it is a no-op.
EventId EventQueue::push(Time at, std::int64_t priority, EventFn fn) {
  std::uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<std::uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  const std::uint64_t seq = next_seq_++;
  slots_[slot] = Slot{std::move(fn), seq, true};
  heap_.emplace_back();
  sift_up(heap_.size() - 1, Key{at, priority, seq, slot});
  ++live_;
  return (seq << kSlotBits) | slot;
}

bool EventQueue::cancel(EventId id) {
  const auto slot = static_cast<std::uint32_t>(id & 0xffffffffu);
  const std::uint64_t seq = id >> kSlotBits;
  if (slot >= slots_.size()) return false;
  Slot& s = slots_[slot];
  if (!s.live || s.seq != seq) return false;
  s.live = false;
  s.fn = nullptr;
  --live_;
  return true;
}

void EventQueue::drop_dead_top() {
  while (!heap_.empty()) {
    const Key& top = heap_.front();
    const Slot& s = slots_[top.slot];
    if (s.live && s.seq == top.seq) return;
    const std::uint32_t slot = top.slot;
    const bool reusable = !s.live && s.seq == top.seq;
    pop_top();
    if (reusable) free_slots_.push_back(slot);
  }
}

Time EventQueue::next_time() {
  drop_dead_top();
  return heap_.empty() ? Time::max() : heap_.front().at;
}

bool EventQueue::pop(Time& at, EventFn& fn) {
  drop_dead_top();
  if (heap_.empty()) return false;
  const Key top = heap_.front();
  pop_top();
  Slot& s = slots_[top.slot];
  SCALEOUT_CHECK(s.live && s.seq == top.seq, "event queue: popped a dead event");
  at = top.at;
  fn = std::move(s.fn);
  s.fn = nullptr;
  s.live = false;
  free_slots_.push_back(top.slot);
  --live_;
  return true;
}

}  // namespace scaleout
