#pragma once
// Results out: the JSON object of the contract, a readable text report, and a Chrome/Perfetto
// trace of the step.
#include <ostream>
#include <string>

#include "sim/training/single_gpu_step.hpp"
#include "tools/io/json_reader.hpp"
#include "tools/io/scenario.hpp"

namespace scaleout {

// `baseline_tokens_per_s`: one GPU running the same micro-batch (0: not computed); gives the
// scaling efficiency of a parallel plan.
Json result_json(const Scenario& s, const StepResult& r, double baseline_tokens_per_s = 0);
void write_text_report(std::ostream& os, const Scenario& s, const StepResult& r, double baseline_tokens_per_s = 0);
void write_trace(const std::string& file, const StepResult& r);

}  // namespace scaleout
