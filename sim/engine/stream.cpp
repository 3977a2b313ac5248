#include "sim/engine/stream.hpp"

#include "sim/engine/check.hpp"

namespace scaleout {

StreamId StreamExecutor::add_stream() {
  streams_.emplace_back();
  return static_cast<StreamId>(streams_.size() - 1);
}

void StreamExecutor::add_edge(TaskId from, TaskId to) {
  const auto e = static_cast<std::uint32_t>(edges_.size());
  edges_.push_back({to, kNoEdge});
  Task& t = tasks_[from];
  if (t.last_edge == kNoEdge) t.first_edge = e;
  else edges_[t.last_edge].next = e;
  t.last_edge = e;
}

TaskId StreamExecutor::add_task(StreamId stream, Time duration, std::span<const TaskId> deps) {
  SCALEOUT_CHECK(stream < streams_.size(), "task on an unknown stream");
  const auto id = static_cast<TaskId>(tasks_.size());
  Task t;
  t.duration = duration;
  t.stream = stream;
  tasks_.push_back(t);
  for (TaskId d : deps) {
    SCALEOUT_CHECK(d < id, "add(): dependencies on later tasks go through add_dependency()");
    if (!tasks_[d].done) {
      ++tasks_[id].pending_deps;
      add_edge(d, id);
    }
  }
  streams_[stream].order.push_back(id);
  return id;
}

TaskId StreamExecutor::add(StreamId stream, Time duration, std::span<const TaskId> deps) {
  const TaskId id = add_task(stream, duration, deps);
  if (started_) try_start(stream);
  return id;
}

TaskId StreamExecutor::add_launched(StreamId stream, Launcher launcher, std::span<const TaskId> deps) {
  SCALEOUT_CHECK(!launchers_released_, "add_launched() after release_launchers()");
  const TaskId id = add_task(stream, Time::zero(), deps);
  launchers_.push_back(std::move(launcher));
  tasks_[id].launcher = static_cast<std::uint32_t>(launchers_.size());
  if (started_) try_start(stream);
  return id;
}

void StreamExecutor::add_dependency(TaskId task, TaskId dep) {
  SCALEOUT_CHECK(task < tasks_.size() && dep < tasks_.size() && task != dep, "add_dependency: unknown task");
  SCALEOUT_CHECK(!tasks_[task].running && !tasks_[task].done, "add_dependency: task already started");
  if (tasks_[dep].done) return;
  ++tasks_[task].pending_deps;
  add_edge(dep, task);
}

void StreamExecutor::set_release(TaskId task, Time at) {
  SCALEOUT_CHECK(task < tasks_.size(), "set_release: unknown task");
  SCALEOUT_CHECK(!tasks_[task].running && !tasks_[task].done, "set_release: task already started");
  tasks_[task].release = at;
}

void StreamExecutor::set_finish_floor(TaskId task, Time at) {
  SCALEOUT_CHECK(task < tasks_.size(), "set_finish_floor: unknown task");
  SCALEOUT_CHECK(!tasks_[task].running && !tasks_[task].done, "set_finish_floor: task already started");
  tasks_[task].floor = at;
}

void StreamExecutor::set_duration(TaskId task, Time duration) {
  SCALEOUT_CHECK(task < tasks_.size(), "set_duration: unknown task");
  SCALEOUT_CHECK(!tasks_[task].running && !tasks_[task].done && tasks_[task].launcher == 0, "set_duration: task started or launched");
  tasks_[task].duration = duration;
}

void StreamExecutor::start() {
  started_ = true;
  for (StreamId s = 0; s < streams_.size(); ++s) try_start(s);
}

void StreamExecutor::try_start(StreamId s) {
  Stream& st = streams_[s];
  if (st.busy || st.head >= st.order.size()) return;
  const TaskId id = st.order[st.head];
  Task& t = tasks_[id];
  if (t.pending_deps > 0) return;
  if (t.release > sim_.now()) {
    if (!st.wake_pending) {
      st.wake_pending = true;
      sim_.schedule_at(t.release, [this, s] {
        streams_[s].wake_pending = false;
        try_start(s);
      });
    }
    return;
  }
  st.busy = true;
  t.running = true;
  t.started = sim_.now();
  const std::uint32_t launcher = t.launcher;
  const Time end = max(sim_.now() + t.duration, t.floor);
  // Hooks may add tasks, which can move tasks_: no reference to a task survives them.
  for (auto& h : on_start_) h(id, sim_.now());
  if (launcher != 0) {
    SCALEOUT_CHECK(!launchers_released_, "a launched task started after release_launchers()");
    launchers_[launcher - 1](id);
  } else if (end == sim_.now()) {
    // A task of no length (a barrier, a memory change) ends as it starts: at once, not through
    // an event of its own. Iteratively, so that a chain of them does not nest calls.
    // The list is not empty while it is being worked through: a task started by one of its
    // finishes only joins it.
    const bool draining = !finishing_now_.empty();
    finishing_now_.push_back(id);
    if (draining) return;
    for (std::size_t i = 0; i < finishing_now_.size(); ++i) finish(finishing_now_[i]);
    finishing_now_.clear();
  } else {
    sim_.schedule_at(end, [this, id] { finish(id); });
  }
}

void StreamExecutor::release_launchers() {
  launchers_.clear();
  launchers_released_ = true;
}

void StreamExecutor::finish(TaskId id) {
  Task& t = tasks_[id];
  SCALEOUT_CHECK(t.running && !t.done, "finish() of a task that is not running");
  t.running = false;
  t.done = true;
  t.finished = sim_.now();
  ++finished_;
  const StreamId s = t.stream;
  streams_[s].busy = false;
  ++streams_[s].head;
  for (auto& h : on_finish_) h(id, sim_.now());
  // Dependents first, in insertion order, then the next task of this stream: deterministic.
  // (try_start may add tasks and edges: index, never hold references.)
  for (std::uint32_t e = tasks_[id].first_edge; e != kNoEdge; e = edges_[e].next) {
    const TaskId d = edges_[e].to;
    if (--tasks_[d].pending_deps == 0) try_start(tasks_[d].stream);
  }
  try_start(s);
}

}  // namespace scaleout
