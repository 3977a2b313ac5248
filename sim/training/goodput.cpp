#include "sim/training/goodput.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include "sim/engine/check.hpp"
#include "sim/engine/simulator.hpp"

namespace scaleout {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

void check_plan(const CheckpointPlan& p) {
  SCALEOUT_CHECK(p.step_s > 0 && std::isfinite(p.step_s), "step time must be positive and finite");
  SCALEOUT_CHECK(p.steps >= 1, "a job has at least one step");
  SCALEOUT_CHECK(p.write_s >= 0 && p.restart_s >= 0 && std::isfinite(p.write_s) && std::isfinite(p.restart_s),
                 "checkpoint write and restart must be finite and non-negative");
  SCALEOUT_CHECK(p.stall_s() >= 0 && p.stall_s() <= p.write_s, "the blocking part of a checkpoint is within its write");
}

std::int64_t clamp_interval(const CheckpointPlan& p) { return std::clamp<std::int64_t>(p.interval_steps, 1, p.steps); }

// Expected failures while completing a segment of `w` seconds (see the header).
double expected_segment_failures(double w, double rate, double restart_s, bool during_restart) {
  if (rate == 0) return 0;
  const double n = std::expm1(rate * w);
  return during_restart ? n * std::exp(rate * restart_s) : n;
}

// The whole job's expected wall time with K steps between checkpoints.
double expected_job_s(double rate, const CheckpointPlan& p, std::int64_t k) {
  const std::int64_t full = p.steps / k, rem = p.steps % k;
  const double b = p.stall_s();
  double t = double(full) * expected_segment_s(double(k) * p.step_s + b, rate, p.restart_s, p.failures_during_restart);
  if (rem > 0) t += expected_segment_s(double(rem) * p.step_s + b, rate, p.restart_s, p.failures_during_restart);
  return t;
}

// Job time as engine ticks: one tick per nanosecond, saturating at the clock's range.
constexpr double kTicksPerSecond = 1e9;
Time ticks(double s) {
  const double t = std::round(s * kTicksPerSecond);
  if (!(t < 9.2e18)) return Time::max();
  return Time::from_ps(static_cast<std::int64_t>(t));
}
double seconds(Time t) { return double(t.ps()) / kTicksPerSecond; }

// Exponential variate by inversion on 53 random bits: the same sequence on every platform,
// unlike std::exponential_distribution.
double exponential(std::mt19937_64& rng, double rate) {
  const double u = double(rng() >> 11) * 0x1.0p-53;  // [0, 1)
  return -std::log1p(-u) / rate;
}

// One run of the job on the engine: a failure process over the whole run, segments of work plus
// checkpoint stall that complete unless a failure strikes first, restarts after each failure.
class Trial {
 public:
  Trial(const FailureRates& f, const CheckpointPlan& p, std::mt19937_64& rng, std::uint64_t budget)
      : rate_(f.job_rate_per_s()), p_(p), rng_(rng), budget_(budget), k_(clamp_interval(p)) {
    segments_ = (p.steps + k_ - 1) / k_;
  }

  // Returns false when the event budget or the clock ran out before the job finished.
  bool run() {
    schedule_failure();
    start_segment();
    sim_.run();
    return done_;
  }
  double wall_s() const { return seconds(end_); }
  std::uint64_t failures() const { return failures_; }
  std::uint64_t events() const { return events_; }

 private:
  enum class State { working, restarting, finished };

