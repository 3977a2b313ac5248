#pragma once
#include <CLI/CLI.hpp>

namespace scaleout {

// Adds every subcommand to the app; their callbacks run during parse and throw InputError on
// bad input.
void register_commands(CLI::App& app);
int command_exit_code();

}  // namespace scaleout
