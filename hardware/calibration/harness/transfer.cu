// PCIe and launch-overhead phases.
//
// PCIe: synchronous cudaMemcpy host<->device timed with the host clock (what a
// framework sees for a blocking copy, driver overhead included), from pinned
// (cudaMallocHost) and pageable (malloc, pages touched beforehand) memory.
//
// Launch: an empty kernel launched back to back (per-launch GPU time over a
// stream of launches, and the host cost of one launch call), the same kernel as
// nodes of a CUDA graph, the launch of a one-kernel graph, and the round trip
// of launch + cudaStreamSynchronize.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "phases.h"

namespace harness {
namespace {

__global__ void empty_kernel() {}

std::vector<size_t> pcie_sizes(bool quick) {
  if (quick) return {64ull << 10, 16ull << 20, 256ull << 20};
  std::vector<size_t> s;
  for (size_t b = 4ull << 10; b <= (1ull << 30); b *= 4) s.push_back(b);  // 4 KiB .. 1 GiB
  return s;
}

double predict_copy_s(size_t bytes, bool pinned) { return 10e-6 + bytes / (pinned ? 45e9 : 10e9); }

// Pageable buffers: malloc'd and touched so page faults stay out of the timings.
struct HostBuffer {
  void* ptr = nullptr;
  bool pinned = false;
  ~HostBuffer() {
    if (!ptr) return;
    if (pinned)
      cudaFreeHost(ptr);
    else
      free(ptr);
  }
  std::string allocate(size_t bytes, bool pin) {
    pinned = pin;
    if (pin) {
      HARNESS_TRY_CUDA(cudaMallocHost(&ptr, bytes));
    } else {
      ptr = malloc(bytes);
      if (!ptr) return "malloc failed";
    }
    // Non-zero bytes, every page touched.
    unsigned char* p = static_cast<unsigned char*>(ptr);
    for (size_t i = 0; i < bytes; i += 4096) p[i] = static_cast<unsigned char>(i * 2654435761u >> 24);
    memset(p, 0x5a, std::min<size_t>(bytes, 1 << 20));
    return "";
  }
};

}  // namespace

PlanSummary plan_pcie(bool quick) {
  PlanSummary s;
  for (size_t b : pcie_sizes(quick))
    for (bool pinned : {true, false})
      for (int dir = 0; dir < 2; ++dir) {
        ++s.entries;
        const double op = predict_copy_s(b, pinned);
        const int reps = std::max(3, std::min(quick ? 10 : 20, static_cast<int>(0.1 / op)));
        s.predicted_s += op * (reps + 2) + 1e-3;
      }
  s.predicted_s += 1.5;  // 2 GiB of host buffers to allocate and touch
  return s;
}

void run_pcie_phase(PhaseContext& ctx) {
  const std::vector<size_t> sizes = pcie_sizes(ctx.quick);
  const size_t max_bytes = sizes.back();
  DeviceBuffer dev;
  std::string err = dev.allocate(max_bytes);
  if (err.empty()) err = fill_random(dev.get(), max_bytes / 2, DType::BF16, 3, ctx.stream);
  if (err.empty()) err = cuda_error(cudaStreamSynchronize(ctx.stream), "fill sync");
  if (!err.empty()) {
    JsonObject e;
    e.str("kind", "pcie").str("error", "device buffer: " + err);
    ctx.emit(e);
    return;
  }
  for (bool pinned : {true, false}) {
    HostBuffer host;
    err = host.allocate(max_bytes, pinned);
    if (!err.empty()) {
      JsonObject e;
      e.str("kind", "pcie").str("memory", pinned ? "pinned" : "pageable").str("error", "host buffer: " + err);
      ctx.emit(e);
      continue;
    }
    for (size_t bytes : sizes) {
      for (int dir = 0; dir < 2; ++dir) {
        if (ctx.broken) return;
        const bool h2d = dir == 0;
        const double op = predict_copy_s(bytes, pinned);
        if (!ctx.budget.allows(op * 12 + 0.05)) {
          ctx.skip();
          continue;
        }
        JsonObject e;
        e.str("kind", "pcie").str("direction", h2d ? "h2d" : "d2h").str("memory", pinned ? "pinned" : "pageable");
        e.integer("bytes", static_cast<int64_t>(bytes)).str("timer", "host");
        void* dptr = dev.get();
        void* hptr = host.ptr;
        HostFn fn = [=]() -> std::string {
          cudaError_t ce = h2d ? cudaMemcpy(dptr, hptr, bytes, cudaMemcpyHostToDevice)
                               : cudaMemcpy(hptr, dptr, bytes, cudaMemcpyDeviceToHost);
          return cuda_error(ce, "cudaMemcpy");
        };
        const Timing t = time_host(fn, 2, ctx.quick ? 3 : 10, ctx.quick ? 10 : 20, 0.1, 1.0, ctx.budget);
        add_timing(e, t);
        if (t.ok) e.num("gbps", static_cast<double>(bytes) / t.median_s / 1e9);
        ctx.emit(e);
        if (t.ok)
          log_msg("%s %s %zu B: %.4f ms %.2f GB/s", h2d ? "h2d" : "d2h", pinned ? "pinned" : "pageable", bytes,
               t.median_s * 1e3, bytes / t.median_s / 1e9);
        else
          log_msg("%s %s %zu B: %s", h2d ? "h2d" : "d2h", pinned ? "pinned" : "pageable", bytes, t.error.c_str());
      }
    }
  }
}

PlanSummary plan_launch(bool quick) {
  PlanSummary s;
  s.entries = 6;
  s.predicted_s = quick ? 0.5 : 1.5;
  return s;
}

namespace {

struct EventPair {
  cudaEvent_t a = nullptr, b = nullptr;
  ~EventPair() {
    if (a) cudaEventDestroy(a);
    if (b) cudaEventDestroy(b);
  }
  std::string create() {
    HARNESS_TRY_CUDA(cudaEventCreate(&a));
    HARNESS_TRY_CUDA(cudaEventCreate(&b));
    return "";
  }
  // Milliseconds between a and b once b has completed.
  std::string elapsed_s(double* out) {
    HARNESS_TRY_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    HARNESS_TRY_CUDA(cudaEventElapsedTime(&ms, a, b));
    *out = 1e-3 * ms;
    return "";
  }
};

struct Stats {
  double median = 0, min = 0;
};

Stats stats_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  Stats s;
  s.min = v.front();
  s.median = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  return s;
}

void emit_launch(PhaseContext& ctx, const char* what, const std::string& err, const std::vector<double>& per_op,
                 int64_t iters, const char* timer, const char* note) {
  JsonObject e;
  e.str("kind", "launch").str("what", what).str("timer", timer);
  if (err.empty() && !per_op.empty()) {
    const Stats s = stats_of(per_op);
    e.num("time_s", s.median).num("min_s", s.min).integer("iters", iters).integer("reps", (int64_t)per_op.size());
    log_msg("%s: %.3f us", what, s.median * 1e6);
  } else {
    e.null("time_s").str("error", err.empty() ? "no data" : err);
    log_msg("%s: %s", what, err.c_str());
  }
  e.str("note", note);
  ctx.emit(e);
}

}  // namespace

