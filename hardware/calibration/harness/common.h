// Shared utilities of the scaleout calibration harness: JSON output, time budget,
// device-event timing, random fills and small RAII wrappers.
//
// Everything here is written for a single unattended run on a remote GPU: no call
// aborts the process, every failure is turned into a string that ends up in the
// JSON entry of the measurement that failed.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace harness {

// ---------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------

// Monotonic seconds (CLOCK_MONOTONIC: the same clock in parent and forked child).
double now_s();

// "" on success, else "<what>: <CUDA error string>". Clears the non-sticky error.
std::string cuda_error(cudaError_t e, const char* what);

// Formats like printf into a std::string.
std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Progress log on stderr (unbuffered), prefixed with the phase name.
void log_msg(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void set_log_prefix(const std::string& prefix);

// Returns an error string from a CUDA call inside a function that returns std::string.
#define HARNESS_TRY_CUDA(expr)                                     \
  do {                                                             \
    cudaError_t harness_e_ = (expr);                               \
    if (harness_e_ != cudaSuccess) return ::harness::cuda_error(harness_e_, #expr); \
  } while (0)

// True when the CUDA context can no longer be used (a sticky error such as an
// illegal address): the phase then stops and the parent moves to the next phase.
bool context_is_broken(std::string* why);

// ---------------------------------------------------------------------------
// JSON
// ---------------------------------------------------------------------------

std::string json_escape(const std::string& s);
// Finite numbers with 9 significant digits; NaN and infinities become null.
std::string json_number(double v);

// An ordered JSON object built from pre-rendered values. Explicit method names
// (no overloads) so that an int never silently becomes a bool or a double.
class JsonObject {
 public:
  JsonObject& str(const std::string& key, const std::string& value);
  JsonObject& num(const std::string& key, double value);
  JsonObject& integer(const std::string& key, int64_t value);
  JsonObject& boolean(const std::string& key, bool value);
  JsonObject& null(const std::string& key);
  JsonObject& raw(const std::string& key, const std::string& json);
  bool has(const std::string& key) const;
  std::string render() const;

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

// Appends one JSON object per line to a file and flushes after each line, so a
// crash or a kill loses at most the measurement in flight.
class Sink {
 public:
  explicit Sink(const std::string& path);
  ~Sink();
  Sink(const Sink&) = delete;
  Sink& operator=(const Sink&) = delete;
  bool ok() const { return file_ != nullptr; }
  void emit(const JsonObject& object);
  int count() const { return count_; }

 private:
  FILE* file_ = nullptr;
  int count_ = 0;
};

// ---------------------------------------------------------------------------
// Budget
// ---------------------------------------------------------------------------

// Wall-clock deadline of one phase. Measurements are started only if their
// predicted duration still fits.
class Budget {
 public:
  explicit Budget(double deadline_s = 1e300) : deadline_(deadline_s) {}
  double remaining() const { return deadline_ - now_s(); }
  bool allows(double predicted_s) const { return now_s() + predicted_s <= deadline_; }
  double deadline() const { return deadline_; }

 private:
  double deadline_;
};

// ---------------------------------------------------------------------------
// Device data
// ---------------------------------------------------------------------------

enum class DType { BF16, FP16, FP32, FP8_E4M3 };
size_t dtype_size(DType t);
const char* dtype_name(DType t);

// Fills count elements with uniform values in [lo, hi) from a counter-based hash
// (no curand): reproducible, and never zeros (zeros run measurably faster).
std::string fill_random(void* ptr, size_t count, DType type, uint64_t seed, cudaStream_t stream,
                        float lo = -1.0f, float hi = 1.0f);

// Owning device allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; o.bytes_ = 0; }
  std::string allocate(size_t bytes);
  void reset();
  void* get() const { return ptr_; }
  template <typename T> T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Number of buffer sets to rotate through so that repeated runs do not find their
// inputs in L2: enough sets to cover ~3x the L2 size, capped.
int rotation_sets(size_t working_set_bytes, size_t l2_bytes, int max_sets = 64);

inline size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

// ---------------------------------------------------------------------------
// Timing
// ---------------------------------------------------------------------------

// Enqueues one run of the operation on the stream; iter selects the buffer set.
// Returns "" on success or an error string.
using LaunchFn = std::function<std::string(cudaStream_t stream, int iter)>;

struct TimingOptions {
  int warmup = 2;
  int min_reps = 10;
  int max_reps = 40;
  // Runs shorter than this are batched ("inner" runs per timed repetition) so
  // that event resolution and launch gaps do not dominate.
  double target_rep_s = 1e-3;
  int max_inner = 200;
  // Aim for about this much timed device time per measurement.
  double target_total_s = 0.15;
  // Never spend more than this on the timed repetitions (fewer reps, min 3).
  double max_measure_s = 1.5;
  // Capture the inner batch in a CUDA graph (tiny kernels); falls back to plain
  // launches when capture fails.
  bool allow_graph = true;
};

// Sustained timing: before the timed repetitions, keep running the operation until this much
// device time has passed, so that the GPU's power controller has settled to the clock it holds
// under a steady load (a training step), not the boost clock of a short burst. 0: off (the
// harness's --sustain-ms sets it for the whole run).
void set_sustain_s(double seconds);
double sustain_s();

// The SM clock and board power while the timed repetitions ran, sampled through NVML (loaded with
// dlopen; absent NVML leaves them 0).
struct ClockSample {
  double sm_clock_mhz = 0;  // median of the samples
  double power_w = 0;       // mean of the samples
  int samples = 0;
};

struct Timing {
  bool ok = false;
  std::string error;
  double median_s = 0, min_s = 0, max_s = 0, mean_s = 0;
  int reps = 0;
  int inner = 0;
  bool graph = false;
  double first_s = 0;  // duration of the single estimate run (after warm-up)
  double sustained_s = 0;  // device time run before the timed repetitions (sustained timing)
  bool sustain_skipped = false;  // asked for, but the budget had no room for it
  ClockSample clocks;
};

// Warm-up, estimate, batch, repeat; per-run time = event time of a repetition / inner.
Timing time_op(cudaStream_t stream, const LaunchFn& fn, const TimingOptions& options, const Budget& budget);

// Host wall-clock timing of a synchronous operation (PCIe copies, sync round trips).
using HostFn = std::function<std::string()>;
Timing time_host(const HostFn& fn, int warmup, int min_reps, int max_reps, double target_total_s,
                 double max_measure_s, const Budget& budget);

// Adds time_s (median), min_s, max_s, iters, reps, inner, graph or error to an entry.
void add_timing(JsonObject& entry, const Timing& timing);

// Predicted wall time of time_op for an operation of duration op_s (for budget checks).
double predict_time_op_s(double op_s, const TimingOptions& options);

// ---------------------------------------------------------------------------
// Phase context
// ---------------------------------------------------------------------------

struct DeviceInfo {
  int device = 0;
  std::string name;
  int sms = 0;
  int cc_major = 0, cc_minor = 0;
  size_t memory_bytes = 0;
  size_t l2_bytes = 0;
  int clock_khz = 0, mem_clock_khz = 0, bus_width = 0;
  size_t max_smem_optin = 0;
};

struct PhaseContext {
  Sink* sink = nullptr;
  Budget budget;
  cudaStream_t stream = nullptr;
  bool quick = false;
  DeviceInfo dev;
  int skipped = 0;  // measurements not started for lack of time
  bool broken = false;
  std::string broken_reason;

  // Emits an entry; afterwards checks that the context is still usable.
  void emit(const JsonObject& entry);
  // Records a measurement that was not started because the budget was spent.
  void skip() { ++skipped; }
};

std::string query_device(int device, DeviceInfo* info);

}  // namespace harness
