#pragma once
// The discrete-event simulator: a clock and a deterministic event queue. It knows nothing of GPUs;
// components own their state and schedule closures on it. Passed explicitly, never global, so that
// many simulations can run in one process (a sweep).
#include <algorithm>
#include <cstdint>

#include "sim/engine/event_queue.hpp"
#include "sim/engine/time.hpp"

namespace scaleout {

class Simulator {
 public:
  Time now() const { return now_; }
  EventId schedule_at(Time at, EventFn fn, std::int64_t priority = 0);
  EventId schedule_in(Time delay, EventFn fn, std::int64_t priority = 0) { return schedule_at(now_ + delay, std::move(fn), priority); }
  bool cancel(EventId id) { return queue_.cancel(id); }
  // Runs events until none is left (or until `limit` is passed); returns the number executed.
  std::uint64_t run(Time limit = Time::max());
  // From an event: the running run() returns once the events at or before `at` are done (the
  // events left stay queued).
  void stop_after(Time at) { stop_ = std::min(stop_, at); }
  std::uint64_t events_executed() const { return executed_; }
  bool idle() const { return queue_.empty(); }
  // Sets the clock back to zero; only when no event is left.
  void rewind();
  // When the next live event is due (Time::max() when none is).
  Time next_event_time() { return queue_.next_time(); }

 private:
  EventQueue queue_;
  Time now_ = Time::zero();
  Time stop_ = Time::max();
  std::uint64_t executed_ = 0;
};

}  // namespace scaleout
