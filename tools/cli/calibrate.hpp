#pragma once
#include <iosfwd>
#include <string>
#include <vector>

#include "hardware/calibration/fit.hpp"
#include "hardware/calibration/link_fit.hpp"

namespace scaleout {

struct CalibrateOptions {
  std::string measurements;
  std::string out;
  std::string gpu;  // zoo name; empty: derived from the file's GPU name
  std::string attention_impl = "torch_flash";
  std::string residuals;  // optional CSV of every row: measured, predicted, held out  // which attention rows to fit (what PyTorch SDPA runs)
  std::string links;      // scaleout-links measurements to fit into the profile's "links" (also detected by schema)
  std::string cluster;    // the machine the links were measured on (shipped name or file); empty: one node of the GPU
  std::string profile;    // links only: the profile to add "links" to; empty: the GPU's shipped profile
};

// Reads a scaleout-links measurements file (schema scaleout-links/1) strictly: unknown keys, wrong
// types and ranks outside the machine are InputErrors naming the file and the JSON path. Rows the
// harness could not take (an "error" field) are skipped.
LinkMeasurements read_link_measurements(const std::string& file);
// The cluster the links were measured on: `cluster` (a shipped name or a file), or one node of the
// GPU with the measured number of GPUs.
ClusterSpec link_cluster(const LinkMeasurements& m, const std::string& gpu_zoo, const std::string& cluster);

// Reads a harness measurements file (schema scaleout-measurements/1); bad input throws InputError
// naming the file and JSON path.
std::vector<KernelMeasurement> read_measurements(const std::string& file, std::string* gpu_name = nullptr,
                                                 std::string* measured_on = nullptr,
                                                 const std::string& attention_impl = "");
void calibrate_fit(const CalibrateOptions& o, std::ostream& os);
// FP8 split accumulation alone (gemm_fp8_split_accumulate) from the harness's fp8_acc pairs, into a
// copy of `profile` written to `out`.
void calibrate_fp8_accumulate(const std::string& measurements, const std::string& profile, const std::string& gpu,
                              const std::string& out, std::ostream& os);
// A profile's predictions against a measurements file it was not fitted to (another day, another
// machine): median and worst error per kind and GEMM dtype; rows to `residuals` (CSV) if given.
void calibrate_check(const std::string& measurements, const std::string& profile, const std::string& gpu,
                     const std::string& residuals, std::ostream& os);

}  // namespace scaleout
