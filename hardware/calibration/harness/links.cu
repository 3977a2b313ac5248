// scaleout-links: measures the links between the GPUs of one machine and NCCL's collectives over
// them, for the link fit of the scaleout simulator (hardware/calibration/link_fit.hpp).
//
//   scaleout-links --out FILE.json [--budget-s 300] [--max-bytes 8GiB] [--quick]
//                  [--topo-file TOPO.txt] [--groups 2,4,8] [--no-p2p] [--no-collectives]
//
// One process drives every visible GPU (ncclCommInitAll, all ranks' calls in one NCCL group):
//   p2p          for every ordered pair (src, dst): cudaMemcpyPeerAsync and a kernel on src that
//                writes into dst's memory (when cudaDeviceCanAccessPeer), sizes 8 B up; on the
//                diagonal a device-local copy. Timed with CUDA events on src's stream.
//   collectives  all-reduce, all-gather, reduce-scatter, all-to-all (grouped ncclSend/ncclRecv),
//                broadcast and send/recv (each rank to the next) over the first n GPUs for n = 2,
//                4, ... and all of them; all-reduce also with NCCL_ALGO forced to Ring and to Tree
//                (set before that communicator is created); send/recv between GPU 0 and every other
//                GPU. Sizes as nccl-tests counts them, 8 B to --max-bytes (capped by free memory).
//                Per-rank CUDA events around a batch of `inner` calls; the slowest rank's time over
//                the batch, divided by inner; the median of the repetitions. algbw = bytes / time,
//                busbw = algbw * nccl-tests' factor (all-reduce 2(n-1)/n; all-gather,
//                reduce-scatter, all-to-all (n-1)/n; broadcast, send/recv 1).
// NVLink SHARP and multi-node NVLink are switched off (NCCL_NVLS_ENABLE=0, NCCL_MNNVL_ENABLE=0,
// set before NCCL starts): the simulator's NVLS algorithm is not what is calibrated here.
//
// The output is one JSON document (schema "scaleout-links/1", kind "links"), rewritten atomically
// after every series, so that a kill loses at most the series in flight. A watchdog writes it and
// exits (code 3) if the run overruns its budget by more than a minute (a hung NCCL call).
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common.h"

