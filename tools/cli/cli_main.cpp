// The scaleout command line, shared by `scaleout` and its MPI twin (main.cpp). Exit codes: 0 a
// finished simulation (also when the job does not fit), 2 bad input (the message names the file
// and JSON path), 1 an internal error.
#include <exception>
#include <iostream>

#include <CLI/CLI.hpp>

#include "sim/engine/check.hpp"
#include "tools/cli/commands.hpp"
#include "tools/cli/entry.hpp"
#include "tools/io/input_error.hpp"

namespace scaleout {

int run_cli(int argc, char** argv) {
  CLI::App app{"scaleout: a discrete-event simulator of distributed AI training"};
  app.require_subcommand(1);
  register_commands(app);
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
  } catch (const InputError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const InternalError& e) {
    std::cerr << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "internal error: " << e.what() << "\n";
    return 1;
  }
  return command_exit_code();
}

}  // namespace scaleout
