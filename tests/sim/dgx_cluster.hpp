#pragma once
// The DGX-like cluster the network tests build on: nodes of eight GPUs on an NVSwitch, one NIC
// per GPU (A100: HDR 25 GB/s; H100: NDR 50 GB/s, NVLS).
#include "hardware/cluster.hpp"

namespace scaleout::test {

inline ClusterSpec dgx(GpuGeneration gen, int nodes) {
  ClusterSpec c;
  c.generation = gen;
  c.gpu = gen == GpuGeneration::hopper ? "h100-sxm" : "a100-80g";
  c.nodes = nodes;
  c.gpus_per_node = 8;
  c.node_kind = NodeKind::nvswitch;
  c.nvlink_bandwidth = BytesPerSecond{gen == GpuGeneration::hopper ? 900e9 : 600e9};
  c.nvlink_efficiency = default_nvlink_efficiency(gen);
  c.nvls = gen == GpuGeneration::hopper;
  c.pcie_bandwidth = BytesPerSecond{gen == GpuGeneration::hopper ? 64e9 : 32e9};
  c.nics_per_node = 8;
  c.nic_bandwidth = BytesPerSecond{gen == GpuGeneration::hopper ? 50e9 : 25e9};
  c.switch_radix = 40;
  return c;
}

}  // namespace scaleout::test