namespace harness {
namespace {

constexpr const char* kSchema = "scaleout-links/1";
constexpr const char* kVersion = "1.0";
constexpr double kWatchdogGraceS = 60;

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------

struct Options {
  std::string out;
  double budget_s = 300;
  size_t max_bytes = size_t(8) << 30;
  bool quick = false;
  std::string topo_file;
  std::vector<int> groups;  // empty: 2, 4, ... and all GPUs
  bool p2p = true;
  bool collectives = true;
  std::string args;
};

void usage() {
  fprintf(stderr,
          "usage: scaleout-links --out FILE.json [--budget-s 300] [--max-bytes 8GiB] [--quick]\n"
          "                      [--topo-file TOPO.txt] [--groups 2,4,8] [--no-p2p] [--no-collectives]\n"
          "  --budget-s       wall-clock budget; no measurement starts past it\n"
          "  --max-bytes      largest message (default 8GiB; also capped by free GPU memory)\n"
          "  --quick          a few sizes per series (a smoke test, ~20 s on 8 GPUs)\n"
          "  --topo-file      the text of `nvidia-smi topo -m` (default: run it)\n"
          "  --groups         group sizes of the collectives (the first n GPUs); default 2, 4, ..., all\n"
          "  --no-p2p / --no-collectives  skip a part\n");
}

bool parse_size(const std::string& text, size_t* out) {
  char* end = nullptr;
  const double v = strtod(text.c_str(), &end);
  if (end == text.c_str() || !(v > 0)) return false;
  std::string unit(end);
  double mult = 1;
  if (unit == "" || unit == "B") mult = 1;
  else if (unit == "K" || unit == "KiB") mult = 1024.0;
  else if (unit == "M" || unit == "MiB") mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB") mult = 1024.0 * 1024 * 1024;
  else return false;
  *out = static_cast<size_t>(v * mult);
  return *out >= 8;
}

bool parse_args(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    o->args += (i > 1 ? " " : "") + std::string(argv[i]);
    const std::string a = argv[i];
    auto next = [&](std::string* v) {
      if (i + 1 >= argc) return false;
      *v = argv[++i];
      o->args += " " + *v;
      return true;
    };
    std::string v;
    if (a == "--out") {
      if (!next(&o->out)) return false;
    } else if (a == "--budget-s") {
      if (!next(&v)) return false;
      o->budget_s = atof(v.c_str());
      if (!(o->budget_s > 0)) {
        fprintf(stderr, "--budget-s: expected a positive number of seconds\n");
        return false;
      }
    } else if (a == "--max-bytes") {
      if (!next(&v)) return false;
      if (!parse_size(v, &o->max_bytes)) {
        fprintf(stderr, "--max-bytes: expected a size of at least 8 B such as 8GiB, 512MiB, 4096\n");
        return false;
      }
    } else if (a == "--quick") {
      o->quick = true;
    } else if (a == "--topo-file") {
      if (!next(&o->topo_file)) return false;
    } else if (a == "--groups") {
      if (!next(&v)) return false;
      std::stringstream ss(v);
      std::string item;
      while (std::getline(ss, item, ',')) {
        const int n = atoi(item.c_str());
        if (n < 1) {
          fprintf(stderr, "--groups: \"%s\" is not a group size\n", item.c_str());
          return false;
        }
        o->groups.push_back(n);
      }
    } else if (a == "--no-p2p") {
      o->p2p = false;
    } else if (a == "--no-collectives") {
      o->collectives = false;
    } else if (a == "--help" || a == "-h") {
      return false;
    } else {
      fprintf(stderr, "unknown argument: %s\n", a.c_str());
      return false;
    }
  }
  return !o->out.empty();
}

// ---------------------------------------------------------------------------
// The output document
// ---------------------------------------------------------------------------

// Header fields, the rows of each section, notes; rendered and written as one JSON document.
class Document {
 public:
  void header(const std::string& key, const std::string& json) {
    std::lock_guard<std::mutex> lock(mu_);
    header_.emplace_back(key, json);
  }
  void p2p(const JsonObject& row) {
    std::lock_guard<std::mutex> lock(mu_);
    p2p_.push_back(row.render());
  }
  void collective(const JsonObject& row) {
    std::lock_guard<std::mutex> lock(mu_);
    collectives_.push_back(row.render());
  }
  void note(const std::string& text) {
    std::lock_guard<std::mutex> lock(mu_);
    notes_.push_back(json_escape(text));
    log_msg("note: %s", text.c_str());
  }
  // Writes FILE.tmp and renames it over FILE: readers never see half a document.
  bool write(const std::string& path, double elapsed_s, bool complete) {
    std::lock_guard<std::mutex> lock(mu_);
    std::string s = "{\n";
    for (const auto& h : header_) s += "  " + json_escape(h.first) + ": " + h.second + ",\n";
    s += "  \"elapsed_s\": " + json_number(elapsed_s) + ",\n";
    s += std::string("  \"complete\": ") + (complete ? "true" : "false") + ",\n";
    auto list = [&](const char* key, const std::vector<std::string>& rows, bool last) {
      s += std::string("  \"") + key + "\": [";
      for (size_t i = 0; i < rows.size(); ++i) s += (i ? ",\n    " : "\n    ") + rows[i];
      s += rows.empty() ? "]" : "\n  ]";
      s += last ? "\n" : ",\n";
    };
    list("notes", notes_, false);
    list("p2p", p2p_, false);
    list("collectives", collectives_, true);
    s += "}\n";
    const std::string tmp = path + ".tmp";
    FILE* f = fopen(tmp.c_str(), "w");
    if (!f) return false;
    const bool ok = fwrite(s.data(), 1, s.size(), f) == s.size();
    if (fclose(f) != 0 || !ok) return false;
    return rename(tmp.c_str(), path.c_str()) == 0;
  }
  size_t rows() {
    std::lock_guard<std::mutex> lock(mu_);
    return p2p_.size() + collectives_.size();
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<std::string, std::string>> header_;
  std::vector<std::string> p2p_, collectives_, notes_;
};

// ---------------------------------------------------------------------------
// Machine facts
// ---------------------------------------------------------------------------

std::string run_command(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

std::string read_file(const std::string& path, bool* ok) {
  std::ifstream f(path);
  *ok = static_cast<bool>(f);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string iso8601_utc() {
  time_t t = time(nullptr);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r\n");
  return s.substr(a, b - a + 1);
}

// The link class of each GPU pair from `nvidia-smi topo -m`: X (the GPU itself) -> local, NV# ->
// nvlink, PIX/PXB/PHB/NODE/SYS -> pcie, anything else (or no matrix) -> unknown.
std::vector<std::vector<std::string>> link_classes(const std::string& topo, int gpus) {
  std::vector<std::vector<std::string>> m(size_t(gpus), std::vector<std::string>(size_t(gpus), "unknown"));
  std::stringstream lines(topo);
  std::string line;
  while (std::getline(lines, line)) {
    std::stringstream ss(line);
    std::vector<std::string> tok;
    std::string t;
    while (ss >> t) tok.push_back(t);
    if (tok.empty() || tok[0].rfind("GPU", 0) != 0 || tok[0].size() < 4) continue;
    const int row = atoi(tok[0].c_str() + 3);
    if (row < 0 || row >= gpus || int(tok.size()) < gpus + 1) continue;
    for (int c = 0; c < gpus; ++c) {
      const std::string& v = tok[size_t(c) + 1];
      std::string cls = "unknown";
      if (v == "X") cls = "local";
      else if (v.rfind("NV", 0) == 0) cls = "nvlink";
      else if (v == "PIX" || v == "PXB" || v == "PHB" || v == "NODE" || v == "SYS") cls = "pcie";
      m[size_t(row)][size_t(c)] = cls;
    }
  }
  return m;
}

// ---------------------------------------------------------------------------
// Timing
// ---------------------------------------------------------------------------

struct Measured {
  std::string error;
  double median_s = 0, min_s = 0, max_s = 0;
  int reps = 0, inner = 0;
};

struct TimingPlan {
  int warmup = 2;
  int min_reps = 5;
  int max_reps = 20;
  double target_rep_s = 2e-3;    // batch small operations to about this much per repetition
  int max_inner = 500;
  double target_total_s = 0.15;  // timed device time per measurement
};

// Times `launch` (which enqueues one operation on every stream of `devs`): warm-up, one trial
// for the batch size, then repetitions of `inner` operations between per-device CUDA events.
// A repetition's time is the slowest device's; the result is per operation.
Measured time_on(const std::vector<int>& devs, const std::vector<cudaStream_t>& streams,
                 const std::function<std::string()>& launch, const TimingPlan& plan, const Budget& budget) {
  Measured m;
  const size_t n = devs.size();
  std::vector<cudaEvent_t> start(n, nullptr), stop(n, nullptr);
  auto cleanup = [&] {
    for (size_t i = 0; i < n; ++i) {
      cudaSetDevice(devs[i]);
      if (start[i]) cudaEventDestroy(start[i]);
      if (stop[i]) cudaEventDestroy(stop[i]);
    }
  };
  auto sync_all = [&]() -> std::string {
    for (size_t i = 0; i < n; ++i) {
      cudaSetDevice(devs[i]);
      const std::string e = cuda_error(cudaStreamSynchronize(streams[i]), "cudaStreamSynchronize");
      if (!e.empty()) return e;
    }
    return "";
  };
  for (size_t i = 0; i < n; ++i) {
    cudaSetDevice(devs[i]);
    m.error = cuda_error(cudaEventCreate(&start[i]), "cudaEventCreate");
    if (m.error.empty()) m.error = cuda_error(cudaEventCreate(&stop[i]), "cudaEventCreate");
    if (!m.error.empty()) return cleanup(), m;
  }
  // One batch of `inner` operations; returns the slowest device's event time.
  auto batch = [&](int inner, double* seconds) -> std::string {
    for (size_t i = 0; i < n; ++i) {
      cudaSetDevice(devs[i]);
      HARNESS_TRY_CUDA(cudaEventRecord(start[i], streams[i]));
    }
    for (int k = 0; k < inner; ++k) {
      const std::string e = launch();
      if (!e.empty()) return e;
    }
    for (size_t i = 0; i < n; ++i) {
      cudaSetDevice(devs[i]);
      HARNESS_TRY_CUDA(cudaEventRecord(stop[i], streams[i]));
    }
    const std::string e = sync_all();
    if (!e.empty()) return e;
    double worst = 0;
    for (size_t i = 0; i < n; ++i) {
      float ms = 0;
      HARNESS_TRY_CUDA(cudaEventElapsedTime(&ms, start[i], stop[i]));
      worst = std::max(worst, 1e-3 * ms);
    }
    *seconds = worst;
    return "";
  };
  for (int w = 0; w < plan.warmup && m.error.empty(); ++w) {
    m.error = launch();
    if (m.error.empty()) m.error = sync_all();
  }
  double trial = 0;
  if (m.error.empty()) m.error = batch(1, &trial);
  if (!m.error.empty()) return cleanup(), m;
  trial = std::max(trial, 1e-7);
  m.inner = std::clamp(int(std::ceil(plan.target_rep_s / trial)), 1, plan.max_inner);
  const double rep_s = trial * m.inner;
  m.reps = std::clamp(int(plan.target_total_s / rep_s), plan.min_reps, plan.max_reps);
  std::vector<double> times;
  for (int r = 0; r < m.reps; ++r) {
    // At least three repetitions; after that, stop at the budget.
    if (r >= 3 && !budget.allows(rep_s * 1.5)) break;
    double s = 0;
    m.error = batch(m.inner, &s);
    if (!m.error.empty()) return cleanup(), m;
    times.push_back(s / m.inner);
  }
  cleanup();
  std::sort(times.begin(), times.end());
  m.reps = int(times.size());
  m.median_s = times[times.size() / 2];
  if (times.size() % 2 == 0) m.median_s = 0.5 * (times[times.size() / 2 - 1] + times[times.size() / 2]);
  m.min_s = times.front();
  m.max_s = times.back();
  return m;
}

void add_measured(JsonObject& row, const Measured& m, double bytes, double busbw_factor) {
  if (!m.error.empty()) {
    row.str("error", m.error);
    return;
  }
  row.num("time_s", m.median_s).num("min_s", m.min_s).num("max_s", m.max_s);
  row.integer("reps", m.reps).integer("inner", m.inner);
  const double algbw = bytes / m.median_s / 1e9;
  row.num("algbw_gbps", algbw).num("busbw_gbps", algbw * busbw_factor);
}

// Predicted wall time of one measurement of an operation taking op_s (for the budget checks).
double predict_s(double op_s, const TimingPlan& plan) {
  const int inner = std::clamp(int(std::ceil(plan.target_rep_s / std::max(op_s, 1e-7))), 1, plan.max_inner);
  const double rep = op_s * inner;
  const int reps = std::clamp(int(plan.target_total_s / rep), plan.min_reps, plan.max_reps);
  return op_s * (plan.warmup + 1) + rep * reps + 2e-3;
}

std::vector<size_t> sizes_up_to(size_t max_bytes, bool quick, size_t step_factor) {
  std::vector<size_t> out;
  if (quick) {
    for (size_t b : {size_t(8), size_t(64) << 10, size_t(1) << 20, size_t(16) << 20, size_t(256) << 20})
      if (b <= max_bytes) out.push_back(b);
    return out;
  }
  for (size_t b = 8; b <= max_bytes; b *= step_factor) out.push_back(b);
  return out;
}

// ---------------------------------------------------------------------------
// P2P
// ---------------------------------------------------------------------------

// Copies 16-byte words (and the tail bytes) from src to dst; dst may be a peer's memory.
__global__ void copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t words,
                            const unsigned char* __restrict__ src_tail, unsigned char* __restrict__ dst_tail,
                            size_t tail) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < words; i += stride) dst[i] = src[i];
  if (blockIdx.x == 0 && threadIdx.x < tail) dst_tail[threadIdx.x] = src_tail[threadIdx.x];
}

std::string launch_copy(const void* src, void* dst, size_t bytes, int sms, cudaStream_t s) {
  const size_t words = bytes / 16, tail = bytes % 16;
  const int threads = 512;
  const unsigned blocks =
      unsigned(std::max<size_t>(1, std::min<size_t>((words + threads - 1) / threads, size_t(sms) * 4)));
  copy_kernel<<<blocks, threads, 0, s>>>(static_cast<const uint4*>(src), static_cast<uint4*>(dst), words,
                                         static_cast<const unsigned char*>(src) + words * 16,
                                         static_cast<unsigned char*>(dst) + words * 16, tail);
  return cuda_error(cudaGetLastError(), "copy_kernel launch");
}

struct Gpu {
  int dev = 0;
  int sms = 0;
  cudaStream_t stream = nullptr;
  DeviceBuffer a, b;
};

void run_p2p(Document& doc, const Options& o, std::vector<Gpu>& gpus, const std::vector<std::vector<std::string>>& cls,
             const Budget& budget, const std::function<void()>& save) {
  const int n = int(gpus.size());
  // Short measurements: 56 pairs x 2 methods on 8 GPUs must fit in about a minute.
  TimingPlan plan;
  plan.min_reps = 3;
  plan.max_reps = 10;
  plan.target_rep_s = 1e-3;
  plan.target_total_s = 0.03;
  // From GPU 0 every 4x in size (8 B .. 256 MiB), from the others every 16x.
  size_t cap = std::min(o.max_bytes, size_t(256) << 20);
  for (auto& g : gpus) {
    size_t free_b = 0, total_b = 0;
    cudaSetDevice(g.dev);
    cudaMemGetInfo(&free_b, &total_b);
    while (cap > 8 && 2 * cap > free_b / 2) cap /= 2;
  }
  std::string err;
  for (auto& g : gpus) {
    cudaSetDevice(g.dev);
    if (err.empty()) err = g.a.allocate(cap);
    if (err.empty()) err = g.b.allocate(cap);
    if (err.empty()) err = fill_random(g.a.get(), cap / 4, DType::FP32, uint64_t(g.dev) + 1, g.stream);
    if (err.empty()) err = cuda_error(cudaStreamSynchronize(g.stream), "fill");
  }
  if (!err.empty()) {
    doc.note("p2p: buffers: " + err);
    return;
  }
  const std::vector<size_t> dense = sizes_up_to(cap, o.quick, 4), sparse = sizes_up_to(cap, o.quick, 16);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      int can = 0;
      cudaDeviceCanAccessPeer(&can, gpus[size_t(i)].dev, gpus[size_t(j)].dev);
      if (can) {
        cudaSetDevice(gpus[size_t(i)].dev);
        const cudaError_t e = cudaDeviceEnablePeerAccess(gpus[size_t(j)].dev, 0);
        if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
          doc.note(strprintf("p2p: enabling peer access %d -> %d: %s", i, j, cudaGetErrorString(e)));
        cudaGetLastError();
      }
    }
  int skipped = 0;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      Gpu& src = gpus[size_t(i)];
      Gpu& dst = gpus[size_t(j)];
      int can = 0;
      if (i != j) cudaDeviceCanAccessPeer(&can, src.dev, dst.dev);
      const bool local = i == j;
      // memcpy: cudaMemcpyPeerAsync (staged through the host without peer access); kernel: a copy
      // kernel on src storing into dst's memory (needs peer access).
      for (const char* method : {"memcpy", "kernel"}) {
        const bool kernel = std::strcmp(method, "kernel") == 0;
        if (kernel && !local && !can) continue;
        for (size_t bytes : i == 0 ? dense : sparse) {
          const double guess = 5e-6 + double(bytes) / (local ? 1e12 : can ? 1e11 : 1e10);
          if (!budget.allows(predict_s(guess, plan))) {
            ++skipped;
            continue;
          }
          cudaSetDevice(src.dev);
          auto launch = [&]() -> std::string {
            if (kernel) return launch_copy(src.a.get(), dst.b.get(), bytes, src.sms, src.stream);
            if (local) return cuda_error(cudaMemcpyAsync(dst.b.get(), src.a.get(), bytes, cudaMemcpyDeviceToDevice, src.stream),
                                         "cudaMemcpyAsync");
            return cuda_error(cudaMemcpyPeerAsync(dst.b.get(), dst.dev, src.a.get(), src.dev, bytes, src.stream),
                              "cudaMemcpyPeerAsync");
          };
          const Measured m = time_on({src.dev}, {src.stream}, launch, plan, budget);
          JsonObject row;
          row.integer("src", i).integer("dst", j).str("link", cls[size_t(i)][size_t(j)]).boolean("peer_access", local || can);
          row.str("method", method).integer("bytes", int64_t(bytes));
          add_measured(row, m, double(bytes), 1.0);
          doc.p2p(row);
        }
      }
      save();
    }
  if (skipped) doc.note(strprintf("p2p: %d measurements not started (budget)", skipped));
  for (auto& g : gpus) {
    cudaSetDevice(g.dev);
    g.a.reset();
    g.b.reset();
  }
}