void run_launch_phase(PhaseContext& ctx) {
  cudaStream_t s = ctx.stream;
  const int n_launch = ctx.quick ? 2000 : 10000;
  const int reps = ctx.quick ? 3 : 5;
  // Warm-up: module load and first-launch costs.
  for (int i = 0; i < 100; ++i) empty_kernel<<<1, 1, 0, s>>>();
  cudaStreamSynchronize(s);
  cudaGetLastError();

  // 1. Back-to-back launches: GPU time per launch (events) and host time per launch call.
  {
    std::vector<double> gpu, host;
    std::string err;
    for (int r = 0; r < reps && err.empty(); ++r) {
      EventPair ev;
      err = ev.create();
      if (!err.empty()) break;
      cudaEventRecord(ev.a, s);
      const double t0 = now_s();
      for (int i = 0; i < n_launch; ++i) empty_kernel<<<1, 1, 0, s>>>();
      const double t1 = now_s();
      cudaEventRecord(ev.b, s);
      err = cuda_error(cudaGetLastError(), "empty_kernel launch");
      double el = 0;
      if (err.empty()) err = ev.elapsed_s(&el);
      if (err.empty()) {
        gpu.push_back(el / n_launch);
        host.push_back((t1 - t0) / n_launch);
      }
    }
    emit_launch(ctx, "empty_kernel", err, gpu, (int64_t)n_launch * reps, "events",
                "per launch, from a stream of back-to-back launches of an empty <<<1,1>>> kernel");
    emit_launch(ctx, "launch_call", err, host, (int64_t)n_launch * reps, "host",
                "host time of one <<<>>> launch call while enqueueing back-to-back launches");
  }
  if (ctx.broken) return;

  // 2. The same kernel as 1000 nodes of one graph: per-node time on replay.
  {
    const int nodes = 1000, launches = ctx.quick ? 3 : 10;
    std::vector<double> per;
    std::string err;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    err = cuda_error(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    if (err.empty()) {
      for (int i = 0; i < nodes; ++i) empty_kernel<<<1, 1, 0, s>>>();
      err = cuda_error(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture");
    }
    if (err.empty()) err = cuda_error(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    if (err.empty()) err = cuda_error(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
    if (err.empty()) err = cuda_error(cudaStreamSynchronize(s), "sync");
    for (int r = 0; r < reps && err.empty(); ++r) {
      EventPair ev;
      err = ev.create();
      if (!err.empty()) break;
      cudaEventRecord(ev.a, s);
      for (int i = 0; i < launches; ++i) cudaGraphLaunch(exec, s);
      cudaEventRecord(ev.b, s);
      double el = 0;
      err = ev.elapsed_s(&el);
      if (err.empty()) per.push_back(el / (static_cast<double>(nodes) * launches));
    }
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    emit_launch(ctx, "graph_kernel", err, per, (int64_t)nodes * launches * reps, "events",
                "per kernel node, replaying a captured graph of 1000 empty kernels");
  }
  if (ctx.broken) return;

  // 3. Launch of a graph holding one kernel: per-graph-launch time.
  {
    const int launches = ctx.quick ? 1000 : 5000;
    std::vector<double> per;
    std::string err;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    err = cuda_error(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    if (err.empty()) {
      empty_kernel<<<1, 1, 0, s>>>();
      err = cuda_error(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture");
    }
    if (err.empty()) err = cuda_error(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    if (err.empty()) err = cuda_error(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
    if (err.empty()) err = cuda_error(cudaStreamSynchronize(s), "sync");
    for (int r = 0; r < reps && err.empty(); ++r) {
      EventPair ev;
      err = ev.create();
      if (!err.empty()) break;
      cudaEventRecord(ev.a, s);
      for (int i = 0; i < launches; ++i) cudaGraphLaunch(exec, s);
      cudaEventRecord(ev.b, s);
      double el = 0;
      err = ev.elapsed_s(&el);
      if (err.empty()) per.push_back(el / launches);
    }
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    emit_launch(ctx, "graph_launch", err, per, (int64_t)launches * reps, "events",
                "per cudaGraphLaunch of a one-kernel graph, launched back to back");
  }
  if (ctx.broken) return;

  // 4. Round trip: launch an empty kernel and wait for it on the host.
  {
    const int n = ctx.quick ? 200 : 1000;
    std::vector<double> per, idle;
    std::string err;
    for (int r = 0; r < reps && err.empty(); ++r) {
      double t0 = now_s();
      for (int i = 0; i < n && err.empty(); ++i) {
        empty_kernel<<<1, 1, 0, s>>>();
        err = cuda_error(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      }
      per.push_back((now_s() - t0) / n);
      t0 = now_s();
      for (int i = 0; i < n && err.empty(); ++i) err = cuda_error(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      idle.push_back((now_s() - t0) / n);
    }
    emit_launch(ctx, "sync", err, per, (int64_t)n * reps, "host",
                "launch of an empty kernel + cudaStreamSynchronize, host round trip");
    emit_launch(ctx, "sync_idle", err, idle, (int64_t)n * reps, "host", "cudaStreamSynchronize on an idle stream");
  }
}

}  // namespace harness
