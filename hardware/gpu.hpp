#pragma once
// A GPU as its datasheet describes it. Every figure carries its source in the zoo file
// (hardware/gpus/*.json); efficiencies live in the compute profile, not here.
#include <array>
#include <string>
#include <vector>

#include "hardware/dtype.hpp"
#include "hardware/units.hpp"

namespace scaleout {

struct GpuSpec {
  std::string name;
  std::string description;
  Bytes memory;                 // capacity as the driver reports it
  BytesPerSecond hbm_bandwidth;
  // The fraction of hbm_bandwidth a streaming kernel (BabelStream triad) reaches, as published for
  // this GPU; 0: not measured (the default profile then takes the middle of the measured ones).
  double stream_efficiency = 0;
  int sms = 0;                  // streaming multiprocessors (compute units on AMD)
  Bytes l2_cache;
  Hertz boost_clock;
  std::array<FlopsPerSecond, kDtypeCount> peak_dense{};  // zero: not supported
  BytesPerSecond nvlink_bandwidth;  // total bidirectional per GPU, as vendors quote it
  std::string pcie;
  BytesPerSecond pcie_bandwidth;    // per direction
  double tdp_watts = 0;
  std::string default_node;
  int gpus_per_node = 1;
  std::vector<std::string> sources;
  std::string notes;

  FlopsPerSecond peak(Dtype d) const { return peak_dense[static_cast<std::size_t>(d)]; }
  bool supports(Dtype d) const { return peak(d).value > 0; }
};

}  // namespace scaleout
