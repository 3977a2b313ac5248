// The scaleout programs: `scaleout`, and where MPI is found its twin `scaleout-mpi`, the same
// command line with sweeps run over MPI ranks (SCALEOUT_HAVE_MPI). Only this file is compiled for
// each; the commands are in cli_main.cpp and the libraries.
#if defined(SCALEOUT_MPI_TWIN) && defined(__linux__)
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#endif

#include "tools/cli/entry.hpp"
#include "tools/cli/huge_pages.hpp"

namespace {
// This binary carries no MPI (it starts faster without Open MPI's libraries); a sweep that mpirun
// started runs in the build's MPI twin beside it, with the same arguments. Returns only if that
// could not be started.
void hand_mpi_sweep_to_twin(int argc, char** argv) {
#if defined(SCALEOUT_MPI_TWIN) && defined(__linux__)
  if (argc < 2 || std::strcmp(argv[1], "sweep") != 0 || !scaleout::launched_by_mpirun()) return;
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return;
  std::string twin(exe, std::size_t(n));
  twin = twin.substr(0, twin.rfind('/') + 1) + SCALEOUT_MPI_TWIN;
  execv(twin.c_str(), argv);
  std::cerr << "error: a sweep under mpirun runs in " << twin << " (scaleout built with MPI), which could not be started: "
            << std::strerror(errno) << "\n";
  std::exit(2);
#else
  (void)argc;
  (void)argv;
#endif
}
}  // namespace

int main(int argc, char** argv) {
#ifdef SCALEOUT_HAVE_MPI
  scaleout::use_mpi_sweeps();
#endif
  hand_mpi_sweep_to_twin(argc, argv);
  scaleout::restart_with_huge_pages(argv);
  return scaleout::run_cli(argc, argv);
}
