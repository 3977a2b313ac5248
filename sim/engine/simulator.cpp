#include "sim/engine/simulator.hpp"

#include <algorithm>
#include <sstream>

#include "sim/engine/check.hpp"

namespace scaleout {

void fail_check(const char* expr, const char* file, int line, const std::string& what) {
  std::ostringstream os;
  os << "internal error: " << what << " (" << expr << " at " << file << ":" << line << ")";
  throw InternalError(os.str());
}

EventId Simulator::schedule_at(Time at, EventFn fn, std::int64_t priority) {
  SCALEOUT_CHECK(at >= now_, "event scheduled in the past");
  return queue_.push(at, priority, std::move(fn));
}

void Simulator::rewind() {
  SCALEOUT_CHECK(queue_.empty(), "simulator: rewinding with events left");
  now_ = Time::zero();
}

std::uint64_t Simulator::run(Time limit) {
  std::uint64_t n = 0;
  Time at;
  EventFn fn;
  stop_ = Time::max();
  while (queue_.next_time() <= std::min(limit, stop_) && queue_.pop(at, fn)) {
    now_ = at;
    fn();
    ++n;
  }
  executed_ += n;
  return n;
}

}  // namespace scaleout
