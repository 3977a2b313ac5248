// The scaleout command line. Exit codes: 0 a finished simulation (also when the job does not
// fit), 2 bad input (the message names the file and JSON path), 1 an internal error.
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "sim/engine/check.hpp"
#include "tools/cli/commands.hpp"
#include "tools/cli/huge_pages.hpp"
#include "tools/io/input_error.hpp"

int main(int argc, char** argv) {
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