  double segment_s(std::int64_t i) const {
    const std::int64_t steps = i + 1 < segments_ ? k_ : p_.steps - k_ * (segments_ - 1);
    return double(steps) * p_.step_s + p_.stall_s();
  }
  // Every handler passes through here: counts the event and stops the run past the budget.
  bool admit() {
    if (++events_ <= budget_) return true;
    stop();
    return false;
  }
  void stop() {
    sim_.cancel(failure_);
    sim_.cancel(pending_);
    state_ = State::finished;
  }
  // Schedules `fn` at now + dt, or stops when that passes the engine's clock.
  bool schedule(EventId& id, double dt, EventFn fn) {
    const Time d = ticks(dt);
    if (d == Time::max() || sim_.now() > Time::max() - d) {
      stop();
      return false;
    }
    id = sim_.schedule_in(d, std::move(fn));
    return true;
  }
  void schedule_failure() {
    if (rate_ == 0) return;
    schedule(failure_, exponential(rng_, rate_), [this] { on_failure(); });
  }
  void start_segment() {
    state_ = State::working;
    schedule(pending_, segment_s(segment_), [this] { on_segment_done(); });
  }
  void start_restart() {
    state_ = State::restarting;
    schedule(pending_, p_.restart_s, [this] { on_restart_done(); });
  }
  void on_segment_done() {
    if (!admit()) return;
    if (++segment_ < segments_) return start_segment();
    done_ = true;
    end_ = sim_.now();
    sim_.cancel(failure_);
    state_ = State::finished;
  }
  void on_restart_done() {
    if (!admit()) return;
    start_segment();
  }
  void on_failure() {
    if (!admit()) return;
    if (state_ == State::working) {
      ++failures_;
      sim_.cancel(pending_);  // the work since the last checkpoint is lost
      start_restart();
    } else if (state_ == State::restarting && p_.failures_during_restart) {
      ++failures_;
      sim_.cancel(pending_);
      start_restart();
    }
    if (state_ != State::finished) schedule_failure();
  }

  Simulator sim_;
  double rate_;
  const CheckpointPlan& p_;
  std::mt19937_64& rng_;
  std::uint64_t budget_;
  std::int64_t k_, segments_ = 0, segment_ = 0;
  State state_ = State::working;
  EventId failure_ = 0, pending_ = 0;
  std::uint64_t events_ = 0, failures_ = 0;
  bool done_ = false;
  Time end_ = Time::zero();
};

}  // namespace

std::int64_t FailureRates::nodes() const { return (gpus + std::max<std::int64_t>(1, gpus_per_node) - 1) / std::max<std::int64_t>(1, gpus_per_node); }

double FailureRates::job_rate_per_s() const {
  SCALEOUT_CHECK(mtbf_gpu_s > 0 && mtbf_node_s > 0, "MTBF must be positive");
  // 1/infinity is 0: a component that never fails adds nothing.
  return double(gpus) / mtbf_gpu_s + double(nodes()) / mtbf_node_s;
}

double FailureRates::job_mtbf_s() const {
  const double r = job_rate_per_s();
  return r == 0 ? kInf : 1 / r;
}

FailureRates llama3_failure_rates(std::int64_t gpus, std::int64_t gpus_per_node) {
  constexpr double gpus_observed = 16384, gpus_per_server = 8, hours = 54 * 24;
  constexpr double gpu_faults = 148 + 72 + 19 + 17 + 6 + 6;       // 268
  constexpr double other_faults = 35 + 32 + 21 + 54 + 2 + 7;       // 151
  static_assert(gpu_faults + other_faults == 419, "Llama 3 Table 5 counts 419 unexpected interruptions");
  FailureRates f;
  f.gpus = gpus;
  f.gpus_per_node = gpus_per_node;
  f.mtbf_gpu_s = gpus_observed * hours / gpu_faults * 3600;
  f.mtbf_node_s = gpus_observed / gpus_per_server * hours / other_faults * 3600;
  return f;
}

double expected_segment_s(double work_s, double rate, double restart_s, bool failures_during_restart) {
  if (rate == 0) return work_s;
  const double grow = std::expm1(rate * work_s);  // infinity past ~709 mean times between failures
  if (failures_during_restart) return std::exp(rate * restart_s) * grow / rate;
  return (1 / rate + restart_s) * grow;
}

GoodputEstimate expected_goodput(const FailureRates& f, const CheckpointPlan& p) {
  check_plan(p);
  const double rate = f.job_rate_per_s();
  GoodputEstimate e;
  e.interval_steps = clamp_interval(p);
  const std::int64_t k = e.interval_steps, full = p.steps / k, rem = p.steps % k;
  e.checkpoints = full + (rem > 0 ? 1 : 0);
  e.useful_s = double(p.steps) * p.step_s;
  e.failure_free_s = e.useful_s + double(e.checkpoints) * p.stall_s();
  e.expected_wall_s = expected_job_s(rate, p, k);
  const double b = p.stall_s();
  e.expected_failures = double(full) * expected_segment_failures(double(k) * p.step_s + b, rate, p.restart_s, p.failures_during_restart);
  if (rem > 0) e.expected_failures += expected_segment_failures(double(rem) * p.step_s + b, rate, p.restart_s, p.failures_during_restart);
  e.goodput = std::isfinite(e.expected_wall_s) && e.expected_wall_s > 0 ? e.useful_s / e.expected_wall_s : 0;
  return e;
}

