#pragma once
// The parts of `scaleout sweep` (sweep.cpp) that its MPI runner (sweep_mpi.cpp, compiled into the
// MPI twin only) shares: the thread pool simulating points, the tally of written rows, and a
// sweep prepared to run.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tools/cli/sweep.hpp"
#include "tools/io/sweep.hpp"

namespace scaleout::sweep_detail {

using Clock = std::chrono::steady_clock;

// Counts what was written and reports progress; lives on the writing thread.
class Tally {
 public:
  Tally(std::size_t total, const std::function<void(const SweepProgress&)>& hook) : total_(total), hook_(hook) {}
  void count(const SweepRow& row) {
    ++summary_.written;
    if (!row.error.empty()) ++summary_.errors;
    if (row.internal_error) ++summary_.internal_errors;
  }
  void report() const {
    if (hook_) hook_({summary_.written, total_, elapsed()});
  }
  double elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  SweepSummary& summary() { return summary_; }

 private:
  std::size_t total_;
  const std::function<void(const SweepProgress&)>& hook_;
  Clock::time_point start_ = Clock::now();
  SweepSummary summary_;
};

// Worker threads simulating queued points; one Simulator per point, nothing shared but the
// (read-only) sweep and these two queues.
class PointPool {
 public:
  PointPool(const Sweep& sweep, unsigned threads) : sweep_(sweep) {
    for (unsigned t = 0; t < threads; ++t) threads_.emplace_back([this] { work(); });
  }
  ~PointPool() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  PointPool(const PointPool&) = delete;
  PointPool& operator=(const PointPool&) = delete;

  void push(const std::vector<std::size_t>& indices) {
    {
      std::lock_guard lock(mutex_);
      todo_.insert(todo_.end(), indices.begin(), indices.end());
    }
    work_cv_.notify_all();
  }
  // Blocks until at least one row is ready; returns every ready row.
  std::vector<SweepRow> wait_rows() {
    std::unique_lock lock(mutex_);
    done_cv_.wait(lock, [this] { return !done_.empty(); });
    std::vector<SweepRow> rows;
    rows.swap(done_);
    return rows;
  }

 private:
  void work() {
    for (;;) {
      std::size_t index = 0;
      {
        std::unique_lock lock(mutex_);
        work_cv_.wait(lock, [this] { return stopping_ || next_ < todo_.size(); });
        if (stopping_) return;
        index = todo_[next_++];
        if (next_ == todo_.size()) {
          todo_.clear();
          next_ = 0;
        }
      }
      SweepRow row = run_sweep_point(sweep_, index);
      {
        std::lock_guard lock(mutex_);
        done_.push_back(std::move(row));
      }
      done_cv_.notify_one();
    }
  }

  const Sweep& sweep_;
  std::mutex mutex_;
  std::condition_variable work_cv_, done_cv_;
  std::vector<std::size_t> todo_;
  std::size_t next_ = 0;
  std::vector<SweepRow> done_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

struct Prepared {
  Sweep sweep;
  std::unique_ptr<ResultsFile> out;
  std::vector<std::size_t> pending;
};

// Writes rows as one durable append.
void write_rows(ResultsFile& out, const std::vector<SweepRow>& rows, Tally& tally);
// Worker threads for a local run: `jobs`, or every hardware thread when it is 0.
unsigned local_jobs(int jobs);
// Loads the sweep, opens (or resumes) its results file and lists the points still to run.
std::unique_ptr<Prepared> prepare(const SweepOptions& o);
// The summary of a finished run.
SweepSummary finish(Tally& tally, const Prepared& p);
// Runs the pending points on `jobs` threads of this process.
SweepSummary run_local(Prepared& p, unsigned jobs, const std::function<void(const SweepProgress&)>& hook);

// How sweeps started by mpirun run: set by use_mpi_sweeps() in the MPI twin, null elsewhere.
using MpiSweepRunner = SweepSummary (*)(const SweepOptions&, const std::function<void(const SweepProgress&)>&);
void set_mpi_sweep_runner(MpiSweepRunner runner);

}  // namespace scaleout::sweep_detail
