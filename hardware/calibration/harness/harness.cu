// scaleout-harness: measures the numbers the scaleout simulator is calibrated
// with (GEMM, attention, memory-bound kernels, PCIe, launch overhead) on one
// GPU and writes them as JSON.
//
//   scaleout-harness --out FILE.json [--quick] [--only gemm,novel_gemm,fp8_acc,attention,membound,pcie,launch]
//                    [--budget-s 240] [--sustain-ms 0] [--device N] [--no-fork] [--list] [--summarize FILE.json]
//
// Robustness for a single unattended run: the parent process never touches
// CUDA. It forks one child per phase; a child writes one JSON line per
// measurement to a part file and flushes it. The parent rewrites FILE.json
// (atomically, via rename) about once a second and after every phase, kills a
// child that overruns its phase deadline, and records a crashed or killed phase
// instead of stopping. So a hang, a segfault in a library or a sticky CUDA
// error costs one phase at most, and FILE.json is always a complete document.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "common.h"
#include "phases.h"

namespace harness {
namespace {

constexpr const char* kSchema = "scaleout-measurements/1";
constexpr const char* kHarnessVersion = "1.0";

struct Phase {
  const char* name;
  double weight;  // share of the budget left when the phase starts
  void (*run)(PhaseContext&);
  PlanSummary (*plan)(bool);
};

// Order matters twice: a phase gets weight / (sum of the weights still to come)
// of the remaining time, and the riskiest phases (attention: a graph API we
// cannot test here, then our own untuned kernels) run last.
const Phase kPhases[] = {
    {"launch", 0.03, run_launch_phase, plan_launch},
    {"membound", 0.12, run_membound_phase, plan_membound},
    {"pcie", 0.06, run_pcie_phase, plan_pcie},
    {"gemm", 0.45, run_gemm_phase, plan_gemm},
    {"novel_gemm", 0.06, run_gemm_novel_phase, plan_gemm_novel},  // shapes of no grid: a profile's check
    {"fp8_acc", 0.05, run_fp8acc_phase, plan_fp8acc},              // FP8 fast accumulation on and off
    {"attention", 0.24, run_attention_phase, plan_attention},          // cuDNN
    {"attention_own", 0.10, run_attention_own_phase, plan_attention_own},  // own kernels
};

struct Options {
  std::string out;
  bool quick = false;
  std::vector<std::string> only;
  double budget_s = 240;
  int device = 0;
  double sustain_ms = 0;
  bool fork = true;
  bool list = false;
  bool selftest = false;
  std::string summarize;
  std::string args;
};

void usage() {
  fprintf(stderr,
          "usage: scaleout-harness --out FILE.json [--quick] [--only gemm,novel_gemm,fp8_acc,attention,attention_own,membound,pcie,launch]\n"
          "                        [--budget-s 240] [--sustain-ms 0] [--device N] [--no-fork] [--list] [--summarize FILE.json]\n"
          "  --quick      small plan (a smoke test of every phase, ~30 s)\n"
          "  --only       comma-separated phases to run (default: all; a prefix selects every phase it starts)\n"
          "  --budget-s   wall-clock budget of the whole run; no new measurement starts past it\n"
          "  --sustain-ms run each kernel this long before timing it, so the clock settles to what the GPU\n"
          "               holds under a steady load (its power limit) rather than a short burst's boost\n"
          "  --no-fork    run the phases in this process (debugging; a crash ends the run)\n"
          "  --list       print the plan (entries, predicted H200 seconds) without touching the GPU\n"
          "  --summarize  print the summary table of an existing output file\n"
          "  --selftest-cudnn-graph  build the cuDNN attention graphs as far as possible and print where they stop\n");
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
    } else if (a == "--quick") {
      o->quick = true;
    } else if (a == "--only") {
      if (!next(&v)) return false;
      std::stringstream ss(v);
      std::string item;
      while (std::getline(ss, item, ','))
        if (!item.empty()) o->only.push_back(item);
    } else if (a == "--budget-s") {
      if (!next(&v)) return false;
      o->budget_s = atof(v.c_str());
    } else if (a == "--sustain-ms") {
      if (!next(&v)) return false;
      o->sustain_ms = atof(v.c_str());
      if (!(o->sustain_ms >= 0 && o->sustain_ms <= 10000)) {
        fprintf(stderr, "--sustain-ms: expected 0 to 10000, got %s\n", v.c_str());
        return false;
      }
    } else if (a == "--device") {
      if (!next(&v)) return false;
      o->device = atoi(v.c_str());
    } else if (a == "--no-fork") {
      o->fork = false;
    } else if (a == "--list") {
      o->list = true;
    } else if (a == "--selftest-cudnn-graph") {
      o->selftest = true;
    } else if (a == "--summarize") {
      if (!next(&o->summarize)) return false;
    } else if (a == "--help" || a == "-h") {
      return false;
    } else {
      fprintf(stderr, "unknown argument: %s\n", a.c_str());
      return false;
    }
  }
  for (const auto& p : o->only) {
    bool known = false;
    for (const auto& ph : kPhases) known |= std::string(ph.name).rfind(p, 0) == 0;
    if (!known) {
      fprintf(stderr, "unknown phase in --only: %s\n", p.c_str());
      return false;
    }
  }
  return o->list || o->selftest || !o->summarize.empty() || !o->out.empty();
}

