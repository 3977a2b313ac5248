// The scaleout command line. Exit codes: 0 a finished simulation (also when the job does not
// fit), 2 bad input (the message names the file and JSON path), 1 an internal error.
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#if defined(__linux__) && defined(__GLIBC__)
#include <unistd.h>
#endif

#include <CLI/CLI.hpp>

#include "sim/engine/check.hpp"
#include "tools/cli/commands.hpp"
#include "tools/io/input_error.hpp"

namespace {

// A step's task arrays are tens to hundreds of MB, touched once: in a fresh process most of a
// simulation's time went to page faults on them (18k faults, 60 % of a 64-GPU pipeline run
// through the CLI on a VM). glibc backs its large blocks with transparent huge pages when the
// tunable glibc.malloc.hugetlb=1 is set, which is read at start-up only: the process starts again
// once with it (0.27 -> 0.10 s for that run). SCALEOUT_NO_HUGEPAGES=1 turns it off; processes
// that MPI launched are left alone.
void restart_with_huge_pages(char** argv) {
#if defined(__linux__) && defined(__GLIBC__)
  if (std::getenv("SCALEOUT_NO_HUGEPAGES") || std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK")) return;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables && std::strstr(tunables, "glibc.malloc.hugetlb")) return;
  const std::string value = (tunables && *tunables ? std::string(tunables) + ":" : std::string()) + "glibc.malloc.hugetlb=1";
  if (setenv("GLIBC_TUNABLES", value.c_str(), 1) != 0) return;
  execv("/proc/self/exe", argv);
  // Could not start again: carry on as we are, without the tunable in the environment.
  if (tunables) setenv("GLIBC_TUNABLES", tunables, 1);
  else unsetenv("GLIBC_TUNABLES");
#else
  (void)argv;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  restart_with_huge_pages(argv);
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