// ---------------------------------------------------------------------------
// Collectives
// ---------------------------------------------------------------------------

enum class Op { all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send_recv };

const char* op_name(Op op) {
  switch (op) {
    case Op::all_reduce: return "all_reduce";
    case Op::all_gather: return "all_gather";
    case Op::reduce_scatter: return "reduce_scatter";
    case Op::all_to_all: return "all_to_all";
    case Op::broadcast: return "broadcast";
    case Op::send_recv: return "send_recv";
  }
  return "?";
}

// nccl-tests' bus bandwidth factors (1 for a single rank, as the simulator reports it).
double busbw_factor(Op op, int n) {
  if (n <= 1) return 1;
  switch (op) {
    case Op::all_reduce: return 2.0 * (n - 1) / n;
    case Op::all_gather:
    case Op::reduce_scatter:
    case Op::all_to_all: return double(n - 1) / n;
    case Op::broadcast:
    case Op::send_recv: return 1;
  }
  return 1;
}

std::string nccl_error(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return "";
  return std::string(what) + ": " + ncclGetErrorString(r);
}

#define LINKS_TRY_NCCL(expr)                                    \
  do {                                                          \
    ncclResult_t links_r_ = (expr);                             \
    if (links_r_ != ncclSuccess) return nccl_error(links_r_, #expr); \
  } while (0)

// One communicator over a group of GPUs (one rank per GPU), created under an NCCL_ALGO setting.
struct Group {
  std::vector<int> devs;          // CUDA devices, rank order
  std::vector<Gpu*> gpus;
  std::vector<ncclComm_t> comms;
  ~Group() {
    for (ncclComm_t c : comms)
      if (c) ncclCommDestroy(c);
  }
};

// Creates the communicators with NCCL_ALGO set to `algo` ("" leaves NCCL to choose); NCCL reads
// the variable when it tunes a new communicator.
std::string init_group(Group& g, const std::string& algo) {
  const char* before = getenv("NCCL_ALGO");
  const std::string saved = before ? before : "";
  if (algo.empty()) unsetenv("NCCL_ALGO");
  else setenv("NCCL_ALGO", algo.c_str(), 1);
  g.comms.assign(g.devs.size(), nullptr);
  const ncclResult_t r = ncclCommInitAll(g.comms.data(), int(g.devs.size()), g.devs.data());
  if (before) setenv("NCCL_ALGO", saved.c_str(), 1);
  else unsetenv("NCCL_ALGO");
  if (r != ncclSuccess) {
    g.comms.clear();
    return nccl_error(r, "ncclCommInitAll");
  }
  return "";
}

// Elements of float per rank for an operation of `bytes` as nccl-tests counts it; 0: too small.
size_t count_for(Op op, size_t bytes, int n) {
  const size_t elems = bytes / 4;
  switch (op) {
    case Op::all_reduce:
    case Op::broadcast:
    case Op::send_recv: return elems;
    case Op::all_gather:       // per-rank input; bytes is the gathered output
    case Op::reduce_scatter:   // per-rank output; bytes is the input
    case Op::all_to_all: return elems / size_t(n);  // per-peer chunk; bytes is the send buffer
  }
  return 0;
}

// The bytes the row reports for a count (the size rounded to whole elements).
size_t bytes_for(Op op, size_t count, int n) {
  switch (op) {
    case Op::all_reduce:
    case Op::broadcast:
    case Op::send_recv: return count * 4;
    default: return count * 4 * size_t(n);
  }
}

std::string launch_op(Group& g, Op op, size_t count) {
  const int n = int(g.devs.size());
  LINKS_TRY_NCCL(ncclGroupStart());
  for (int r = 0; r < n; ++r) {
    Gpu& gpu = *g.gpus[size_t(r)];
    const float* send = gpu.a.as<float>();
    float* recv = gpu.b.as<float>();
    cudaStream_t s = gpu.stream;
    ncclComm_t c = g.comms[size_t(r)];
    ncclResult_t res = ncclSuccess;
    switch (op) {
      case Op::all_reduce: res = ncclAllReduce(send, recv, count, ncclFloat, ncclSum, c, s); break;
      case Op::all_gather: res = ncclAllGather(send, recv, count, ncclFloat, c, s); break;
      case Op::reduce_scatter: res = ncclReduceScatter(send, recv, count, ncclFloat, ncclSum, c, s); break;
      case Op::broadcast: res = ncclBroadcast(send, recv, count, ncclFloat, 0, c, s); break;
      case Op::all_to_all:
        for (int p = 0; p < n && res == ncclSuccess; ++p) {
          res = ncclSend(send + size_t(p) * count, count, ncclFloat, p, c, s);
          if (res == ncclSuccess) res = ncclRecv(recv + size_t(p) * count, count, ncclFloat, p, c, s);
        }
        break;
      case Op::send_recv:
        res = ncclSend(send, count, ncclFloat, (r + 1) % n, c, s);
        if (res == ncclSuccess) res = ncclRecv(recv, count, ncclFloat, (r - 1 + n) % n, c, s);
        break;
    }
    if (res != ncclSuccess) {
      ncclGroupEnd();
      return nccl_error(res, op_name(op));
    }
  }
  LINKS_TRY_NCCL(ncclGroupEnd());
  return "";
}

// A guess of an operation's time, for budget checks only (H200-like NVLink, pessimistic).
double guess_s(Op op, size_t bytes, int n) {
  return 30e-6 + 2.5 * double(bytes) / 100e9 * (op == Op::all_reduce ? 2.0 : 1.0) * (n > 1 ? 1.0 : 0.2);
}

struct Series {
  std::vector<int> ranks;  // positions in the machine's GPU list
  std::string algo;        // "" (auto), "Ring", "Tree"
  std::vector<Op> ops;
  std::string label;
};

void run_series(Document& doc, const Options& o, std::vector<Gpu>& gpus, const Series& se, size_t max_bytes,
                double deadline, int* skipped) {
  Group g;
  for (int r : se.ranks) {
    g.devs.push_back(gpus[size_t(r)].dev);
    g.gpus.push_back(&gpus[size_t(r)]);
  }
  const int n = int(se.ranks.size());
  std::string ranks_json = "[";
  for (size_t i = 0; i < se.ranks.size(); ++i) ranks_json += (i ? "," : "") + std::to_string(se.ranks[i]);
  ranks_json += "]";
  const std::string algo_label = se.algo.empty() ? "auto" : se.algo == "Ring" ? "ring" : "tree";
  const double t0 = now_s();
  const std::string err = init_group(g, se.algo);
  log_msg("%s: communicator of %d rank(s) in %.2f s%s%s", se.label.c_str(), n, now_s() - t0, err.empty() ? "" : ": ",
          err.c_str());
  if (!err.empty()) {
    JsonObject row;
    row.str("op", op_name(se.ops.front())).raw("ranks", ranks_json).str("algorithm", algo_label).str("error", err);
    doc.collective(row);
    return;
  }
  // Enough repetitions for a median, few enough that the large sizes fit in the series' share.
  TimingPlan plan;
  plan.min_reps = 5;
  plan.max_reps = 15;
  plan.target_total_s = 0.05;
  const Budget budget(deadline);
  // Small sizes first; a series stops at the first size whose predicted time no longer fits.
  const std::vector<size_t> sizes = sizes_up_to(max_bytes, o.quick || n == 1, 2);
  for (Op op : se.ops) {
    for (size_t bytes : sizes) {
      const size_t count = count_for(op, bytes, n);
      if (count == 0) continue;
      const size_t actual = bytes_for(op, count, n);
      if (!budget.allows(predict_s(guess_s(op, actual, n), plan))) {
        ++*skipped;
        continue;
      }
      const Measured m = time_on(g.devs, [&] {
        std::vector<cudaStream_t> s;
        for (Gpu* x : g.gpus) s.push_back(x->stream);
        return s;
      }(), [&] { return launch_op(g, op, count); }, plan, budget);
      JsonObject row;
      row.str("op", op_name(op)).raw("ranks", ranks_json).str("algorithm", algo_label).integer("bytes", int64_t(actual));
      add_measured(row, m, double(actual), busbw_factor(op, n));
      doc.collective(row);
      if (!m.error.empty()) {
        log_msg("%s %s %zu B: %s (series stopped)", se.label.c_str(), op_name(op), actual, m.error.c_str());
        break;
      }
    }
  }
}

void run_collectives(Document& doc, const Options& o, std::vector<Gpu>& gpus, double deadline,
                     const std::function<void()>& save) {
  const int total = int(gpus.size());
  // Buffers: a send and a receive buffer of the largest message per GPU (out-of-place), at most
  // 40 % of the free memory for each.
  size_t max_bytes = o.max_bytes;
  for (auto& g : gpus) {
    size_t free_b = 0, total_b = 0;
    cudaSetDevice(g.dev);
    cudaMemGetInfo(&free_b, &total_b);
    while (max_bytes > 8 && double(max_bytes) > 0.4 * double(free_b)) max_bytes /= 2;
  }
  if (max_bytes < o.max_bytes)
    doc.note(strprintf("collectives: largest message %zu B (free GPU memory), not %zu B", max_bytes, o.max_bytes));
  std::string err;
  for (auto& g : gpus) {
    cudaSetDevice(g.dev);
    if (err.empty()) err = g.a.allocate(max_bytes);
    if (err.empty()) err = g.b.allocate(max_bytes);
    if (err.empty()) err = fill_random(g.a.get(), max_bytes / 4, DType::FP32, uint64_t(g.dev) + 7, g.stream);
    if (err.empty()) err = cuda_error(cudaStreamSynchronize(g.stream), "fill");
  }
  if (!err.empty()) {
    doc.note("collectives: buffers: " + err);
    return;
  }
  const std::vector<Op> all_ops = {Op::all_reduce, Op::all_gather, Op::reduce_scatter,
                                   Op::all_to_all, Op::broadcast,  Op::send_recv};
  std::vector<Series> plan;
  auto first = [](int n) {
    std::vector<int> r;
    for (int i = 0; i < n; ++i) r.push_back(i);
    return r;
  };
  if (total == 1) {
    doc.note("one GPU: collectives over 1 rank are local copies inside NCCL, measured as a smoke test only "
             "(the link fit ignores them)");
    plan.push_back({first(1), "", all_ops, "1 rank"});
  } else {
    std::vector<int> sizes = o.groups;
    if (sizes.empty()) {
      sizes.push_back(total);  // the whole machine first: the most useful series
      for (int n = 2; n < total; n *= 2) sizes.push_back(n);
    }
    for (int n : sizes) {
      if (n > total) {
        doc.note(strprintf("collectives: group of %d skipped (%d GPUs visible)", n, total));
        continue;
      }
      const std::string label = strprintf("%d ranks", n);
      plan.push_back({first(n), "", all_ops, label + ", auto"});
      if (n > 1) {
        plan.push_back({first(n), "Ring", {Op::all_reduce}, label + ", NCCL_ALGO=Ring"});
        plan.push_back({first(n), "Tree", {Op::all_reduce}, label + ", NCCL_ALGO=Tree"});
      }
    }
    // Every link from GPU 0 on its own (PCIe machines with NVLink pairs differ per pair).
    if (!o.quick)
      for (int j = 2; j < total; ++j) plan.push_back({{0, j}, "", {Op::send_recv}, strprintf("pair 0-%d", j)});
  }
  int skipped = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    // Each series gets an equal share of the time left.
    const double share = (deadline - now_s()) / double(plan.size() - i);
    if (share <= 0.5) {
      doc.note("collectives: series \"" + plan[i].label + "\" not started (budget)");
      continue;
    }
    log_msg("series %zu/%zu: %s", i + 1, plan.size(), plan[i].label.c_str());
    run_series(doc, o, gpus, plan[i], max_bytes, now_s() + share, &skipped);
    save();
  }
  if (skipped) doc.note(strprintf("collectives: %d sizes not started (budget)", skipped));
}