double young_interval_s(double stall_s, double mtbf_s) {
  if (!std::isfinite(mtbf_s)) return kInf;
  return std::sqrt(2 * stall_s * mtbf_s);
}

double daly_interval_s(double stall_s, double mtbf_s) {
  if (!std::isfinite(mtbf_s)) return kInf;
  if (stall_s >= 2 * mtbf_s) return mtbf_s;
  const double x = stall_s / (2 * mtbf_s);
  return std::sqrt(2 * stall_s * mtbf_s) * (1 + std::sqrt(x) / 3 + x / 9) - stall_s;
}

OptimalInterval optimal_interval(const FailureRates& f, const CheckpointPlan& p) {
  check_plan(p);
  const double rate = f.job_rate_per_s(), b = p.stall_s();
  OptimalInterval o;
  o.young_s = young_interval_s(b, f.job_mtbf_s());
  o.daly_s = daly_interval_s(b, f.job_mtbf_s());
  if (rate == 0) {
    // Nothing fails: one checkpoint at the end is best.
    o.exact_s = kInf;
    o.best_steps = p.steps;
    o.searched_all = true;
    return o;
  }
  // d/dtau [E(tau+b)/tau] = 0  <=>  h(tau) = lambda (tau + b) + ln(1 - lambda tau) = 0, written in
  // logs so that it cannot overflow. h(0) = lambda b >= 0 and h decreases to -inf at tau = 1/lambda.
  double lo = 0, hi = 1 / rate;
  for (int i = 0; i < 200 && hi - lo > 1e-12 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    (rate * (mid + b) + std::log1p(-rate * mid) > 0 ? lo : hi) = mid;
  }
  o.exact_s = 0.5 * (lo + hi);
  // Whole steps: the remainder segment makes the job's time a little ragged in K, so search it
  // directly: every K when the job is short enough, else a window around the continuous optimum
  // (and K = S, a single segment).
  constexpr std::int64_t kFullSearch = 2'000'000, kWindow = 100'000;
  const std::int64_t centre = std::clamp<std::int64_t>(std::llround(std::min(o.exact_s / p.step_s, 9e18)), 1, p.steps);
  std::int64_t first = 1, last = p.steps;
  o.searched_all = p.steps <= kFullSearch;
  if (!o.searched_all) {
    first = std::max<std::int64_t>(1, centre - kWindow);
    last = std::min<std::int64_t>(p.steps, centre + kWindow);
  }
  double best = kInf;
  o.best_steps = centre;
  auto consider = [&](std::int64_t k) {
    const double t = expected_job_s(rate, p, k);
    if (t < best) {
      best = t;
      o.best_steps = k;
    }
  };
  consider(centre);
  for (std::int64_t k = first; k <= last; ++k) consider(k);
  consider(p.steps);
  return o;
}

MonteCarloResult simulate_goodput(const FailureRates& f, const CheckpointPlan& p, const MonteCarloOptions& o) {
  check_plan(p);
  SCALEOUT_CHECK(o.trials >= 1, "at least one Monte Carlo trial");
  MonteCarloResult r;
  r.trials = o.trials;
  std::mt19937_64 rng(o.seed);
  double mean = 0, m2 = 0, fails = 0;  // Welford's running mean and sum of squared deviations
  for (int t = 0; t < o.trials; ++t) {
    Trial trial(f, p, rng, o.max_events - r.events);
    const bool ok = trial.run();
    r.events += std::min(trial.events(), o.max_events - r.events);
    if (!ok) {
      r.capped = true;
      break;
    }
    ++r.finished;
    const double x = trial.wall_s(), d = x - mean;
    mean += d / r.finished;
    m2 += d * (x - mean);
    fails += double(trial.failures());
  }
  if (r.finished > 0) {
    const double n = r.finished;
    r.mean_wall_s = mean;
    r.mean_failures = fails / n;
    if (r.finished > 1) r.stderr_wall_s = std::sqrt(m2 / (n - 1) / n);
    r.goodput = double(p.steps) * p.step_s / r.mean_wall_s;
  }
  return r;
}

}  // namespace scaleout
