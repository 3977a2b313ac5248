#pragma once
// Failures, checkpoints and restarts of a synchronous training job: expected wall time and goodput
// in closed form, the checkpoint interval that maximises goodput, and a Monte Carlo check on the
// event engine.
//
// Model. Failures of the job arrive as a Poisson process of rate
//   lambda = gpus / MTBF_gpu + nodes / MTBF_node
// (any one GPU or node failing stops a synchronous job). Training is cut into segments of W =
// K * T_step of work followed by the blocking part b of a checkpoint (b = the whole write when
// synchronous; with asynchronous checkpointing only the snapshot stalls training and the checkpoint
// counts as committed when its blocking part ends: the rollback when a failure strikes during the
// background flush is neglected, a term of order lambda * (write - b) per checkpoint). A failure
// loses the work since the last checkpoint and costs a restart R (detection, for a hang the NCCL
// timeout; re-scheduling; loading the checkpoint). The last segment ends with a checkpoint too
// (the trained model is saved).
//
// Expected time to complete one segment of length w = W + b (renewal argument, exponential
// failures):
//   E(w) = (1/lambda + R) (e^{lambda w} - 1)          failures cannot strike during a restart
//   E(w) = (1/lambda) e^{lambda R} (e^{lambda w} - 1)  they can, and restart the restart
// the second is Daly 2006 (J. T. Daly, "A higher order estimate of the optimum checkpoint
// interval for restart dumps", FGCS 22(3), eq. for T_w with T_s = tau). Expected failures per
// segment: e^{lambda w} - 1 (times e^{lambda R} in the second case). The job of S steps is
// floor(S/K) segments of K steps and one of S mod K steps; goodput = S * T_step / E[wall].
//
// Optimum. The work between checkpoints tau minimising E(tau + b) / tau solves
//   e^{lambda (tau + b)} (1 - lambda tau) = 1
// (R drops out), found by bisection; the best whole number of steps is then searched on the whole
// job's expression. For comparison: Young 1974 (J. W. Young, "A first order approximation to the
// optimum checkpoint interval", CACM 17(9)) tau = sqrt(2 b M), and Daly 2006 tau = sqrt(2 b M)
// [1 + sqrt(b/2M)/3 + (b/2M)/9] - b for b < 2M, else M, with M = 1/lambda.
#include <cstdint>
#include <limits>

namespace scaleout {

inline constexpr double kNeverFails = std::numeric_limits<double>::infinity();

struct FailureRates {
  std::int64_t gpus = 1;
  std::int64_t gpus_per_node = 8;
  double mtbf_gpu_s = kNeverFails;   // per GPU
  double mtbf_node_s = kNeverFails;  // per node: everything else that stops the job (NICs, PSUs, host, ...)

  std::int64_t nodes() const;
  double job_rate_per_s() const;  // lambda; 0 when nothing fails
  double job_mtbf_s() const;      // 1/lambda; infinity when nothing fails
};

// Llama 3 405B pre-training (Meta, "The Llama 3 Herd of Models", 2024, section 3.3.4 and
// Table 5): 419 unexpected interruptions in a 54-day snapshot on 16,384 H100 GPUs in 8-GPU
// servers. 268 were GPU faults (faulty GPU 148, HBM3 72, SRAM 19, GPU system processor 17, silent
// data corruption 6, thermal interface and sensor 6): spread over the GPU-hours they give the
// per-GPU MTBF. The other 151 (network switch and cable 35, unplanned host maintenance 32, host
// parts 21, software 56, NCCL watchdog 7) also grow with the job's size; spread over the node-hours
// they give the per-node MTBF. Together they reproduce the observed job MTBF, 54 d / 419 = 3.1 h.
FailureRates llama3_failure_rates(std::int64_t gpus, std::int64_t gpus_per_node);

struct CheckpointPlan {
  double step_s = 0;                // T_step
  std::int64_t steps = 1;           // S, steps to train
  std::int64_t interval_steps = 1;  // K, steps between checkpoints (clamped to S)
  double write_s = 0;               // time to write one checkpoint
  double blocking_s = -1;           // the part that stalls training; < 0: all of write_s (synchronous)
  double restart_s = 0;             // R
  bool failures_during_restart = true;

  double stall_s() const { return blocking_s < 0 ? write_s : blocking_s; }
};

// Expected time to complete `work_s` of segment (work plus checkpoint stall) under failures of
// `rate` per second with restart `restart_s`; +infinity when it overflows a double.
double expected_segment_s(double work_s, double rate, double restart_s, bool failures_during_restart);

struct GoodputEstimate {
  std::int64_t interval_steps = 1;  // K as used (clamped to [1, S])
  std::int64_t checkpoints = 0;     // ceil(S / K)
  double useful_s = 0;              // S * T_step
  double failure_free_s = 0;        // useful plus every checkpoint stall
  double expected_wall_s = 0;       // may be +infinity
  double expected_failures = 0;     // may be +infinity
  double goodput = 0;               // useful / expected wall, 0 when that is infinite
};

GoodputEstimate expected_goodput(const FailureRates& f, const CheckpointPlan& p);

struct OptimalInterval {
  double exact_s = 0;              // work between checkpoints minimising E(tau+b)/tau; infinity without failures
  double young_s = 0;              // sqrt(2 b M); infinity without failures
  double daly_s = 0;               // Daly 2006; infinity without failures
  std::int64_t best_steps = 1;     // whole steps minimising the whole job's expected wall time
  bool searched_all = false;       // every K in [1, S] was evaluated (else a window around exact_s)
};

double young_interval_s(double stall_s, double mtbf_s);
double daly_interval_s(double stall_s, double mtbf_s);
// plan.interval_steps is ignored.
OptimalInterval optimal_interval(const FailureRates& f, const CheckpointPlan& p);

struct MonteCarloOptions {
  int trials = 100;
  std::uint64_t seed = 1;
  // Events over all trials; past it the remaining trials are abandoned and the result says so.
  std::uint64_t max_events = 10'000'000;
};

struct MonteCarloResult {
  int trials = 0;            // requested
  int finished = 0;          // trials that completed within the event budget
  bool capped = false;       // the event budget (or the engine's clock range) ran out
  std::uint64_t events = 0;  // engine events executed
  double mean_wall_s = 0;    // over the finished trials
  double stderr_wall_s = 0;  // standard error of that mean (0 with fewer than two trials)
  double mean_failures = 0;
  double goodput = 0;        // useful / mean wall
};

// Simulates failures, checkpoints and restarts on the event engine, one Simulator per trial, with a
// std::mt19937_64 seeded by options.seed (same seed, same result). The engine's clock counts one
// tick per nanosecond of job time here, so that runs of up to 292 years fit its int64.
MonteCarloResult simulate_goodput(const FailureRates& f, const CheckpointPlan& p, const MonteCarloOptions& o);

}  // namespace scaleout
