// The scaleout command line. Exit codes: 0 a finished simulation (also when the job does not
// fit), 2 bad input (the message names the file and JSON path), 1 an internal error.
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#if defined(SCALEOUT_MPI_TWIN) && defined(__linux__)
#include <climits>
#include <cstdio>
#include <unistd.h>
#endif

#include "sim/engine/check.hpp"
#include "tools/cli/commands.hpp"
#include "tools/cli/huge_pages.hpp"
#include "tools/cli/sweep.hpp"
#include "tools/io/input_error.hpp"

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
  hand_mpi_sweep_to_twin(argc, argv);
  scaleout::restart_with_huge_pages(argv);
  CLI::App app{"scaleout: a discrete-event simulator of distributed AI training"};
  app.require_subcommand(1);
  scaleout::register_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  } catch (const scaleout::InputError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const scaleout::InternalError& e) {
    std::cerr << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "internal error: " << e.what() << "\n";
    return 1;
  }
  return scaleout::command_exit_code();
}
