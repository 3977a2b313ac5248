// One fuzz entry point over every parser a user's file reaches: scenario files (and, when small,
// their simulation), sweep files (and their first points), cluster files with their topology,
// and quantities with units. The first byte picks the parser; the rest is the file's text.
// Bad input must end in InputError (or the units parser's invalid_argument, or a JSON syntax
// error); any other exception, crash, hang or runaway allocation is a bug.
//
// Built twice: with libFuzzer (SCALEOUT_FUZZ=ON, clang) as scaleout_fuzz, and with the
// replay driver below (every build) so that the committed corpus runs in the plain test suite.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "sim/training/step.hpp"
#include "tools/io/cluster.hpp"
#include "tools/io/input_error.hpp"
#include "tools/io/simulate.hpp"
#include "tools/io/sweep.hpp"
#include "tools/io/units_parse.hpp"

namespace {

void scenario(const std::string& text) {
  const scaleout::Json j = scaleout::Json::parse(text);
  const scaleout::Scenario s = scaleout::parse_scenario(j, "fuzz-scenario.json");
  // Simulate what is small enough to keep the fuzzer fast (each input has 10 s under ASan); a
  // big cluster graph alone (flow network) takes seconds to build, so large clusters stop here.
  if (s.gpus() > 512) return;
  const scaleout::StepConfig cfg = scaleout::step_config(s);
  const double replicas = cfg.fold ? 1.0 : double(s.parallelism.dp * s.parallelism.tp * s.parallelism.cp);
  if (double(scaleout::simulated_micro_batches(cfg)) * double(s.model.layers) * double(s.parallelism.pp) * replicas <= 4096)
    (void)scaleout::simulate_scenario(s);
}

void sweep(const std::string& text) {
  const scaleout::Sweep sw = scaleout::parse_sweep(text, "fuzz-sweep.json");
  for (std::size_t i = 0; i < sw.size() && i < 2; ++i) (void)sw.params(i);
}

void cluster(const std::string& text) {
  const scaleout::Json j = scaleout::Json::parse(text);
  const scaleout::ClusterSpec c = scaleout::parse_cluster(j, "fuzz-cluster.json", "");
  if (double(c.nodes) * double(c.gpus_per_node) <= 512) (void)scaleout::cluster_topology(c, "fuzz-cluster.json", "");
}

void quantity(const std::string& text, std::uint8_t kind) {
  (void)scaleout::parse_quantity(text, static_cast<scaleout::QuantityKind>(kind % 6));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t which = data[0];
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    switch (which) {
      case 'S': scenario(text); break;
      case 'W': sweep(text); break;
      case 'C': cluster(text); break;
      default: quantity(text, which); break;
    }
  } catch (const scaleout::InputError&) {
  } catch (const std::invalid_argument&) {  // parse_quantity's "expected ..." message
  } catch (const scaleout::Json::exception&) {
    // JSON syntax errors from Json::parse. A type error inside a parser would also land here,
    // but the strict reader checks every type before it reads, so those do not reach this point.
  }
  return 0;
}
