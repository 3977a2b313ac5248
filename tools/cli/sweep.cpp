#include "tools/cli/sweep.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#ifdef SCALEOUT_HAVE_MPI
#include <mpi.h>
#endif

#include "sim/engine/check.hpp"
#include "tools/io/sweep.hpp"

namespace scaleout {
namespace {

using Clock = std::chrono::steady_clock;

struct Shard {
  std::size_t i = 0, n = 1;
};

Shard parse_shard(const std::string& s) {
  Shard sh;
  if (s.empty()) return sh;
  const auto slash = s.find('/');
  auto num = [](std::string_view t, std::size_t& out) {
    const auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), out);
    return ec == std::errc() && p == t.data() + t.size() && !t.empty();
  };
  if (slash == std::string::npos || !num(std::string_view(s).substr(0, slash), sh.i) ||
      !num(std::string_view(s).substr(slash + 1), sh.n) || sh.n == 0 || sh.i >= sh.n)
    throw InputError("--shard " + s + ": expected i/N with 0 <= i < N, e.g. 0/4");
  return sh;
}

// The points this run still has to simulate, in index order.
std::vector<std::size_t> pending_points(const Sweep& sweep, const ResultsFile& out, Shard shard) {
  std::vector<std::size_t> p;
  for (std::size_t i = shard.i; i < sweep.size(); i += shard.n)
    if (!out.done(i)) p.push_back(i);
  return p;
}

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

// Writes rows as one durable append.
void write_rows(ResultsFile& out, const std::vector<SweepRow>& rows, Tally& tally) {
  out.append(rows);
  for (const SweepRow& row : rows) tally.count(row);
  tally.report();
}

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

unsigned local_jobs(int jobs) {
  if (jobs > 0) return static_cast<unsigned>(jobs);
  return std::max(1u, std::thread::hardware_concurrency());
}

struct Prepared {
  Sweep sweep;
  std::unique_ptr<ResultsFile> out;
  std::vector<std::size_t> pending;
};

std::unique_ptr<Prepared> prepare(const SweepOptions& o) {
  const Shard shard = parse_shard(o.shard);
  auto p = std::make_unique<Prepared>(Prepared{load_sweep(o.sweep), nullptr, {}});
  p->out = std::make_unique<ResultsFile>(o.out, p->sweep, o.resume);
  p->pending = pending_points(p->sweep, *p->out, shard);
  return p;
}

SweepSummary finish(Tally& tally, const Prepared& p) {
  SweepSummary s = tally.summary();
  s.points = p.sweep.size();
  s.already_done = p.out->done_count();
  s.seconds = tally.elapsed();
  return s;
}

SweepSummary run_local(Prepared& p, unsigned jobs, const std::function<void(const SweepProgress&)>& hook) {
  Tally tally(p.pending.size(), hook);
  tally.report();
  std::size_t written = 0;
  if (!p.pending.empty()) {
    PointPool pool(p.sweep, static_cast<unsigned>(std::min<std::size_t>(jobs, p.pending.size())));
    pool.push(p.pending);
    while (written < p.pending.size()) {
      const std::vector<SweepRow> rows = pool.wait_rows();
      write_rows(*p.out, rows, tally);
      written += rows.size();
    }
  }
  return finish(tally, p);
}

#ifdef SCALEOUT_HAVE_MPI

// Rank 0 and the workers talk in two messages: a worker sends its finished rows (JSONL lines)
// with how many more points it wants; rank 0 answers with that many point indices, or none when
// the sweep has no more. A worker stops on an empty answer once it holds no points.
constexpr int kTagRequest = 1;
constexpr int kTagWork = 2;

// Polls with short naps rather than a blocking probe: Open MPI's blocking calls spin, and a rank
// waiting for a message would take a core from the simulations of its node.
MPI_Status wait_for_message(int source, int tag) {
  MPI_Status st;
  for (auto nap = std::chrono::microseconds(10);; nap = std::min(2 * nap, std::chrono::microseconds(400))) {
    int arrived = 0;
    MPI_Iprobe(source, tag, MPI_COMM_WORLD, &arrived, &st);
    if (arrived) return st;
    std::this_thread::sleep_for(nap);
  }
}

// The same for a send: a message past the eager limit waits for rank 0 to take it.
void wait_for_send(MPI_Request& request) {
  for (auto nap = std::chrono::microseconds(10);; nap = std::min(2 * nap, std::chrono::microseconds(400))) {
    int done = 0;
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return;
    std::this_thread::sleep_for(nap);
  }
}

class MpiSession {
 public:
  MpiSession() {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);  // only this thread calls MPI
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiSession() { MPI_Finalize(); }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  int rank_ = 0, size_ = 1;
};

