#include "tools/cli/sweep.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "sim/engine/check.hpp"
#include "tools/cli/entry.hpp"
#include "tools/cli/sweep_pool.hpp"
#include "tools/io/sweep.hpp"

namespace scaleout {
namespace {

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

}  // namespace

namespace sweep_detail {

// Writes rows as one durable append.
void write_rows(ResultsFile& out, const std::vector<SweepRow>& rows, Tally& tally) {
  out.append(rows);
  for (const SweepRow& row : rows) tally.count(row);
  tally.report();
}

unsigned local_jobs(int jobs) {
  if (jobs > 0) return static_cast<unsigned>(jobs);
  return std::max(1u, std::thread::hardware_concurrency());
}

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

namespace {
MpiSweepRunner g_mpi_runner = nullptr;
}  // namespace

void set_mpi_sweep_runner(MpiSweepRunner runner) { g_mpi_runner = runner; }

}  // namespace sweep_detail

namespace {

using sweep_detail::Clock;


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
  if (sweep_detail::g_mpi_runner && launched_by_mpirun()) return sweep_detail::g_mpi_runner(o, on_progress);
  std::unique_ptr<sweep_detail::Prepared> p = sweep_detail::prepare(o);
  return sweep_detail::run_local(*p, sweep_detail::local_jobs(o.jobs), on_progress);
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
