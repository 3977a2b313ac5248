#pragma once
#include <iosfwd>
#include <string>
#include <vector>

#include "sim/training/single_gpu_step.hpp"

namespace scaleout {

struct ValidateOptions {
  std::string measurements;  // steps.jsonl from validation/single_gpu/measure_steps.py
  std::string profile;       // "auto" (calibrated if shipped), "datasheet", or a profile file
  std::string gpu = "h200";
};

struct MeasuredStep {
  std::string id, split;
  bool oom = false;
  double step_s = 0, peak_bytes = 0;
  double optimizer_s = 0;  // optimizer.step() alone (CUDA events around it); 0: not measured
  StepConfig config;
};
std::vector<MeasuredStep> read_measured_steps(const std::string& file, const GpuSpec& gpu);

// Fits the host (framework) overheads of a profile to the calibration rows of a steps file by
// coordinate descent on the median relative step-time error, and writes the profile.
void calibrate_host(const std::string& steps, const std::string& profile_in, const std::string& out, std::ostream& os,
                    bool host_only = false);

// Predicts every measured single-GPU step and prints the comparison (markdown) with the error
// statistics per split. Returns false when a target of the foundation issue is missed.
bool validate_single_gpu(const ValidateOptions& o, std::ostream& os);

// The published Megatron rows (validation/parallel/reference_runs.json) as scenarios, predicted.
bool validate_parallel(const std::string& file, const std::string& only, std::ostream& os,
                       const std::string& network = "analytic");

}  // namespace scaleout
