#pragma once
// One scenario, simulated: the entry point the CLI, sweeps and plans share.
#include "sim/training/single_gpu_step.hpp"
#include "tools/io/json_reader.hpp"
#include "tools/io/scenario.hpp"

namespace scaleout {

StepResult simulate_scenario(const Scenario& s, bool keep_trace = false);
// The result object of `scaleout run --format json`.
Json simulate_scenario_json(const Scenario& s);

}  // namespace scaleout
