#pragma once
// A cluster as its spec sheet describes it: what the nodes are (NVSwitch, NVLink-bridged pairs,
// PCIe only), how many NICs of what speed they carry, and the fabric between them. Plain values
// with units; parsed from hardware/clusters/*.json at the boundary (tools/io/cluster.cpp) and
// turned into a Topology graph by build_topology().
//
// Bandwidths are bytes/s. NVLink is given as vendors quote it (total bidirectional per GPU:
// 600 GB/s A100, 900 GB/s H100/H200, 1.8 TB/s B200), so each direction carries half. PCIe and
// NICs are per direction. Efficiencies are the fraction of a link payload can use; the defaults
// are NCCL's own figures (src/graph/topo.h: 20 GB/s per 25 GB/s NVLink3 lane, 20.6 per NVLink4
// lane, 40.1 per 50 GB/s NVLink5 lane; 12 GB/s per 100 Gb/s NIC; 24 GB/s per Gen4 x16 slot).
#include <string>
#include <vector>

#include "hardware/topology.hpp"
#include "hardware/units.hpp"

namespace scaleout {

enum class NodeKind : std::uint8_t { nvswitch, nvlink_bridge_pairs, pcie };
enum class FabricKind : std::uint8_t { single_switch, fat_tree, rail_optimized };
enum class NetworkKind : std::uint8_t { infiniband, roce };

struct ClusterSpec {
  std::string name;
  std::string description;
  std::string gpu;  // zoo name
  GpuGeneration generation = GpuGeneration::hopper;
  int nodes = 1;
  int gpus_per_node = 8;

  NodeKind node_kind = NodeKind::nvswitch;
  BytesPerSecond nvlink_bandwidth;   // total bidirectional per GPU
  double nvlink_efficiency = 0.824;
  Time nvlink_latency = Time::from_ns(150);
  bool nvls = false;                 // NVLink SHARP: the NVSwitch reduces (Hopper and later)
  BytesPerSecond pcie_bandwidth{32e9};  // per direction, one x16 link
  double pcie_efficiency = 0.75;
  Time pcie_latency = Time::from_ns(250);
  bool pcie_p2p = true;
  int gpus_per_pcie_switch = 2;

  int nics_per_node = 0;
  BytesPerSecond nic_bandwidth;      // per NIC and direction
  NetworkKind network = NetworkKind::infiniband;
  double network_efficiency = 0.96;
  Time nic_latency = Time::from_ns(600);
  FabricKind fabric = FabricKind::rail_optimized;
  int levels = 2;                    // fat-tree levels (1: one switch)
  double oversubscription = 1;       // leaf downlink : uplink bandwidth
  int switch_radix = 64;             // ports per network switch
  Time switch_latency = Time::from_ns(130);
  BytesPerSecond fabric_link_bandwidth;  // switch-to-switch links; zero: the NIC speed
  CollectiveTuning tuning;           // calibrated corrections (a profile's "links"), none by default
  // Efficiencies the cluster file gave itself: a calibrated profile does not replace them.
  bool explicit_nvlink_efficiency = false, explicit_pcie_efficiency = false, explicit_network_efficiency = false;

  std::vector<std::string> sources;
  std::string notes;

  int gpus() const { return nodes * gpus_per_node; }
};

// The graph of a cluster. The spec must be valid (the parser checks it); the graph may still be
// disconnected (no NICs on a multi-node cluster), which Topology::find_disconnected() reports.
Topology build_topology(const ClusterSpec& spec);

// NCCL's effective NVLink figure per lane as a fraction of the lane's 25 GB/s (50 GB/s for
// NVLink5), by GPU generation.
double default_nvlink_efficiency(GpuGeneration g);

}  // namespace scaleout
