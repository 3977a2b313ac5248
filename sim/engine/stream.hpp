#pragma once
// Streams of tasks on the simulator: each stream runs its tasks one at a time in submission order
// (a CUDA stream, a host thread issuing launches, a NIC queue); a task may also wait for tasks on
// other streams (an event wait). A task either lasts a fixed duration or is started by a launcher
// that calls finish() itself (a flow on a network whose duration depends on contention).
// Dependencies on tasks added later (a pipeline stage waiting for its successor's gradient) are
// added with add_dependency() before start(); a cycle shows as tasks left unfinished.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <vector>

#include "sim/engine/chunked_vector.hpp"
#include "sim/engine/simulator.hpp"

namespace scaleout {

using TaskId = std::uint32_t;
using StreamId = std::uint32_t;

class StreamExecutor {
 public:
  using Launcher = std::function<void(TaskId)>;
  using Hook = std::function<void(TaskId, Time)>;

  explicit StreamExecutor(Simulator& sim) : sim_(sim) {}

  StreamId add_stream();
  // Room for this many tasks and about as many dependencies (the launchers, a ChunkedVector,
  // take room in their chunk table only).
  void reserve(std::size_t tasks) {
    tasks_.reserve(tasks);
    edges_.reserve(tasks + tasks / 2);
    launchers_.reserve(tasks / 2);
  }
  TaskId add(StreamId stream, Time duration, std::span<const TaskId> deps);
  TaskId add(StreamId stream, Time duration, std::initializer_list<TaskId> deps = {}) {
    return add(stream, duration, std::span<const TaskId>(deps.begin(), deps.size()));
  }
  TaskId add_launched(StreamId stream, Launcher launcher, std::span<const TaskId> deps);

  // `task` also waits for `dep`; both must exist and `task` must not have started.
  void add_dependency(TaskId task, TaskId dep);
  // `task` starts no earlier than `at` (its launch, by a host thread that nothing else holds up,
  // is known when it is built): a time instead of a task to wait for.
  void set_release(TaskId task, Time at);
  Time release(TaskId id) const { return tasks_[id].release; }
  // `task` finishes no earlier than `at`: it ends at max(start + duration, at). A run of kernels
  // on one stream, each released by its launch, folds into one such task exactly: started at the
  // first's start, it ends when the last would (the max-plus recurrence f = max(f', r) + d).
  void set_finish_floor(TaskId task, Time at);
  void set_duration(TaskId task, Time duration);
  Time duration(TaskId id) const { return tasks_[id].duration; }
  Time finish_floor(TaskId id) const { return tasks_[id].floor; }
  // Makes every task whose dependencies are met start; call once after building the graph (tasks
  // may still be added later, e.g. by hooks).
  void start();
  // Completes a task started by its launcher.
  void finish(TaskId id);
  // Gives the launchers' memory back once the simulation is over (a launcher called after it is an
  // error, as is a task launched after it).
  void release_launchers();

  void on_start(Hook h) { on_start_.push_back(std::move(h)); }
  void on_finish(Hook h) { on_finish_.push_back(std::move(h)); }

  std::size_t task_count() const { return tasks_.size(); }
  std::size_t finished_count() const { return finished_; }
  bool all_finished() const { return finished_ == tasks_.size(); }
  StreamId stream_of(TaskId id) const { return tasks_[id].stream; }
  Time start_time(TaskId id) const { return tasks_[id].started; }
  Time finish_time(TaskId id) const { return tasks_[id].finished; }

 private:
  struct Task {
    Time duration;
    Time release = Time::zero();
    Time floor = Time::zero();
    Time started = Time::max();
    Time finished = Time::max();
    StreamId stream = 0;
    std::uint32_t pending_deps = 0;
    std::uint32_t launcher = 0;  // 0: none; else index + 1 into launchers_
    bool running = false;
    bool done = false;
    // Tasks waiting for this one, in insertion order: a list threaded through edges_ (one
    // allocation for the whole graph instead of a vector per task).
    std::uint32_t first_edge = kNoEdge, last_edge = kNoEdge;
  };
  // A step of a 64-GPU pipeline holds millions of tasks: a cache line each, not more.
  static_assert(sizeof(Task) <= 64, "StreamExecutor::Task outgrew 64 bytes");
  static constexpr std::uint32_t kNoEdge = 0xffffffffu;
  struct Edge {
    TaskId to;
    std::uint32_t next;
  };
  void add_edge(TaskId from, TaskId to);
  struct Stream {
    std::vector<TaskId> order;
    std::size_t head = 0;
    bool busy = false;
    bool wake_pending = false;  // a wake-up at the head task's release time is scheduled
  };
  TaskId add_task(StreamId stream, Time duration, std::span<const TaskId> deps);
  void try_start(StreamId s);

  Simulator& sim_;
  std::vector<Task> tasks_;
  std::vector<Edge> edges_;
  std::vector<Stream> streams_;
  ChunkedVector<Launcher> launchers_;
  std::vector<Hook> on_start_, on_finish_;
  std::vector<TaskId> finishing_now_;  // tasks of no length ending at this instant, in order
  std::size_t finished_ = 0;
  bool started_ = false;
  bool launchers_released_ = false;
};

}  // namespace scaleout
