// Implementation of the shared harness utilities (see common.h).
#include "common.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <ctime>
#include <mutex>
#include <thread>

namespace harness {

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

double now_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::string cuda_error(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return "";
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  return std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
}

std::string strprintf(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string out;
  if (n > 0) {
    out.resize(static_cast<size_t>(n) + 1);
    vsnprintf(&out[0], out.size(), fmt, ap2);
    out.resize(static_cast<size_t>(n));
  }
  va_end(ap2);
  return out;
}

static std::string g_log_prefix = "harness";

void set_log_prefix(const std::string& prefix) { g_log_prefix = prefix; }

void log_msg(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char buf[1024];
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(stderr, "[%s] %s\n", g_log_prefix.c_str(), buf);
}

bool context_is_broken(std::string* why) {
  // A sticky error (illegal address, launch failure, ...) is reported by every
  // later call; a synchronize is the cheapest call that surfaces it.
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (why) *why = std::string("cudaDeviceSynchronize: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  return true;
}

// ---------------------------------------------------------------------------
// JSON
// ---------------------------------------------------------------------------

std::string json_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
  return out;
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[40];
  snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

JsonObject& JsonObject::str(const std::string& key, const std::string& value) {
  fields_.emplace_back(key, json_escape(value));
  return *this;
}
JsonObject& JsonObject::num(const std::string& key, double value) {
  fields_.emplace_back(key, json_number(value));
  return *this;
}
JsonObject& JsonObject::integer(const std::string& key, int64_t value) {
  fields_.emplace_back(key, std::to_string(value));
  return *this;
}
JsonObject& JsonObject::boolean(const std::string& key, bool value) {
  fields_.emplace_back(key, value ? "true" : "false");
  return *this;
}
JsonObject& JsonObject::null(const std::string& key) {
  fields_.emplace_back(key, "null");
  return *this;
}
JsonObject& JsonObject::raw(const std::string& key, const std::string& json) {
  fields_.emplace_back(key, json);
  return *this;
}
bool JsonObject::has(const std::string& key) const {
  for (const auto& f : fields_)
    if (f.first == key) return true;
  return false;
}
std::string JsonObject::render() const {
  std::string out = "{";
  bool first = true;
  for (const auto& f : fields_) {
    if (!first) out += ',';
    first = false;
    out += json_escape(f.first);
    out += ':';
    out += f.second;
  }
  out += '}';
  return out;
}

Sink::Sink(const std::string& path) { file_ = fopen(path.c_str(), "a"); }
Sink::~Sink() {
  if (file_) fclose(file_);
}
void Sink::emit(const JsonObject& object) {
  ++count_;
  if (!file_) return;
  std::string line = object.render();
  line += '\n';
  fwrite(line.data(), 1, line.size(), file_);
  fflush(file_);
}

// ---------------------------------------------------------------------------
// Device data
// ---------------------------------------------------------------------------

size_t dtype_size(DType t) {
  switch (t) {
    case DType::BF16: return 2;
    case DType::FP16: return 2;
    case DType::FP32: return 4;
    case DType::FP8_E4M3: return 1;
  }
  return 1;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::BF16: return "bf16";
    case DType::FP16: return "fp16";
    case DType::FP32: return "fp32";
    case DType::FP8_E4M3: return "fp8_e4m3";
  }
  return "?";
}

__device__ __forceinline__ uint32_t hash_u64(uint64_t x) {
  // splitmix64 finaliser: good enough to avoid any structure in the inputs.
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return static_cast<uint32_t>(x >> 32);
}

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16(v); }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half(v); }
template <> __device__ __forceinline__ __nv_fp8_e4m3 from_float<__nv_fp8_e4m3>(float v) { return __nv_fp8_e4m3(v); }

template <typename T>
__global__ void fill_kernel(T* __restrict__ p, size_t n, uint64_t seed, float lo, float span) {
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float u = static_cast<float>(hash_u64(seed * 0x100000001B3ull + i) >> 8) * (1.0f / 16777216.0f);
    p[i] = from_float<T>(lo + span * u);
  }
}

