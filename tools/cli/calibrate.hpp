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
};

// Reads a harness measurements file (schema scaleout-measurements/1); bad input throws InputError
// naming the file and JSON path.
std::vector<KernelMeasurement> read_measurements(const std::string& file, std::string* gpu_name = nullptr,
                                                 std::string* measured_on = nullptr);
void calibrate_fit(const CalibrateOptions& o, std::ostream& os);

}  // namespace scaleout
