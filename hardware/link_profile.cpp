#include "hardware/link_profile.hpp"

namespace scaleout {

ClusterSpec apply_link_profile(ClusterSpec spec, const LinkProfile& links) {
  if (links.nvlink_efficiency && !spec.explicit_nvlink_efficiency) spec.nvlink_efficiency = *links.nvlink_efficiency;
  if (links.pcie_efficiency && !spec.explicit_pcie_efficiency) spec.pcie_efficiency = *links.pcie_efficiency;
  if (links.network_efficiency && !spec.explicit_network_efficiency)
    spec.network_efficiency = *links.network_efficiency;
  spec.tuning = links.tuning;
  return spec;
}

}  // namespace scaleout
