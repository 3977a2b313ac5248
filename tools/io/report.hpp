#pragma once
// Results out: the JSON object of the contract, a readable text report, and a Chrome/Perfetto
// trace of the step.
#include <ostream>
#include <string>

#include "sim/training/single_gpu_step.hpp"
#include "tools/io/json_reader.hpp"
#include "tools/io/scenario.hpp"

namespace scaleout {

Json result_json(const Scenario& s, const StepResult& r);
void write_text_report(std::ostream& os, const Scenario& s, const StepResult& r);
void write_trace(const std::string& file, const StepResult& r);

}  // namespace scaleout
