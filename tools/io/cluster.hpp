#pragma once
// Cluster files (hardware/clusters/*.json, or an object inline in a scenario) parsed into a
// ClusterSpec, and the topology built from it with its connectivity checked. Strict: unknown keys,
// wrong types and impossible values are InputErrors naming the file and the JSON path.
//
//   {"name": "dgx-a100-4n", "gpu": "a100-80g", "nodes": 4, "gpus_per_node": 8, "node": "nvswitch",
//    "nics_per_node": 8, "network": "infiniband-hdr", "fabric": "rail-optimized"}
//
// Every other field has a default (cluster_fields() lists them with units and help); bandwidths
// are strings with units ("200 Gb/s" is bits, "600 GB/s" is bytes), latencies "1 us" / "130 ns".
#include <string>
#include <vector>

#include "hardware/cluster.hpp"
#include "tools/io/json_reader.hpp"

namespace scaleout {

struct ClusterField {
  const char* key;
  const char* type;
  const char* default_value;
  const char* help;
};
// The documentation of every key a cluster file takes.
const std::vector<ClusterField>& cluster_fields();

ClusterSpec parse_cluster(const Json& j, const std::string& file, const std::string& path);
// A shipped cluster by name (hardware/clusters/NAME.json) or a cluster file by path.
ClusterSpec load_cluster(const std::string& name_or_file, std::string* file_out = nullptr);
std::vector<std::string> cluster_names();

// The topology of a spec; an InputError naming `file` and the responsible key of `path` when some
// GPU cannot reach another one.
Topology cluster_topology(const ClusterSpec& spec, const std::string& file, const std::string& path);

}  // namespace scaleout