std::string fill_random(void* ptr, size_t count, DType type, uint64_t seed, cudaStream_t stream, float lo, float hi) {
  if (count == 0) return "";
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>(std::min<size_t>((count + threads - 1) / threads, 65536));
  const float span = hi - lo;
  switch (type) {
    case DType::BF16: fill_kernel<<<blocks, threads, 0, stream>>>(static_cast<__nv_bfloat16*>(ptr), count, seed, lo, span); break;
    case DType::FP16: fill_kernel<<<blocks, threads, 0, stream>>>(static_cast<__half*>(ptr), count, seed, lo, span); break;
    case DType::FP32: fill_kernel<<<blocks, threads, 0, stream>>>(static_cast<float*>(ptr), count, seed, lo, span); break;
    case DType::FP8_E4M3: fill_kernel<<<blocks, threads, 0, stream>>>(static_cast<__nv_fp8_e4m3*>(ptr), count, seed, lo, span); break;
  }
  return cuda_error(cudaGetLastError(), "fill_kernel launch");
}

std::string DeviceBuffer::allocate(size_t bytes) {
  reset();
  if (bytes == 0) return "";
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) return cuda_error(e, strprintf("cudaMalloc(%zu bytes)", bytes).c_str());
  ptr_ = p;
  bytes_ = bytes;
  return "";
}

