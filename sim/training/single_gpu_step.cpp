#include "sim/training/single_gpu_step.hpp"

#include "sim/training/step.hpp"

namespace scaleout {

StepResult simulate_single_gpu_step(const StepConfig& config) {
  StepConfig one = config;
  one.parallel = ParallelPlan{};
  return simulate_step(one);
}

}  // namespace scaleout
