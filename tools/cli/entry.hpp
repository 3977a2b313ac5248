#pragma once
// What main.cpp calls: kept apart from the commands' headers (CLI11) so that the two programs
// built from main.cpp, `scaleout` and its MPI twin, compile only this much twice.

namespace scaleout {

// The command line (cli_main.cpp): parses argv, runs the command, returns the exit code.
int run_cli(int argc, char** argv);

// Whether mpirun (or another PMI launcher) started this process (sweep.cpp).
bool launched_by_mpirun();

// Sweeps started by mpirun run over the MPI ranks (sweep_mpi.cpp, only in the MPI twin; without
// it every rank would run the whole sweep alone).
void use_mpi_sweeps();

}  // namespace scaleout
