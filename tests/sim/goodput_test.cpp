// Failures, checkpoints and restarts. The closed form checked throughout: a segment of w seconds
// (work plus checkpoint stall) under failures of rate lambda with restart R takes on average
//   (1/lambda + R)(e^{lambda w} - 1)             restarts cannot fail
//   (1/lambda) e^{lambda R} (e^{lambda w} - 1)   restarts can (Daly 2006)
// and the job is floor(S/K) segments of K steps plus one of the remaining steps.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>

#include "sim/training/goodput.hpp"

using namespace scaleout;

namespace {

FailureRates one_rate(double mtbf_s) {
  FailureRates f;
  f.gpus = 1;
  f.gpus_per_node = 1;
  f.mtbf_gpu_s = mtbf_s;
  return f;
}

CheckpointPlan plan(double step_s, std::int64_t steps, std::int64_t k, double write_s, double restart_s, bool restart_fails) {
  CheckpointPlan p;
  p.step_s = step_s;
  p.steps = steps;
  p.interval_steps = k;
  p.write_s = write_s;
  p.restart_s = restart_s;
  p.failures_during_restart = restart_fails;
  return p;
}

}  // namespace

TEST_CASE("the job's failure rate sums GPUs and nodes", "[sim][goodput]") {
  FailureRates f;
  f.gpus = 20;
  f.gpus_per_node = 8;  // 3 nodes, the last one partly used
  f.mtbf_gpu_s = 1000;
  f.mtbf_node_s = 300;
  CHECK(f.nodes() == 3);
  CHECK(f.job_rate_per_s() == Approx(20.0 / 1000 + 3.0 / 300));
  CHECK(f.job_mtbf_s() == Approx(1 / 0.03));
  f.mtbf_gpu_s = f.mtbf_node_s = kNeverFails;
  CHECK(f.job_rate_per_s() == 0);
  CHECK(std::isinf(f.job_mtbf_s()));
}

TEST_CASE("the Llama 3 defaults reproduce 419 interruptions in 54 days on 16,384 GPUs", "[sim][goodput]") {
  const FailureRates f = llama3_failure_rates(16384, 8);
  CHECK(f.job_rate_per_s() * 54 * 86400 == Approx(419));
  // 268 GPU faults over 16,384 x 1,296 GPU-hours.
  CHECK(f.mtbf_gpu_s / 3600 == Approx(16384.0 * 1296 / 268));
}

TEST_CASE("one segment's expected time matches the hand-computed renewal formula", "[sim][goodput]") {
  // MTBF 1 h, a segment of 600 s work + 60 s checkpoint, restart 300 s:
  // e^{660/3600} - 1 = 0.2012147; (3600 + 300) x 0.2012147 = 784.74 s;
  // 3600 x e^{300/3600} x 0.2012147 = 787.32 s.
  const double rate = 1.0 / 3600;
  CHECK(expected_segment_s(660, rate, 300, false) == Approx(784.7375).epsilon(1e-6));
  CHECK(expected_segment_s(660, rate, 300, true) == Approx(787.3240).epsilon(1e-6));
  CHECK(expected_segment_s(660, 0, 300, true) == 660);
  // The job: 25 steps of 60 s with K = 10: two segments of 660 s and one of 300 + 60 s.
  const GoodputEstimate e = expected_goodput(one_rate(3600), plan(60, 25, 10, 60, 300, false));
  const double last = (3600 + 300) * std::expm1(360.0 / 3600);
  CHECK(e.checkpoints == 3);
  CHECK(e.expected_wall_s == Approx(2 * 784.7375 + last).epsilon(1e-6));
  CHECK(e.expected_failures == Approx(2 * 0.2012147 + std::expm1(0.1)).epsilon(1e-6));
  CHECK(e.goodput == Approx(1500 / e.expected_wall_s));
}

