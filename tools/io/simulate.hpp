#pragma once
// One scenario, simulated: the entry point the CLI, sweeps and plans share.
#include "sim/training/single_gpu_step.hpp"
#include "tools/io/json_reader.hpp"
#include "tools/io/scenario.hpp"

namespace scaleout {

StepConfig step_config(const Scenario& s);
StepResult simulate_scenario(const Scenario& s, bool keep_trace = false);
// The scenario's job on one healthy GPU: no parallelism, no faults.
Scenario on_one_gpu(const Scenario& s);
// Tokens/s of one GPU running the same job: same micro-batch and global batch, by gradient
// accumulation (0 for a one-GPU scenario).
double single_gpu_baseline(const Scenario& s);
// The result object of `scaleout run --format json`.
Json simulate_scenario_json(const Scenario& s);

}  // namespace scaleout
