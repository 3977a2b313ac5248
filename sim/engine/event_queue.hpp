#pragma once
// Deterministic event queue: a 4-ary heap keyed by (time, priority, insertion counter), so events
// at the same time and priority run first in, first out (the ns-3 / SST ordering). Cancellation
// marks a tombstone; the cancelled event is dropped when it reaches the top.
#include <cstdint>
#include <functional>
#include <vector>

#include "sim/engine/time.hpp"

namespace scaleout {

using EventId = std::uint64_t;
using EventFn = std::function<void()>;

class EventQueue {
 public:
  EventId push(Time at, std::int64_t priority, EventFn fn);
  bool cancel(EventId id);
  bool empty() const { return live_ == 0; }
  std::size_t size() const { return live_; }
  // Removes the earliest live event; returns false when none is left.
  bool pop(Time& at, EventFn& fn);
  Time next_time();

 private:
  struct Key {
    Time at;
    std::int64_t priority;
    std::uint64_t seq;
    std::uint32_t slot;
    bool operator>(const Key& o) const {
      if (at != o.at) return at > o.at;
      if (priority != o.priority) return priority > o.priority;
      return seq > o.seq;
    }
  };
  struct Slot {
    EventFn fn;
    std::uint64_t seq = 0;  // the event currently occupying the slot
    bool live = false;
  };
  void drop_dead_top();
  void sift_up(std::size_t i, Key k);
  void pop_top();  // removes heap_[0]

  std::vector<Key> heap_;
  std::vector<Slot> slots_;
  std::vector<std::uint32_t> free_slots_;
  std::uint64_t next_seq_ = 0;
  std::size_t live_ = 0;
};

}  // namespace scaleout