// "--only attention" selects both attention phases (prefix match).
bool selected(const Options& o, const char* name) {
  if (o.only.empty()) return true;
  for (const auto& p : o.only)
    if (std::string(name).rfind(p, 0) == 0) return true;
  return false;
}

std::string iso8601_utc() {
  time_t t = time(nullptr);
  struct tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

// ---------------------------------------------------------------------------
// Child side
// ---------------------------------------------------------------------------

// Device, driver and library versions: the "info" child's single line.
int info_main(const Options& o, const std::string& part) {
  set_log_prefix("info");
  Sink sink(part);
  JsonObject info;
  DeviceInfo dev;
  const std::string err = query_device(o.device, &dev);
  if (err.empty()) {
    JsonObject gpu;
    gpu.str("name", dev.name).integer("sms", dev.sms).str("cc", strprintf("%d.%d", dev.cc_major, dev.cc_minor));
    gpu.integer("memory_bytes", (int64_t)dev.memory_bytes).integer("l2_bytes", (int64_t)dev.l2_bytes);
    gpu.integer("clock_khz", dev.clock_khz).integer("mem_clock_khz", dev.mem_clock_khz).integer("bus_width", dev.bus_width);
    gpu.integer("device", dev.device);
    info.raw("gpu", gpu.render());
    log_msg("%s, %d SMs, cc %d.%d, %.1f GB, L2 %.1f MB", dev.name.c_str(), dev.sms, dev.cc_major, dev.cc_minor,
         dev.memory_bytes / 1e9, dev.l2_bytes / 1e6);
  } else {
    info.null("gpu").str("device_error", err);
    log_msg("device: %s", err.c_str());
  }
  int v = 0;
  if (cudaDriverGetVersion(&v) == cudaSuccess) info.integer("driver", v); else info.null("driver");
  if (cudaRuntimeGetVersion(&v) == cudaSuccess) info.integer("runtime", v); else info.null("runtime");
  info.integer("cublas_version", static_cast<int64_t>(cublasLtGetVersion()));
  std::string cudnn_err;
  const long cudnn = cudnn_runtime_version(&cudnn_err);
  if (cudnn > 0) info.integer("cudnn_version", cudnn); else info.null("cudnn_version").str("cudnn_error", cudnn_err);
  JsonObject line;
  line.raw("_info", info.render());
  sink.emit(line);
  return err.empty() ? 0 : 2;
}

int phase_main(const Phase& ph, const Options& o, double deadline, const std::string& part) {
  set_log_prefix(ph.name);
  Sink sink(part);
  // Test hooks for the parent's watchdog (no GPU needed): HARNESS_TEST_HANG=<phase>
  // makes the phase hang after one entry, HARNESS_TEST_CRASH=<phase> makes it segfault.
  for (const char* var : {"HARNESS_TEST_HANG", "HARNESS_TEST_CRASH"}) {
    const char* v = getenv(var);
    if (v && strcmp(v, ph.name) == 0) {
      JsonObject e;
      e.str("kind", ph.name).str("note", std::string("test hook ") + var);
      sink.emit(e);
      if (strcmp(var, "HARNESS_TEST_HANG") == 0)
        while (true) pause();
      raise(SIGSEGV);
    }
  }
  DeviceInfo dev;
  std::string err = query_device(o.device, &dev);
  cudaStream_t stream = nullptr;
  if (err.empty()) err = cuda_error(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  PhaseContext ctx;
  ctx.sink = &sink;
  ctx.budget = Budget(deadline);
  ctx.stream = stream;
  ctx.quick = o.quick;
  ctx.dev = dev;
  set_sustain_s(o.sustain_ms * 1e-3);
  if (err.empty()) {
    const double t0 = now_s();
    log_msg("start, %.1f s budget", deadline - t0);
    ph.run(ctx);
    log_msg("done in %.1f s, %d entries, %d skipped for time", now_s() - t0, sink.count(), ctx.skipped);
  } else {
    JsonObject e;
    e.str("kind", ph.name).str("error", "device setup: " + err);
    sink.emit(e);
  }
  JsonObject summary;
  summary.str("_phase", ph.name).integer("skipped", ctx.skipped).boolean("context_broken", ctx.broken);
  if (ctx.broken) summary.str("broken_reason", ctx.broken_reason);
  sink.emit(summary);
  if (stream) cudaStreamDestroy(stream);
  return ctx.broken ? 3 : (err.empty() ? 0 : 2);
}

// ---------------------------------------------------------------------------
// Parent side
// ---------------------------------------------------------------------------

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

struct PhaseRecord {
  std::string name;
  std::string status = "not run";
  int exit_code = 0;
  double wall_s = 0;
  double budget_s = 0;
  int skipped = 0;
  bool context_broken = false;
  std::string note;
  std::vector<std::string> lines;  // measurement lines of the phase
};

struct RunState {
  Options opt;
  std::string date, host;
  double t_start = 0;
  std::string info_fields;  // "\"gpu\":{...},\"driver\":..." (no braces)
  std::vector<PhaseRecord> phases;
  bool complete = false;
};

std::vector<std::string> read_lines(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    // A child killed mid-write leaves a partial last line: keep whole objects only.
    if (line.size() >= 2 && line.front() == '{' && line.back() == '}') out.push_back(line);
  }
  return out;
}

// Splits a part file into measurement lines and the phase's summary line.
void absorb(PhaseRecord& rec, const std::vector<std::string>& lines) {
  rec.lines.clear();
  for (const auto& l : lines) {
    if (l.rfind("{\"_phase\":", 0) == 0) {
      const size_t p = l.find("\"skipped\":");
      if (p != std::string::npos) rec.skipped = atoi(l.c_str() + p + 10);
      rec.context_broken = l.find("\"context_broken\":true") != std::string::npos;
      continue;
    }
    rec.lines.push_back(l);
  }
}

std::string render(const RunState& st) {
  std::string out;
  out += "{\"schema\":" + json_escape(kSchema) + ",\n";
  if (!st.info_fields.empty())
    out += st.info_fields + ",\n";
  else
    out += "\"gpu\":null,\"driver\":null,\"runtime\":null,\"cublas_version\":null,\"cudnn_version\":null,\n";
  out += "\"date\":" + json_escape(st.date) + ",\"host\":" + json_escape(st.host) + ",\n";
  JsonObject h;
  h.str("version", kHarnessVersion).str("args", st.opt.args).num("budget_s", st.opt.budget_s);
  h.num("sustain_s", st.opt.sustain_ms * 1e-3);
  h.boolean("quick", st.opt.quick).boolean("forked", st.opt.fork).num("elapsed_s", now_s() - st.t_start);
  h.boolean("complete", st.complete);
  out += "\"harness\":" + h.render() + ",\n";
  out += "\"phases\":[";
  for (size_t i = 0; i < st.phases.size(); ++i) {
    const auto& p = st.phases[i];
    JsonObject o;
    o.str("name", p.name).str("status", p.status).integer("exit_code", p.exit_code).num("wall_s", p.wall_s);
    o.num("budget_s", p.budget_s).integer("entries", (int64_t)p.lines.size()).integer("skipped_for_time", p.skipped);
    o.boolean("context_broken", p.context_broken);
    if (!p.note.empty()) o.str("note", p.note);
    out += (i ? ",\n" : "\n") + o.render();
  }
  out += "],\n\"measurements\":[";
  bool first = true;
  for (const auto& p : st.phases)
    for (const auto& l : p.lines) {
      out += first ? "\n" : ",\n";
      out += l;
      first = false;
    }
  out += "\n]}\n";
  return out;
}

void write_output(const RunState& st) {
  const std::string tmp = st.opt.out + ".tmp";
  FILE* f = fopen(tmp.c_str(), "w");
  if (!f) {
    fprintf(stderr, "[harness] cannot write %s: %s\n", tmp.c_str(), strerror(errno));
    return;
  }
  const std::string doc = render(st);
  fwrite(doc.data(), 1, doc.size(), f);
  fclose(f);
  if (rename(tmp.c_str(), st.opt.out.c_str()) != 0)
    fprintf(stderr, "[harness] cannot rename %s: %s\n", tmp.c_str(), strerror(errno));
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) {
    const int c = WEXITSTATUS(status);
    if (c == 0) return "ok";
    if (c == 2) return "device error";
    if (c == 3) return "stopped: CUDA context broken";
    return strprintf("exit %d", c);
  }
  if (WIFSIGNALED(status)) return strprintf("crashed (signal %d: %s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return "unknown";
}

constexpr double kStallLimit_s = 60.0;  // no new entry for this long: the child is hung

// Runs fn in a child process until it exits, kill_at passes, or it stalls (no
// new entry for kStallLimit_s). Returns the wait status; *killed says why the
// parent killed it ("" if it did not). on_tick runs about once a second while
// waiting and returns the number of entries written so far.
int run_child(const std::function<int()>& fn, bool use_fork, double kill_at, std::string* killed,
              const std::function<size_t()>& on_tick) {
  killed->clear();
  if (!use_fork) {
    const int rc = fn();
    return (rc & 0xff) << 8;  // shaped like a wait status with WIFEXITED
  }
  fflush(stdout);
  fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) return (4 & 0xff) << 8;
  if (pid == 0) {
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    const int rc = fn();
    fflush(stdout);
    fflush(stderr);
    _exit(rc);
  }
  int status = 0;
  double last_tick = now_s(), last_progress = now_s();
  size_t entries = 0;
  while (true) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) break;
    const double t = now_s();
    const bool stalled = t - last_progress > kStallLimit_s;
    if (g_stop || t > kill_at || stalled) {
      if (!g_stop) *killed = stalled ? strprintf("killed: no new entry for %.0f s", kStallLimit_s) : "killed: phase deadline passed";
      kill(pid, SIGTERM);
      for (int i = 0; i < 20; ++i) {  // up to 2 s to exit, then SIGKILL
        if (waitpid(pid, &status, WNOHANG) == pid) return status;
        usleep(100000);
      }
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return status;
    }
    if (t - last_tick >= 1.0) {
      const size_t n = on_tick();
      if (n != entries) {
        entries = n;
        last_progress = t;
      }
      last_tick = t;
    }
    usleep(50000);
  }
  return status;
}

