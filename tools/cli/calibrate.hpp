#pragma once
#include <iosfwd>
#include <string>
#include <vector>

#include "hardware/calibration/fit.hpp"

namespace scaleout {

struct CalibrateOptions {
  std::string measurements;
  std::string out;
  std::string gpu;  // zoo name; empty: derived from the file's GPU name
  std::string attention_impl = "torch_flash";
  std::string residuals;  // optional CSV of every row: measured, predicted, held out  // which attention rows to fit (what PyTorch SDPA runs)
};

// Reads a harness measurements file (schema scaleout-measurements/1); bad input throws InputError
// naming the file and JSON path.
std::vector<KernelMeasurement> read_measurements(const std::string& file, std::string* gpu_name = nullptr,
                                                 std::string* measured_on = nullptr,
                                                 const std::string& attention_impl = "");
void calibrate_fit(const CalibrateOptions& o, std::ostream& os);

}  // namespace scaleout
