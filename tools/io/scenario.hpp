#pragma once
// The boundary: scenario files and the shipped zoo (models/zoo, hardware/gpus, hardware/profiles)
// parsed into plain specs. Nothing below this layer reads JSON.
#include <optional>
#include <string>
#include <vector>

#include "hardware/cluster.hpp"
#include "hardware/compute_profile.hpp"
#include "hardware/gpu.hpp"
#include "models/training.hpp"
#include "models/transformer.hpp"
#include "sim/training/single_gpu_step.hpp"
#include "tools/io/json_reader.hpp"

namespace scaleout {

struct Parallelism {
  std::int64_t dp = 1, tp = 1, pp = 1, cp = 1, ep = 1;
  bool sequence_parallel = false;
  bool tp_comm_overlap = false;
  std::string pp_schedule = "1f1b";
  std::int64_t virtual_stages = 1;
  std::int64_t zero = 0;
  std::string fsdp;  // empty: none
  bool offload_optimizer = false;
  double ddp_bucket_bytes = 25.0 * 1024 * 1024;
  bool overlap_grad_reduce = true;
  bool overlap_param_gather = false;
  std::string grad_reduce_dtype;  // empty: the precision recipe's gradient dtype
  std::string order = "tp-cp-dp-pp";
  bool offload_params = false;
  std::vector<std::int64_t> layers_per_stage;  // empty: even split
  std::string pipeline_p2p = "async";          // "blocking": Megatron before 2023
  std::int64_t pipeline_runs = 1;              // the schedule run this many times a step (torch pipelining's GA)
};

// What the seed article (or a paper) claims about the scenario, kept beside the prediction.
struct Claim {
  std::string source;
  std::string quote;
  std::optional<bool> fits;
  std::string figure;
};

struct Scenario {
  std::string file;
  std::string name;
  std::string description;
  TransformerSpec model;
  TrainingSpec training;
  GpuSpec gpu;
  ComputeProfile profile;
  std::int64_t nodes = 1;
  std::int64_t gpus_per_node = 1;
  // Links per GPU and direction (the flow-level network refines these).
  double intra_node_bandwidth = 0;
  double inter_node_bandwidth = 0;
  double intra_node_latency_s = 3e-6;
  double inter_node_latency_s = 6e-6;
  Parallelism parallelism;
  // The cluster's graph (cluster.topology), when one was named or given inline.
  std::optional<ClusterSpec> cluster_spec;
  // simulation.network: "analytic" costs each collective by its closed form on the group's
  // links; "flow" runs it as flows on the cluster's graph, contending with concurrent traffic.
  // Default: "flow" when cluster.topology gives a graph, else "analytic".
  std::string network = "analytic";
  // faults.links: a link of the cluster graph degraded or failed (flow network only).
  struct LinkFault {
    std::string kind;  // "nic" (a NIC's network link), "nvlink" (a GPU's NVLink), "fabric" (switch to switch)
    std::int64_t node = 0, index = 0;  // nic: node and NIC; nvlink: node and local GPU; fabric: index
    double factor = 1;                 // bandwidth left, (0, 1]
    bool failed = false;
    std::string path;                  // JSON path, for errors
  };
  std::vector<LinkFault> link_faults;
  std::optional<bool> fold;  // simulation.fold; unset: folded unless stragglers break the symmetry
  bool collectives_apart = true;  // simulation.apart
  bool extrapolate = true;         // simulation.extrapolate
  FaultSpec faults;
  std::optional<Claim> claim;
  std::int64_t gpus() const { return nodes * gpus_per_node; }
};

// Where the zoo lives: $SCALEOUT_DATA if set, else the source tree this binary was built from.
std::string data_dir();
std::vector<std::string> zoo_names(const std::string& kind);  // "models" or "gpus"

TransformerSpec load_model(const std::string& name);
GpuSpec load_gpu(const std::string& name);
TransformerSpec parse_model(const Json& j, const std::string& file, const std::string& path);
GpuSpec parse_gpu(const Json& j, const std::string& file, const std::string& path);
ComputeProfile parse_profile(const Json& j, const std::string& file, const std::string& path, const GpuSpec& gpu);
// The profile the simulator uses for a GPU: hardware/profiles/<gpu>.json when one was calibrated,
// else the physics-based default.
ComputeProfile default_profile_for(const GpuSpec& gpu);

// Applies "--set a.b.c=VALUE" (VALUE as JSON when it parses, else as a string).
void apply_override(Json& scenario, const std::string& assignment);

Scenario parse_scenario(const Json& j, const std::string& file);
Scenario load_scenario(const std::string& file, const std::vector<std::string>& overrides = {});

}  // namespace scaleout
