#pragma once
#include <iosfwd>
#include <string>

namespace scaleout {

struct ValidateOptions {
  std::string measurements;  // steps.jsonl from validation/single_gpu/measure_steps.py
  std::string profile;       // "auto" (calibrated if shipped), "datasheet", or a profile file
  std::string gpu = "h200";
};

// Predicts every measured single-GPU step and prints the comparison (markdown) with the error
// statistics per split. Returns false when a target of the foundation issue is missed.
bool validate_single_gpu(const ValidateOptions& o, std::ostream& os);

}  // namespace scaleout
