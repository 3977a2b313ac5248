#include "tools/io/simulate.hpp"

#include "tools/io/report.hpp"

namespace scaleout {

StepResult simulate_scenario(const Scenario& s, bool keep_trace) {
  if (s.gpus() > 1)
    throw InputError(s.file, "/cluster",
                     "this build simulates one GPU; parallel plans over " + std::to_string(s.gpus()) +
                         " GPUs are not implemented yet");
  StepConfig cfg;
  cfg.model = s.model;
  cfg.training = s.training;
  cfg.gpu = s.gpu;
  cfg.profile = s.profile;
  cfg.keep_trace = keep_trace;
  return simulate_single_gpu_step(cfg);
}

Json simulate_scenario_json(const Scenario& s) { return result_json(s, simulate_scenario(s)); }

}  // namespace scaleout