// ---------------------------------------------------------------------------
// Summary table (also for --summarize): fields are read from our own compact
// one-object-per-line JSON.
// ---------------------------------------------------------------------------

bool field_str(const std::string& line, const char* key, std::string* out) {
  const std::string k = std::string("\"") + key + "\":\"";
  const size_t p = line.find(k);
  if (p == std::string::npos) return false;
  const size_t s = p + k.size();
  size_t e = s;
  while (e < line.size() && !(line[e] == '"' && line[e - 1] != '\\')) ++e;
  *out = line.substr(s, e - s);
  return true;
}

bool field_num(const std::string& line, const char* key, double* out) {
  const std::string k = std::string("\"") + key + "\":";
  const size_t p = line.find(k);
  if (p == std::string::npos) return false;
  const char* s = line.c_str() + p + k.size();
  if (*s == 'n' || *s == '"') return false;  // null or a string
  char* end = nullptr;
  *out = strtod(s, &end);
  return end != s;
}

bool is(const std::string& line, const char* key, const char* value) {
  std::string v;
  return field_str(line, key, &v) && v == value;
}

void print_summary(const std::vector<std::string>& lines) {
  struct Best {
    double v = -1;
    std::string what;
  };
  auto upd = [](Best& b, double v, const std::string& w) {
    if (v > b.v) {
      b.v = v;
      b.what = w;
    }
  };
  Best gemm[4], copy, adam;
  std::vector<std::pair<std::string, Best[2]>> attn;  // per implementation: fwd, bwd
  const char* gemm_types[4] = {"bf16", "fp8", "fp16", "tf32"};
  double pinned_h2d = -1, pinned_d2h = -1, pageable_h2d = -1, pageable_d2h = -1, pcie_bytes = 0;
  double launch_us = -1, graph_us = -1, sync_us = -1;
  int total = 0, errors = 0, checks = 0, checks_ok = 0;
  std::string check_fail;
  for (const auto& l : lines) {
    ++total;
    if (l.find("\"error\":") != std::string::npos) ++errors;
    double v = 0, m = 0, n = 0, k = 0, bytes = 0;
    std::string kind;
    field_str(l, "kind", &kind);
    if (kind == "gemm_check" || kind == "attention_check") {
      ++checks;
      if (l.find("\"ok\":true") != std::string::npos) {
        ++checks_ok;
      } else {
        std::string t1, t2;
        field_str(l, "dtype", &t1);
        field_str(l, "impl", &t2);
        check_fail += " " + kind.substr(0, kind.find('_')) + ":" + t1 + t2;
      }
    }
    if (kind == "gemm" && field_num(l, "tflops", &v)) {
      field_num(l, "m", &m);
      field_num(l, "n", &n);
      field_num(l, "k", &k);
      for (int i = 0; i < 4; ++i)
        if (is(l, "dtype", gemm_types[i])) upd(gemm[i], v, strprintf("%.0fx%.0fx%.0f", m, n, k));
    }
    if (kind == "membound" && field_num(l, "gbps", &v)) {
      field_num(l, "size_bytes", &bytes);
      if (is(l, "op", "copy")) upd(copy, v, strprintf("%.0f MiB", bytes / 1048576.0));
      if (is(l, "op", "adam")) upd(adam, v, strprintf("%.0f MiB", bytes / 1048576.0));
    }
    if (kind == "pcie" && field_num(l, "gbps", &v) && field_num(l, "bytes", &bytes) && bytes >= pcie_bytes) {
      if (bytes > pcie_bytes) pinned_h2d = pinned_d2h = pageable_h2d = pageable_d2h = -1;
      pcie_bytes = bytes;
      const bool pinned = is(l, "memory", "pinned"), h2d = is(l, "direction", "h2d");
      (pinned ? (h2d ? pinned_h2d : pinned_d2h) : (h2d ? pageable_h2d : pageable_d2h)) = v;
    }
    if (kind == "launch" && field_num(l, "time_s", &v)) {
      if (is(l, "what", "empty_kernel")) launch_us = v * 1e6;
      if (is(l, "what", "graph_kernel")) graph_us = v * 1e6;
      if (is(l, "what", "sync")) sync_us = v * 1e6;
    }
    if (kind == "attention" && field_num(l, "tflops", &v)) {
      double b = 0, h = 0, s = 0, d = 0;
      field_num(l, "batch", &b);
      field_num(l, "heads", &h);
      field_num(l, "seq", &s);
      field_num(l, "head_dim", &d);
      const std::string w = strprintf("b%.0f h%.0f s%.0f d%.0f%s", b, h, s, d,
                                      l.find("\"causal\":true") != std::string::npos ? " causal" : "");
      const bool bwd = is(l, "pass", "bwd");
      std::string impl;
      field_str(l, "impl", &impl);
      size_t idx = 0;
      while (idx < attn.size() && attn[idx].first != impl) ++idx;
      if (idx == attn.size()) {
        attn.emplace_back();
        attn.back().first = impl;
      }
      upd(attn[idx].second[bwd ? 1 : 0], v, w);
    }
  }
  auto row = [](const char* name, const Best& b, const char* unit) {
    if (b.v < 0)
      printf("  %-28s %12s\n", name, "-");
    else
      printf("  %-28s %9.1f %-6s (%s)\n", name, b.v, unit, b.what.c_str());
  };
  auto val = [](const char* name, double v, const char* unit) {
    if (v < 0)
      printf("  %-28s %12s\n", name, "-");
    else
      printf("  %-28s %9.2f %s\n", name, v, unit);
  };
  printf("\n==== scaleout-harness summary: %d measurements, %d with errors, checks %d/%d ok%s%s ====\n", total, errors,
         checks_ok, checks, check_fail.empty() ? "" : " (failed:", check_fail.empty() ? "" : (check_fail + ")").c_str());
  for (int i = 0; i < 4; ++i) row((std::string("best GEMM ") + gemm_types[i]).c_str(), gemm[i], "TFLOP/s");
  if (attn.empty()) printf("  %-28s %12s\n", "attention", "-");
  for (const auto& a : attn) {
    row(("attention " + a.first + " fwd").c_str(), a.second[0], "TFLOP/s");
    row(("attention " + a.first + " bwd").c_str(), a.second[1], "TFLOP/s");
  }
  row("copy (best)", copy, "GB/s");
  row("adam (best)", adam, "GB/s");
  printf("  PCIe at %.0f MiB:\n", pcie_bytes / 1048576.0);
  val("  pinned h2d", pinned_h2d, "GB/s");
  val("  pinned d2h", pinned_d2h, "GB/s");
  val("  pageable h2d", pageable_h2d, "GB/s");
  val("  pageable d2h", pageable_d2h, "GB/s");
  val("launch, back to back", launch_us, "us");
  val("launch, graph node", graph_us, "us");
  val("launch + sync round trip", sync_us, "us");
  fflush(stdout);
}

