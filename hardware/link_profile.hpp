#pragma once
// The link figures of a calibrated profile (its "links" section, fitted by
// hardware/calibration/link_fit.hpp from scaleout-links measurements): per link class the fraction
// of the datasheet bandwidth NCCL's point-to-point transfers reach and a correction to NCCL's
// per-step latency, and per algorithm (ring, tree) a per-step correction and a bus efficiency.
// They apply to a cluster of the profile's GPU: the efficiencies replace the cluster's defaults
// (a cluster file that sets one keeps its own), the corrections go to the collective model.
#include <optional>
#include <string>

#include "hardware/cluster.hpp"

namespace scaleout {

struct LinkProfile {
  std::string measured_on;  // machine, driver, NCCL, date
  std::string source;       // how it was made
  // Fraction of the datasheet bandwidth usable by payload, by link class; absent: not measured.
  std::optional<double> nvlink_efficiency, pcie_efficiency, network_efficiency;
  CollectiveTuning tuning;

  bool empty() const {
    return !nvlink_efficiency && !pcie_efficiency && !network_efficiency && measured_on.empty();
  }
};

// The cluster with the profile's link figures applied; efficiencies the cluster file gave stay.
ClusterSpec apply_link_profile(ClusterSpec spec, const LinkProfile& links);

}  // namespace scaleout
