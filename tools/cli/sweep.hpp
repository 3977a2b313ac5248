#pragma once
// `scaleout sweep`: every point of a sweep file simulated by a pool of worker threads, or by the
// ranks of an MPI job (rank 0 hands out points and writes the one results file), each row appended
// and made durable as it finishes, in completion order.
#include <cstddef>
#include <functional>
#include <string>

namespace CLI {
class App;
}  // namespace CLI

namespace scaleout {

struct SweepOptions {
  std::string sweep;
  std::string out;
  int jobs = 0;  // 0: every hardware thread locally, one per MPI worker rank
  bool resume = false;
  std::string shard;  // "i/N": the points with index % N == i
  bool quiet = false;
};

struct SweepProgress {
  std::size_t done = 0;   // rows written by this run
  std::size_t total = 0;  // rows this run has to write
  double elapsed_s = 0;
};

struct SweepSummary {
  std::size_t points = 0;        // in the sweep (all shards)
  std::size_t already_done = 0;  // found in the results file by --resume
  std::size_t written = 0;       // rows this run wrote
  std::size_t errors = 0;        // of them, points whose scenario was invalid
  std::size_t internal_errors = 0;
  double seconds = 0;
  bool coordinator = true;  // false on MPI worker ranks, which write nothing
};

// Runs the sweep into o.out; `on_progress` is called from the writing thread after each batch of
// rows. Under mpirun (when built with MPI) every rank calls this; rank 0 returns the summary.
SweepSummary run_sweep(const SweepOptions& o, const std::function<void(const SweepProgress&)>& on_progress = {});

void register_sweep_command(CLI::App& app);

}  // namespace scaleout
