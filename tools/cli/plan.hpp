#pragma once
#include <CLI/CLI.hpp>

namespace scaleout {

// `scaleout plan SCENARIO.json`: searches the parallel plans for the scenario's model and GPU
// budget, rejects those that do not fit, ranks the rest, and says whether one GPU would do.
void register_plan_command(CLI::App& app);

}  // namespace scaleout