void DeviceBuffer::reset() {
  if (ptr_) cudaFree(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
}

int rotation_sets(size_t working_set_bytes, size_t l2_bytes, int max_sets) {
  if (working_set_bytes == 0) return 1;
  const size_t target = 3 * (l2_bytes ? l2_bytes : (size_t)60 << 20);
  if (working_set_bytes >= target) return 1;
  size_t sets = (target + working_set_bytes - 1) / working_set_bytes;
  return static_cast<int>(std::min<size_t>(sets, static_cast<size_t>(max_sets)));
}

// ---------------------------------------------------------------------------
// Timing
// ---------------------------------------------------------------------------

namespace {

// RAII pair of vectors of events.
struct EventSet {
  std::vector<cudaEvent_t> events;
  ~EventSet() {
    for (cudaEvent_t e : events)
      if (e) cudaEventDestroy(e);
  }
  std::string create(size_t n) {
    events.assign(n, nullptr);
    for (auto& e : events) HARNESS_TRY_CUDA(cudaEventCreate(&e));
    return "";
  }
};

struct GraphHolder {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~GraphHolder() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
};

void summarise(std::vector<double>& t, Timing& out) {
  std::sort(t.begin(), t.end());
  const size_t n = t.size();
  out.median_s = (n % 2) ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
  out.min_s = t.front();
  out.max_s = t.back();
  double sum = 0;
  for (double v : t) sum += v;
  out.mean_s = sum / static_cast<double>(n);
}

int choose_inner(double op_s, const TimingOptions& o) {
  if (op_s <= 0) return o.max_inner;
  if (op_s >= o.target_rep_s) return 1;
  return std::max(1, std::min(o.max_inner, static_cast<int>(std::ceil(o.target_rep_s / op_s))));
}

int choose_reps(double rep_s, const TimingOptions& o) {
  int reps = rep_s > 0 ? static_cast<int>(o.target_total_s / rep_s) : o.max_reps;
  reps = std::max(o.min_reps, std::min(o.max_reps, reps));
  if (rep_s * reps > o.max_measure_s) reps = std::max(3, static_cast<int>(o.max_measure_s / rep_s));
  return reps;
}

}  // namespace

// ---------------------------------------------------------------------------
// Sustained timing and clock sampling
// ---------------------------------------------------------------------------

namespace {

double g_sustain_s = 0;

// NVML through dlopen: the harness builds and runs without it (no clocks then).
struct Nvml {
  using Device = void*;
  int (*init)() = nullptr;
  int (*by_bus_id)(const char*, Device*) = nullptr;
  int (*clock)(Device, int, unsigned*) = nullptr;
  int (*power)(Device, unsigned*) = nullptr;
  Device device = nullptr;
  bool ok = false;

  static Nvml& get() {
    static Nvml n = [] {
      Nvml x;
      void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
      if (!lib) return x;
      x.init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
      x.by_bus_id = reinterpret_cast<int (*)(const char*, Device*)>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
      x.clock = reinterpret_cast<int (*)(Device, int, unsigned*)>(dlsym(lib, "nvmlDeviceGetClockInfo"));
      x.power = reinterpret_cast<int (*)(Device, unsigned*)>(dlsym(lib, "nvmlDeviceGetPowerUsage"));
      if (!x.init || !x.by_bus_id || !x.clock || !x.power || x.init() != 0) return x;
      int dev = 0;
      char bus[64] = {0};
      if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetPCIBusId(bus, sizeof bus, dev) != cudaSuccess) {
        cudaGetLastError();
        return x;
      }
      x.ok = x.by_bus_id(bus, &x.device) == 0;
      return x;
    }();
    return n;
  }
};

// Samples the SM clock and power every 2 ms on a host thread between construction and stop().
class ClockSampler {
 public:
  ClockSampler() {
    if (!Nvml::get().ok) return;
    running_ = true;
    thread_ = std::thread([this] {
      Nvml& n = Nvml::get();
      while (running_.load()) {
        unsigned mhz = 0, mw = 0;
        if (n.clock(n.device, 1 /* NVML_CLOCK_SM */, &mhz) == 0 && n.power(n.device, &mw) == 0) {
          std::lock_guard<std::mutex> lock(mu_);
          mhz_.push_back(mhz);
          watts_ += mw * 1e-3;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    });
  }
  ~ClockSampler() { stop(); }
  ClockSample stop() {
    if (thread_.joinable()) {
      running_ = false;
      thread_.join();
    }
    ClockSample c;
    std::lock_guard<std::mutex> lock(mu_);
    if (mhz_.empty()) return c;
    std::vector<unsigned> v = mhz_;
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    c.sm_clock_mhz = v[v.size() / 2];
    c.power_w = watts_ / mhz_.size();
    c.samples = static_cast<int>(mhz_.size());
    return c;
  }

 private:
  std::atomic<bool> running_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<unsigned> mhz_;
  double watts_ = 0;
};

}  // namespace

void set_sustain_s(double seconds) { g_sustain_s = std::max(0.0, seconds); }
double sustain_s() { return g_sustain_s; }

double predict_time_op_s(double op_s, const TimingOptions& o) {
  const int inner = choose_inner(op_s, o);
  const double rep_s = op_s * inner;
  const int reps = choose_reps(rep_s, o);
  // warm-up + estimate + (graph warm-up) + sustained run + reps, plus a few ms of host overhead.
  return op_s * (o.warmup + 1) + rep_s * (reps + (inner > 1 ? 1 : 0)) + g_sustain_s + 3e-3;
}

Timing time_op(cudaStream_t stream, const LaunchFn& fn, const TimingOptions& o, const Budget& budget) {
  Timing t;
  auto fail = [&](const std::string& err) {
    t.ok = false;
    t.error = err;
    cudaStreamSynchronize(stream);
    cudaGetLastError();
    return t;
  };

  // Warm-up: module load, library heuristics and caches stay out of the numbers.
  for (int i = 0; i < o.warmup; ++i) {
    std::string err = fn(stream, i);
    if (!err.empty()) return fail("warm-up: " + err);
  }
  {
    std::string err = cuda_error(cudaStreamSynchronize(stream), "warm-up sync");
    if (!err.empty()) return fail(err);
  }

  EventSet est;
  {
    std::string err = est.create(2);
    if (!err.empty()) return fail(err);
  }
  // One timed run to size the batch; short ops get a batch of 20 for a better estimate.
  double op_s = 0;
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int n = attempt == 0 ? 1 : 20;
    const cudaError_t rec = cudaEventRecord(est.events[0], stream);
    if (rec != cudaSuccess) return fail(cuda_error(rec, "cudaEventRecord"));
    for (int i = 0; i < n; ++i) {
      std::string err = fn(stream, i);
      if (!err.empty()) return fail(err);
    }
    cudaEventRecord(est.events[1], stream);
    std::string err = cuda_error(cudaEventSynchronize(est.events[1]), "estimate sync");
    if (!err.empty()) return fail(err);
    float ms = 0;
    cudaEventElapsedTime(&ms, est.events[0], est.events[1]);
    op_s = 1e-3 * ms / n;
    if (attempt == 0) t.first_s = op_s;
    if (op_s >= 50e-6) break;
  }

  const int inner = choose_inner(op_s, o);
  GraphHolder graph;
  bool use_graph = false;
  if (o.allow_graph && inner > 1) {
    // Capture the inner batch: graph replay removes the per-launch host cost,
    // which otherwise dominates kernels of a few microseconds.
    bool capture_ok = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
    if (capture_ok) {
      for (int i = 0; i < inner && capture_ok; ++i) capture_ok = fn(stream, i).empty();
      cudaGraph_t g = nullptr;
      cudaError_t e = cudaStreamEndCapture(stream, &g);
      graph.graph = g;
      capture_ok = capture_ok && e == cudaSuccess && g != nullptr;
    }
    if (capture_ok) capture_ok = cudaGraphInstantiate(&graph.exec, graph.graph, 0) == cudaSuccess;
    if (capture_ok) capture_ok = cudaGraphLaunch(graph.exec, stream) == cudaSuccess &&
                                 cudaStreamSynchronize(stream) == cudaSuccess;
    cudaGetLastError();  // a failed capture leaves an error behind; plain launches follow
    use_graph = capture_ok;
    if (!use_graph) {
      cudaStreamCaptureStatus status;
      if (cudaStreamIsCapturing(stream, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
        cudaGraph_t g = nullptr;
        cudaStreamEndCapture(stream, &g);
        if (g) cudaGraphDestroy(g);
      }
      cudaGetLastError();
    }
  }

  const double rep_s = op_s * inner;
  int reps = choose_reps(rep_s, o);
  // Keep inside the phase budget when it runs short, but never below 3 reps.
  while (reps > 3 && !budget.allows(rep_s * reps + 0.5)) reps = std::max(3, reps / 2);

  auto launch_batch = [&](int r) -> std::string {
    if (use_graph) return cuda_error(cudaGraphLaunch(graph.exec, stream), "cudaGraphLaunch");
    for (int i = 0; i < inner; ++i) {
      std::string err = fn(stream, r * inner + i);
      if (!err.empty()) return err;
    }
    return "";
  };
  // Sustained timing: run until the clock has settled under a steady load, in chunks of about
  // 20 ms timed by events (a chunk is queued whole, so the GPU never idles between batches).
  if (g_sustain_s > 0 && !budget.allows(g_sustain_s + rep_s * reps + 0.5)) t.sustain_skipped = true;
  if (g_sustain_s > 0 && !t.sustain_skipped) {
    const int per_chunk = std::max(1, static_cast<int>(0.02 / std::max(rep_s, 1e-7)));
    // Bounded: a chunk is ~20 ms (or one batch), so this many cover the sustain time many times.
    const int max_chunks = 100 + static_cast<int>(g_sustain_s / 0.001);
    for (int chunk = 0; t.sustained_s < g_sustain_s; ++chunk) {
      if (chunk >= max_chunks) return fail("sustain: the clock-settling run did not add up to its time");
      cudaEventRecord(est.events[0], stream);
      for (int r = 0; r < per_chunk; ++r) {
        std::string err = launch_batch(r);
        if (!err.empty()) return fail("sustain: " + err);
      }
      cudaEventRecord(est.events[1], stream);
      std::string err = cuda_error(cudaEventSynchronize(est.events[1]), "sustain sync");
      if (!err.empty()) return fail(err);
      float ms = 0;
      err = cuda_error(cudaEventElapsedTime(&ms, est.events[0], est.events[1]), "sustain cudaEventElapsedTime");
      if (!err.empty()) return fail(err);
      t.sustained_s += 1e-3 * ms;
    }
    // Keep the GPU busy while the host queues the timed repetitions.
    for (int r = 0; r < per_chunk; ++r) {
      std::string err = launch_batch(r);
      if (!err.empty()) return fail("sustain: " + err);
    }
  }

  EventSet ev;
  {
    std::string err = ev.create(2 * static_cast<size_t>(reps));
    if (!err.empty()) return fail(err);
  }
  ClockSampler sampler;
  // Back-to-back repetitions with no host synchronisation in between.
  for (int r = 0; r < reps; ++r) {
    cudaEventRecord(ev.events[2 * r], stream);
    std::string err = launch_batch(r);
    if (!err.empty()) return fail(err);
    cudaEventRecord(ev.events[2 * r + 1], stream);
  }
  {
    std::string err = cuda_error(cudaStreamSynchronize(stream), "timed sync");
    t.clocks = sampler.stop();
    if (!err.empty()) return fail(err);
    err = cuda_error(cudaGetLastError(), "after timed runs");
    if (!err.empty()) return fail(err);
  }
  std::vector<double> times;
  times.reserve(reps);
  for (int r = 0; r < reps; ++r) {
    float ms = 0;
    cudaError_t e = cudaEventElapsedTime(&ms, ev.events[2 * r], ev.events[2 * r + 1]);
    if (e != cudaSuccess) return fail(cuda_error(e, "cudaEventElapsedTime"));
    times.push_back(1e-3 * ms / inner);
  }
  summarise(times, t);
  t.ok = true;
  t.reps = reps;
  t.inner = inner;
  t.graph = use_graph;
  return t;
}

Timing time_host(const HostFn& fn, int warmup, int min_reps, int max_reps, double target_total_s,
                 double max_measure_s, const Budget& budget) {
  Timing t;
  for (int i = 0; i < warmup; ++i) {
    std::string err = fn();
    if (!err.empty()) {
      t.error = "warm-up: " + err;
      return t;
    }
  }
  double t0 = now_s();
  std::string err = fn();
  double op_s = now_s() - t0;
  if (!err.empty()) {
    t.error = err;
    return t;
  }
  t.first_s = op_s;
  int reps = op_s > 0 ? static_cast<int>(target_total_s / op_s) : max_reps;
  reps = std::max(min_reps, std::min(max_reps, reps));
  if (op_s * reps > max_measure_s) reps = std::max(3, static_cast<int>(max_measure_s / op_s));
  while (reps > 3 && !budget.allows(op_s * reps + 0.5)) reps = std::max(3, reps / 2);
  std::vector<double> times;
  times.reserve(reps);
  for (int r = 0; r < reps; ++r) {
    double a = now_s();
    err = fn();
    double b = now_s();
    if (!err.empty()) {
      t.error = err;
      return t;
    }
    times.push_back(b - a);
  }
  summarise(times, t);
  t.ok = true;
  t.reps = reps;
  t.inner = 1;
  return t;
}

void add_timing(JsonObject& entry, const Timing& t) {
  if (t.ok) {
    entry.num("time_s", t.median_s);
    entry.num("min_s", t.min_s);
    entry.num("max_s", t.max_s);
    entry.integer("iters", static_cast<int64_t>(t.reps) * t.inner);
    entry.integer("reps", t.reps);
    entry.integer("inner", t.inner);
    entry.boolean("graph", t.graph);
    if (t.sustained_s > 0) entry.num("sustained_s", t.sustained_s);
    if (t.sustain_skipped) entry.boolean("sustain_skipped", true);  // timed at a burst's clock: budget
    if (t.clocks.samples > 0) {
      entry.num("sm_clock_mhz", t.clocks.sm_clock_mhz);
      entry.num("power_w", t.clocks.power_w);
      entry.integer("clock_samples", t.clocks.samples);
    }
  } else {
    entry.null("time_s");
    entry.str("error", t.error);
  }
}

// ---------------------------------------------------------------------------
// Phase context and device query
// ---------------------------------------------------------------------------

void PhaseContext::emit(const JsonObject& entry) {
  if (sink) sink->emit(entry);
  std::string why;
  if (entry.has("error") && context_is_broken(&why)) {
    broken = true;
    broken_reason = why;
  }
}

std::string query_device(int device, DeviceInfo* info) {
  HARNESS_TRY_CUDA(cudaSetDevice(device));
  cudaDeviceProp prop{};
  HARNESS_TRY_CUDA(cudaGetDeviceProperties(&prop, device));
  info->device = device;
  info->name = prop.name;
  info->cc_major = prop.major;
  info->cc_minor = prop.minor;
  info->memory_bytes = prop.totalGlobalMem;
  info->max_smem_optin = prop.sharedMemPerBlockOptin;
  // CUDA 13 removed the clock fields from cudaDeviceProp: ask the attributes.
  int v = 0;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, device) == cudaSuccess) info->sms = v;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrL2CacheSize, device) == cudaSuccess) info->l2_bytes = static_cast<size_t>(v);
  if (cudaDeviceGetAttribute(&v, cudaDevAttrClockRate, device) == cudaSuccess) info->clock_khz = v;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrMemoryClockRate, device) == cudaSuccess) info->mem_clock_khz = v;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrGlobalMemoryBusWidth, device) == cudaSuccess) info->bus_width = v;
  cudaGetLastError();
  return "";
}

}  // namespace harness
