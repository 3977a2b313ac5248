// `scaleout sweep` under mpirun, in the MPI twin only (scaleout-mpi): rank 0 hands out points and
// writes the one results file, the other ranks simulate them on their threads.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "sim/engine/check.hpp"
#include "tools/cli/entry.hpp"
#include "tools/cli/sweep_pool.hpp"
#include "tools/io/input_error.hpp"

namespace scaleout {
namespace {

using namespace sweep_detail;

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

}  // namespace

void use_mpi_sweeps() { set_mpi_sweep_runner(&run_mpi); }

}  // namespace scaleout
