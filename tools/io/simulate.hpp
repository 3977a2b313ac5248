#pragma once
// One scenario, simulated: the entry point the CLI, sweeps and plans share.
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "sim/training/single_gpu_step.hpp"
#include "tools/io/json_reader.hpp"
#include "tools/io/scenario.hpp"

namespace scaleout {

StepConfig step_config(const Scenario& s);
StepResult simulate_scenario(const Scenario& s, bool keep_trace = false);
// The plan search's: a plan whose persistent state alone outgrows the GPU is not simulated
// (StepConfig::screen_state).
StepResult simulate_candidate(const Scenario& s);
// The scenario's job on one healthy GPU: no parallelism, no faults.
Scenario on_one_gpu(const Scenario& s);
// The one-GPU step's times at 1 and 2 micro-batches, from which the baseline extends to any
// accumulation. They depend on the model, the training settings and the GPU, not on the plan, so
// a sweep over plans keeps them, per baseline_key, instead of simulating them at every point.
struct BaselineTimes {
  double one = 0, two = 0;
};
class BaselineCache {
 public:
  std::optional<BaselineTimes> find(const std::string& key) const;
  void put(const std::string& key, BaselineTimes times);

 private:
  mutable std::mutex mutex_;  // sweep threads share one cache
  std::map<std::string, BaselineTimes> times_;
};
// The scenario's JSON without what the one-GPU job does not read (on_one_gpu replaces it): the
// parallelism, the stragglers, the node count and shape, the cluster's graph, the network model
// and its link faults, the global batch.
std::string baseline_key(const Json& scenario);
// Tokens/s of one GPU running the same job: same micro-batch and global batch, by gradient
// accumulation (0 for a one-GPU scenario). With a cache, the times are looked up under `key`
// (baseline_key of the scenario's JSON) first.
double single_gpu_baseline(const Scenario& s, BaselineCache* cache = nullptr, const std::string& key = {});
// The result object of `scaleout run --format json`.
Json simulate_scenario_json(const Scenario& s, BaselineCache* cache = nullptr, const std::string& key = {});

}  // namespace scaleout