std::atomic<bool> g_done{false};

int links_main(int argc, char** argv) {
  Options o;
  if (!parse_args(argc, argv, &o)) {
    usage();
    return 2;
  }
  set_log_prefix("links");
  const double t_start = now_s();
  // Before anything touches NCCL: no NVLink SHARP, no multi-node NVLink, no CollNet.
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  setenv("NCCL_MNNVL_ENABLE", "0", 1);
  setenv("NCCL_COLLNET_ENABLE", "0", 1);

  Document doc;
  doc.header("schema", json_escape(kSchema));
  doc.header("kind", json_escape("links"));
  doc.header("harness", json_escape(std::string("scaleout-links ") + kVersion));
  doc.header("args", json_escape(o.args));
  doc.header("date", json_escape(iso8601_utc()));
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  doc.header("host", json_escape(host));
  doc.header("budget_s", json_number(o.budget_s));
  doc.header("quick", o.quick ? "true" : "false");

  int count = 0;
  const std::string count_err = cuda_error(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (!count_err.empty() || count < 1) {
    fprintf(stderr, "no CUDA device: %s\n", count_err.c_str());
    return 1;
  }
  std::vector<Gpu> gpus(static_cast<size_t>(count));
  std::string names = "[", buses = "[";
  size_t memory = 0;
  std::string first_name;
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp p{};
    cudaGetDeviceProperties(&p, d);
    char bus[32] = {0};
    cudaDeviceGetPCIBusId(bus, sizeof bus, d);
    names += (d ? "," : "") + json_escape(p.name);
    buses += (d ? "," : "") + json_escape(bus);
    if (d == 0) first_name = p.name, memory = p.totalGlobalMem;
    gpus[size_t(d)].dev = d;
    gpus[size_t(d)].sms = p.multiProcessorCount;
    cudaSetDevice(d);
    const std::string e = cuda_error(cudaStreamCreateWithFlags(&gpus[size_t(d)].stream, cudaStreamNonBlocking),
                                     "cudaStreamCreate");
    if (!e.empty()) {
      fprintf(stderr, "device %d: %s\n", d, e.c_str());
      return 1;
    }
  }
  JsonObject gpu;
  gpu.str("name", first_name).integer("count", count).integer("memory_bytes", int64_t(memory));
  gpu.raw("names", names + "]").raw("pci_bus_ids", buses + "]");
  doc.header("gpu", gpu.render());
  int driver = 0, runtime = 0, nccl = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  ncclGetVersion(&nccl);
  const std::string smi_driver =
      trim(run_command("nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1"));
  doc.header("driver", json_escape(smi_driver.empty() ? "unknown" : smi_driver));
  doc.header("cuda_driver_api", std::to_string(driver));
  doc.header("cuda_runtime", std::to_string(runtime));
  doc.header("nccl_version", json_escape(strprintf("%d.%d.%d", nccl / 10000, nccl % 10000 / 100, nccl % 100)));
  JsonObject env;
  for (const char* k : {"NCCL_NVLS_ENABLE", "NCCL_MNNVL_ENABLE", "NCCL_COLLNET_ENABLE", "NCCL_ALGO", "NCCL_PROTO",
                        "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "CUDA_VISIBLE_DEVICES"}) {
    const char* v = getenv(k);
    if (v) env.str(k, v);
    else env.null(k);
  }
  doc.header("env", env.render());
  std::string topo;
  if (!o.topo_file.empty()) {
    bool ok = false;
    topo = read_file(o.topo_file, &ok);
    if (!ok) doc.note("--topo-file " + o.topo_file + ": cannot read it");
  } else {
    topo = run_command("nvidia-smi topo -m 2>&1");
  }
  const auto cls = link_classes(topo, count);
  std::string matrix = "[";
  for (int i = 0; i < count; ++i) {
    matrix += i ? ",[" : "[";
    for (int j = 0; j < count; ++j) matrix += (j ? "," : "") + json_escape(cls[size_t(i)][size_t(j)]);
    matrix += "]";
  }
  JsonObject t;
  t.str("nvidia_smi_topo_m", topo).raw("link_classes", matrix + "]");
  doc.header("topology", t.render());
  log_msg("%d x %s, driver %s, NCCL %d, budget %.0f s%s", count, first_name.c_str(), smi_driver.c_str(), nccl,
          o.budget_s, o.quick ? " (quick)" : "");

  const double deadline = t_start + o.budget_s;
  auto save = [&] {
    if (!doc.write(o.out, now_s() - t_start, false)) log_msg("cannot write %s", o.out.c_str());
  };
  save();
  std::thread watchdog([&] {
    while (!g_done.load()) {
      if (now_s() > deadline + kWatchdogGraceS) {
        doc.note(strprintf("watchdog: the run overran its budget by %.0f s (a hung call?); stopped", kWatchdogGraceS));
        doc.write(o.out, now_s() - t_start, false);
        fflush(stderr);
        _exit(3);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });

  if (o.p2p) {
    // The P2P matrix gets a quarter of the budget at most (half with one GPU).
    const Budget p2p_budget(t_start + o.budget_s * (count == 1 ? 0.5 : 0.25));
    log_msg("p2p matrix %dx%d", count, count);
    run_p2p(doc, o, gpus, cls, p2p_budget, save);
  }
  if (o.collectives) run_collectives(doc, o, gpus, deadline, save);

  g_done = true;
  watchdog.join();
  const bool ok = doc.write(o.out, now_s() - t_start, true);
  log_msg("%zu rows in %.1f s -> %s", doc.rows(), now_s() - t_start, o.out.c_str());
  for (auto& g : gpus) {
    cudaSetDevice(g.dev);
    cudaStreamDestroy(g.stream);
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace harness

int main(int argc, char** argv) { return harness::links_main(argc, argv); }