TEST_CASE("without failures goodput is the checkpoint overhead alone", "[sim][goodput]") {
  // 100 steps of 2 s, a 5 s checkpoint every 10 steps: 20 / (20 + 5) = 0.8.
  const FailureRates never = one_rate(kNeverFails);
  const GoodputEstimate e = expected_goodput(never, plan(2, 100, 10, 5, 600, true));
  CHECK(e.expected_wall_s == Approx(200 + 10 * 5));
  CHECK(e.goodput == Approx(0.8));
  CHECK(e.expected_failures == 0);
  // Asynchronous checkpointing: only the 1 s blocking part stalls training.
  CheckpointPlan async = plan(2, 100, 10, 5, 600, true);
  async.blocking_s = 1;
  CHECK(expected_goodput(never, async).goodput == Approx(20.0 / 21));
  // Nothing fails, so the best plan is one checkpoint, at the end.
  const OptimalInterval o = optimal_interval(never, plan(2, 100, 10, 5, 600, true));
  CHECK(o.best_steps == 100);
  CHECK(std::isinf(o.exact_s));
  CHECK(std::isinf(o.young_s));
}

TEST_CASE("an interval longer than the job is one segment", "[sim][goodput]") {
  const GoodputEstimate e = expected_goodput(one_rate(3600), plan(60, 25, 1000, 60, 300, false));
  CHECK(e.interval_steps == 25);
  CHECK(e.checkpoints == 1);
  CHECK(e.expected_wall_s == Approx((3600 + 300) * std::expm1(1560.0 / 3600)));
}

TEST_CASE("Daly's estimate reproduces his published optima and the exact optimum", "[sim][goodput]") {
  // Daly 2006, Figs. 3-5: dump time 5 min, M = 24 h, 6 h, 15 min -> 117, 57, 9.1 min.
  CHECK(daly_interval_s(5, 24 * 60) == Approx(117).margin(0.5));
  CHECK(daly_interval_s(5, 6 * 60) == Approx(57).margin(0.5));
  CHECK(daly_interval_s(5, 15) == Approx(9.1).margin(0.05));
  // His estimate is a perturbation series of the same optimum the bisection finds; it is
  // accurate to about (b/2M)^{3/2} relative, 7 % for M = 15 min and far less for the others.
  for (double m : {24.0 * 60, 6.0 * 60, 15.0}) {
    const OptimalInterval o = optimal_interval(one_rate(m), plan(0.01, 100000, 1, 5, 10, true));
    CHECK(o.exact_s == Approx(daly_interval_s(5, m)).epsilon(std::pow(5 / (2 * m), 1.5)));
  }
}

TEST_CASE("the optimum approaches Young's sqrt(2 C M) when C << M", "[sim][goodput]") {
  // C = 10 s, M = 10 h: Young 848.5 s; the next term of the series is of relative size
  // sqrt(C/2M) = 1.2 %.
  const double c = 10, m = 36000;
  const OptimalInterval o = optimal_interval(one_rate(m), plan(1, 1'000'000, 1, c, 600, true));
  CHECK(o.young_s == Approx(std::sqrt(2 * c * m)));
  CHECK(o.exact_s == Approx(o.young_s).epsilon(std::sqrt(c / (2 * m))));
  CHECK(o.exact_s < o.young_s);  // Young's first-order estimate overshoots
  // The whole-step optimum lies near the continuous one (the last, shorter segment can move it
  // while the cost curve is flat: by a few percent here) and beats Young's interval.
  CHECK(double(o.best_steps) == Approx(o.exact_s).epsilon(0.05));
  const CheckpointPlan at_best = plan(1, 1'000'000, o.best_steps, c, 600, true);
  const CheckpointPlan at_young = plan(1, 1'000'000, std::llround(o.young_s), c, 600, true);
  CHECK(expected_goodput(one_rate(m), at_best).goodput >= expected_goodput(one_rate(m), at_young).goodput);
}