int summarize_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) {
    fprintf(stderr, "cannot read %s\n", path.c_str());
    return 1;
  }
  std::vector<std::string> lines;
  std::string line;
  bool in = false;
  while (std::getline(f, line)) {
    if (line.rfind("\"measurements\":[", 0) == 0) {
      in = true;
      continue;
    }
    if (!in) continue;
    if (!line.empty() && line.back() == ',') line.pop_back();
    if (line.size() >= 2 && line.front() == '{' && line.back() == '}') lines.push_back(line);
  }
  print_summary(lines);
  return 0;
}

int list_plan(const Options& o) {
  double total = 0;
  int entries = 0;
  printf("%-14s %8s %12s\n", "phase", "entries", "predicted_s");
  for (const auto& ph : kPhases) {
    if (!selected(o, ph.name)) continue;
    const PlanSummary s = ph.plan(o.quick);
    printf("%-14s %8d %12.1f\n", ph.name, s.entries, s.predicted_s);
    total += s.predicted_s;
    entries += s.entries;
  }
  printf("%-14s %8d %12.1f   (plus ~1-2 s of CUDA start-up per phase; budget %.0f s)\n", "total", entries, total,
         o.budget_s);
  return 0;
}

}  // namespace
}  // namespace harness

int main(int argc, char** argv) {
  using namespace harness;
  Options opt;
  if (!parse_args(argc, argv, &opt)) {
    usage();
    return 64;
  }
  set_sustain_s(opt.sustain_ms * 1e-3);  // the plan's predicted times include it
  if (opt.list) return list_plan(opt);
  if (opt.selftest) return cudnn_graph_selftest();
  if (!opt.summarize.empty()) return summarize_file(opt.summarize);

  RunState st;
  st.opt = opt;
  st.t_start = now_s();
  st.date = iso8601_utc();
  st.host = hostname();
  const double total_deadline = st.t_start + opt.budget_s;

  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);

  // Part files live outside the output directory (which may be size-limited).
  const char* tmpdir_env = getenv("TMPDIR");
  const std::string parts = strprintf("%s/scaleout-harness-%d", tmpdir_env && *tmpdir_env ? tmpdir_env : "/tmp", (int)getpid());
  mkdir(parts.c_str(), 0755);

  // Make sure the output is writable before spending any GPU time.
  write_output(st);
  {
    FILE* f = fopen(opt.out.c_str(), "r");
    if (!f) {
      fprintf(stderr, "[harness] cannot create %s\n", opt.out.c_str());
      return 1;
    }
    fclose(f);
  }

  // 1. Device and library information.
  {
    const std::string part = parts + "/info.jsonl";
    std::string killed;
    const int status = run_child([&]() { return info_main(opt, part); }, opt.fork,
                                 std::min(total_deadline, now_s() + 60.0), &killed, [] { return size_t(0); });
    for (const auto& l : read_lines(part)) {
      const std::string prefix = "{\"_info\":{";
      if (l.rfind(prefix, 0) == 0 && l.size() > prefix.size() + 2) st.info_fields = l.substr(prefix.size(), l.size() - prefix.size() - 2);
    }
    if (st.info_fields.empty())
      st.info_fields = "\"gpu\":null,\"info_error\":" + json_escape(!killed.empty() ? killed : describe_status(status));
    write_output(st);
  }

  // 2. Measurement phases.
  std::vector<const Phase*> todo;
  for (const auto& ph : kPhases)
    if (selected(opt, ph.name)) todo.push_back(&ph);
  for (const Phase* ph : todo) {
    PhaseRecord rec;
    rec.name = ph->name;
    st.phases.push_back(rec);
  }
  for (size_t i = 0; i < todo.size(); ++i) {
    PhaseRecord& rec = st.phases[i];
    if (g_stop) {
      rec.status = "not run: interrupted";
      continue;
    }
    const double now = now_s();
    const double left = total_deadline - now - 1.0;
    if (left <= 2.0) {
      rec.status = "not run: budget spent";
      continue;
    }
    double weight_left = 0;
    for (size_t j = i; j < todo.size(); ++j) weight_left += todo[j]->weight;
    const double share = left * todo[i]->weight / weight_left;
    const double deadline = now + share;
    // Grace for the measurement in flight at the deadline, but not far past the budget.
    const double kill_at = std::min(deadline + 10.0, total_deadline + 10.0);
    rec.budget_s = share;
    rec.status = "running";
    fprintf(stderr, "[harness] phase %s: %.1f s of %.1f s left\n", todo[i]->name, share, left);
    const std::string part = parts + "/" + todo[i]->name + ".jsonl";
    remove(part.c_str());
    std::string killed;
    const Phase* phase = todo[i];
    const int status = run_child([&]() { return phase_main(*phase, opt, deadline, part); }, opt.fork, kill_at, &killed,
                                 [&]() {
                                   absorb(rec, read_lines(part));
                                   write_output(st);
                                   return rec.lines.size();
                                 });
    absorb(rec, read_lines(part));
    rec.wall_s = now_s() - now;
    rec.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    rec.status = !killed.empty() ? killed : (g_stop ? "interrupted" : describe_status(status));
    write_output(st);
    fprintf(stderr, "[harness] phase %s: %s, %zu entries, %d skipped for time, %.1f s\n", todo[i]->name,
            rec.status.c_str(), rec.lines.size(), rec.skipped, rec.wall_s);
  }
  st.complete = !g_stop;
  write_output(st);
  for (const auto& ph : todo) remove((parts + "/" + ph->name + ".jsonl").c_str());
  remove((parts + "/info.jsonl").c_str());
  rmdir(parts.c_str());

  std::vector<std::string> all;
  for (const auto& p : st.phases) all.insert(all.end(), p.lines.begin(), p.lines.end());
  print_summary(all);
  printf("output: %s (%.1f s)\n", opt.out.c_str(), now_s() - st.t_start);
  return g_stop ? 130 : 0;
}