SweepSummary coordinate(Prepared& p, int ranks, const std::function<void(const SweepProgress&)>& hook) {
  Tally tally(p.pending.size(), hook);
  tally.report();
  std::size_t next = 0;
  std::vector<std::size_t> outstanding(static_cast<std::size_t>(ranks), 0);
  int active = ranks - 1;
  std::vector<char> buf;
  while (active > 0) {
    MPI_Status st = wait_for_message(MPI_ANY_SOURCE, kTagRequest);
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    buf.resize(static_cast<std::size_t>(count));
    MPI_Recv(buf.data(), count, MPI_BYTE, st.MPI_SOURCE, kTagRequest, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    const auto src = static_cast<std::size_t>(st.MPI_SOURCE);
    std::uint64_t want = 0;
    SCALEOUT_CHECK(buf.size() >= sizeof want, "a worker's request carries how many points it wants");
    std::memcpy(&want, buf.data(), sizeof want);
    std::vector<SweepRow> rows;
    const std::string_view text(buf.data() + sizeof want, buf.size() - sizeof want);
    for (std::size_t pos = 0; pos < text.size();) {
      const std::size_t nl = text.find('\n', pos);
      SCALEOUT_CHECK(nl != std::string_view::npos, "rows from a worker end in a newline");
      rows.push_back(parse_jsonl_row(text.substr(pos, nl - pos), "rank " + std::to_string(src), "row"));
      pos = nl + 1;
    }
    SCALEOUT_CHECK(rows.size() <= outstanding[src], "a worker returns only the points it was given");
    outstanding[src] -= rows.size();
    std::vector<std::uint64_t> give;
    while (give.size() < want && next < p.pending.size()) give.push_back(p.pending[next++]);
    outstanding[src] += give.size();
    MPI_Send(give.data(), static_cast<int>(give.size()), MPI_UINT64_T, st.MPI_SOURCE, kTagWork, MPI_COMM_WORLD);
    if (give.empty() && outstanding[src] == 0) --active;
    // Answer first, then write and sync: the worker need not wait for the disk.
    if (!rows.empty()) write_rows(*p.out, rows, tally);
  }
  return finish(tally, p);
}

void serve(const Sweep& sweep, unsigned jobs) {
  PointPool pool(sweep, jobs);
  // Points held ahead of the threads, so that none waits on a round trip to rank 0; few enough
  // that the end of the sweep stays balanced across ranks.
  const std::size_t target = 4 * std::size_t(jobs);
  std::size_t in_flight = 0;
  std::string results;
  std::uint64_t want = target;
  for (;;) {
    std::string msg(sizeof want, '\0');
    std::memcpy(msg.data(), &want, sizeof want);
    msg += results;
    MPI_Request request;
    MPI_Isend(msg.data(), static_cast<int>(msg.size()), MPI_BYTE, 0, kTagRequest, MPI_COMM_WORLD, &request);
    wait_for_send(request);
    MPI_Status st = wait_for_message(0, kTagWork);
    int n = 0;
    MPI_Get_count(&st, MPI_UINT64_T, &n);
    std::vector<std::uint64_t> given(static_cast<std::size_t>(n));
    MPI_Recv(given.data(), n, MPI_UINT64_T, 0, kTagWork, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (given.empty() && in_flight == 0) return;
    pool.push(std::vector<std::size_t>(given.begin(), given.end()));
    in_flight += given.size();
    results.clear();
    const std::vector<SweepRow> rows = pool.wait_rows();
    for (const SweepRow& row : rows) results += jsonl_line(row);
    in_flight -= rows.size();
    want = target - in_flight;
  }
}

SweepSummary run_mpi(const SweepOptions& o, const std::function<void(const SweepProgress&)>& hook) {
  MpiSession mpi;
  // Rank 0 alone opens the results file; the others learn whether it could before they start.
  std::unique_ptr<Prepared> p;
  std::exception_ptr failure;
  int status = 0;
  if (mpi.rank() == 0) {
    try {
      p = prepare(o);
    } catch (...) {
      failure = std::current_exception();
      status = 1;
    }
  }
  MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (failure) std::rethrow_exception(failure);
  if (status != 0) {
    // Rank 0 reports why and exits 2 (mpirun passes that on). A worker that exited non-zero
    // first could make mpirun kill rank 0 before its message is out, so workers leave quietly.
    SweepSummary quiet;
    quiet.coordinator = false;
    return quiet;
  }
  if (mpi.size() == 1) return run_local(*p, local_jobs(o.jobs), hook);
  if (mpi.rank() != 0) {
    serve(load_sweep(o.sweep), o.jobs > 0 ? static_cast<unsigned>(o.jobs) : 1u);
    SweepSummary s;
    s.coordinator = false;
    return s;
  }
  try {
    return coordinate(*p, mpi.size(), hook);
  } catch (const std::exception& e) {
    // The workers wait on rank 0: stopping alone would hang the job.
    std::fprintf(stderr, "error: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, dynamic_cast<const InputError*>(&e) ? 2 : 1);
    throw;
  }
}

#endif  // SCALEOUT_HAVE_MPI

// A progress bar with rate and ETA, redrawn at most ten times a second, on a terminal only.
class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : enabled_(enabled) {}
  void operator()(const SweepProgress& p) {
    if (!enabled_) return;
    const auto now = Clock::now();
    if (p.done < p.total && p.done > 0 && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    constexpr int kWidth = 30;
    const double frac = p.total ? double(p.done) / double(p.total) : 1.0;
    const int filled = static_cast<int>(frac * kWidth);
    const double rate = p.elapsed_s > 0 ? double(p.done) / p.elapsed_s : 0;
    char eta[32] = "--:--";
    if (rate > 0) {
      const auto left = static_cast<long long>(double(p.total - p.done) / rate + 0.5);
      if (left >= 3600)
        std::snprintf(eta, sizeof eta, "%lld:%02lld:%02lld", left / 3600, left / 60 % 60, left % 60);
      else
        std::snprintf(eta, sizeof eta, "%lld:%02lld", left / 60, left % 60);
    }
    std::fprintf(stderr, "\r[%s%s] %zu/%zu %5.1f%%  %.1f points/s  ETA %s   ",
                 std::string(std::size_t(filled), '#').c_str(), std::string(std::size_t(kWidth - filled), '.').c_str(),
                 p.done, p.total, 100 * frac, rate, eta);
    if (p.done == p.total) std::fputc('\n', stderr);
    std::fflush(stderr);
  }

 private:
  bool enabled_;
  Clock::time_point last_{};
};

std::string sweep_footer() {
  std::string s = "\nSweep file fields (unknown keys are errors):\n";
  for (const auto& f : kSweepFields) {
    char line[256];
    std::snprintf(line, sizeof line, "  %-12.*s %-28.*s %.*s\n", int(f.name.size()), f.name.data(), int(f.type.size()),
                  f.type.data(), int(f.help.size()), f.help.data());
    s += line;
  }
  s += "Points: the product of grid axes x zip groups x list entries, index in that nested-loop order (the last\n"
       "varying fastest). Rows are appended in completion order; sort by index to compare runs.\n";
  return s;
}

}  // namespace

bool launched_by_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

SweepSummary run_sweep(const SweepOptions& o, const std::function<void(const SweepProgress&)>& on_progress) {
#ifdef SCALEOUT_HAVE_MPI
  if (launched_by_mpirun()) return run_mpi(o, on_progress);
#endif
  std::unique_ptr<Prepared> p = prepare(o);
  return run_local(*p, local_jobs(o.jobs), on_progress);
}

void register_sweep_command(CLI::App& app) {
  auto o = std::make_shared<SweepOptions>();
  CLI::App* cmd =
      app.add_subcommand("sweep", "Simulate every point of a sweep file into a results file (.csv or .jsonl)");
  cmd->add_option("sweep", o->sweep, "Sweep file (JSON)")->required();
  cmd->add_option("-o,--out", o->out, "Results file: .csv (one row per point) or .jsonl (one object per line)")
      ->required();
  cmd->add_option("-j,--jobs", o->jobs, "Worker threads (default: every hardware thread; 1 per MPI worker rank)")
      ->check(CLI::Range(1, 4096));
  cmd->add_flag("--resume", o->resume, "Keep the rows already in the results file and run only the missing points");
  cmd->add_option("--shard", o->shard, "i/N: run only the points whose index % N == i (job arrays)");
  cmd->add_flag("-q,--quiet", o->quiet, "No progress bar and no summary line");
  cmd->footer(sweep_footer());
  cmd->callback([o] {
    ProgressBar bar(!o->quiet && ::isatty(STDERR_FILENO));
    const SweepSummary s = run_sweep(*o, [&bar](const SweepProgress& p) { bar(p); });
    if (!s.coordinator) return;
    if (!o->quiet)
      std::fprintf(stderr, "sweep: %zu rows written to %s (%zu with an error) in %.1f s, %.0f points/s%s\n", s.written,
                   o->out.c_str(), s.errors, s.seconds, s.seconds > 0 ? double(s.written) / s.seconds : 0.0,
                   s.already_done ? (", " + std::to_string(s.already_done) + " already there").c_str() : "");
    if (s.internal_errors > 0)
      throw InternalError("sweep: " + std::to_string(s.internal_errors) +
                          " points hit an internal error (a bug in scaleout); their rows carry the message");
  });
}

}  // namespace scaleout