TEST_CASE("the Monte Carlo on the engine agrees with the closed form", "[sim][goodput]") {
  // MTBF 2 h, 10 h of 1 s steps, a 30 s checkpoint every 20 min, a 10 min restart: about 6
  // failures per run. Tolerance: four standard errors of the Monte Carlo mean.
  const FailureRates f = one_rate(7200);
  for (bool restart_fails : {false, true}) {
    const CheckpointPlan p = plan(1, 36000, 1200, 30, 600, restart_fails);
    const GoodputEstimate e = expected_goodput(f, p);
    const MonteCarloResult mc = simulate_goodput(f, p, {2000, 42, 10'000'000});
    REQUIRE(mc.finished == 2000);
    CHECK_FALSE(mc.capped);
    CHECK(mc.stderr_wall_s < 0.01 * e.expected_wall_s);  // the check below means something
    CHECK(std::abs(mc.mean_wall_s - e.expected_wall_s) < 4 * mc.stderr_wall_s);
    CHECK(mc.mean_failures == Approx(e.expected_failures).epsilon(0.05));
    CHECK(mc.goodput == Approx(e.goodput).epsilon(4 * mc.stderr_wall_s / e.expected_wall_s));
  }
}

TEST_CASE("the Monte Carlo without failures is the failure-free time", "[sim][goodput]") {
  const MonteCarloResult mc = simulate_goodput(one_rate(kNeverFails), plan(2, 100, 10, 5, 600, true), {3, 1, 1000});
  CHECK(mc.finished == 3);
  CHECK(mc.mean_wall_s == Approx(250));
  CHECK(mc.stderr_wall_s == 0);
  CHECK(mc.events == 30);  // ten segments per trial
}

TEST_CASE("the Monte Carlo is deterministic for a seed", "[sim][goodput]") {
  const FailureRates f = one_rate(3600);
  const CheckpointPlan p = plan(1, 20000, 600, 20, 300, true);
  const MonteCarloResult a = simulate_goodput(f, p, {50, 7, 1'000'000});
  const MonteCarloResult b = simulate_goodput(f, p, {50, 7, 1'000'000});
  const MonteCarloResult c = simulate_goodput(f, p, {50, 8, 1'000'000});
  CHECK(a.mean_wall_s == b.mean_wall_s);
  CHECK(a.events == b.events);
  CHECK(a.mean_failures == b.mean_failures);
  CHECK(a.mean_wall_s != c.mean_wall_s);
}

TEST_CASE("a million GPUs: astronomical or infinite expected time, and a Monte Carlo that stops", "[sim][goodput]") {
  const FailureRates f = llama3_failure_rates(1'000'000, 8);
  CHECK(f.job_mtbf_s() < 200);  // a failure every three minutes
  // Checkpoint every 5 h of 10 s steps: e^{~98} restarts per segment, finite but astronomical.
  const CheckpointPlan p = plan(10, 100'000, 1800, 60, 600, true);
  const GoodputEstimate e = expected_goodput(f, p);
  CHECK(std::isfinite(e.expected_wall_s));
  CHECK(e.expected_wall_s > 1e40);
  CHECK(e.goodput < 1e-30);
  // One segment for the whole job overflows a double: infinity, goodput 0.
  const GoodputEstimate once = expected_goodput(f, plan(10, 100'000, 100'000, 60, 600, true));
  CHECK(std::isinf(once.expected_wall_s));
  CHECK(once.goodput == 0);
  // The Monte Carlo gives up at its event budget instead of hanging.
  const auto t0 = std::chrono::steady_clock::now();
  const MonteCarloResult mc = simulate_goodput(f, p, {10, 1, 200'000});
  CHECK(mc.capped);
  CHECK(mc.finished == 0);
  CHECK(mc.events == 200'000);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  // The optimum still exists: checkpoint often; goodput is small but not zero.
  const OptimalInterval o = optimal_interval(f, p);
  CheckpointPlan best = p;
  best.interval_steps = o.best_steps;
  CHECK(o.best_steps >= 1);
  CHECK(expected_goodput(f, best).goodput > e.goodput);
}
