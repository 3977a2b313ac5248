#pragma once
#include <CLI/CLI.hpp>

namespace scaleout {

// `scaleout goodput SCENARIO.json --tokens N`: the scenario's simulated step under GPU and node
// failures with checkpoints and restarts: job MTBF, the checkpoint interval that maximises goodput
// (exact, Young, Daly), goodput and expected time to train, and a Monte Carlo cross-check.
void register_goodput_command(CLI::App& app);

}  // namespace scaleout
