#pragma once
// A parallel plan: how the GPUs split the work (Megatron's order of groups: tensor, context,
// data, pipeline), how the data-parallel group shares state (ZeRO 1/2/3, FSDP), the pipeline
// schedule, and the links the groups communicate over.
#include <cstdint>
#include <string>
#include <vector>

namespace scaleout {

// zero_bubble: ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): 1F1B with each
// backward split into B (input gradient, sent on at once) and W (weight gradient), stage i
// deferring i W passes into the time it would otherwise wait.
enum class PipelineSchedule : std::uint8_t { gpipe, one_f_one_b, interleaved, zero_bubble };
enum class FsdpMode : std::uint8_t { none, full_shard, shard_grad_op, hybrid_shard, no_shard };

struct LinkParams {
  // Per GPU and direction; efficiency is the fraction NCCL's bus bandwidth reaches of it.
  double intra_node_bandwidth = 0;  // NVLink/NVSwitch, or PCIe without NVLink
  double intra_node_efficiency = 0.8;
  double intra_node_latency_s = 3e-6;
  double inter_node_bandwidth = 0;  // the NIC share of one GPU
  double inter_node_efficiency = 0.9;
  double inter_node_latency_s = 6e-6;
  double pcie_bandwidth = 0;        // host <-> GPU, for offload
};

struct ParallelPlan {
  std::int64_t dp = 1, tp = 1, pp = 1, cp = 1, ep = 1;
  bool sequence_parallel = false;
  bool tp_comm_overlap = false;  // Megatron --tp-comm-overlap / NeMo ub_tp_comm_overlap (needs SP)
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
  std::int64_t virtual_stages = 1;
  int zero = 0;
  FsdpMode fsdp = FsdpMode::none;
  bool offload_optimizer = false;
  double ddp_bucket_bytes = 25.0 * 1024 * 1024;  // torch DDP bucket_cap_mb = 25
  bool overlap_grad_reduce = true;               // DDP buckets overlap backward
  // ZeRO-1/2: the updated parameters' all-gather runs under the next step's first forward, a
  // layer's part before the forward reaches it (Megatron's --overlap-param-gather, NeMo's
  // overlap_param_sync), instead of after the optimizer.
  bool overlap_param_gather = false;
  double grad_reduce_bytes = 0;                  // bytes per gradient element reduced; 0: the recipe's grad dtype
  bool pipeline_scatter_gather = true;           // Megatron splits p2p activations across TP ranks
  std::int64_t gpus_per_node = 1;
  // Rank placement, fastest-varying group first (Megatron's default: tensor, context, data,
  // pipeline). "tp-dp-pp-cp" would put context parallelism across the slowest links.
  std::string order = "tp-cp-dp-pp";
  LinkParams links;
  double cpu_optimizer_params_per_s = 1.0e9;     // CPU Adam throughput when offloaded
  bool offload_params = false;                   // ZeRO-Infinity / FSDP CPUOffload(params): shards in host memory
  // Transformer layers of each (virtual) stage in pipeline order, pp * virtual_stages entries
  // summing to the layers; empty: as even as integers allow (Megatron's default).
  std::vector<std::int64_t> layers_per_stage;
  // Megatron before 2023 (p2p_communication.py): batch_isend_irecv, wait, torch.cuda.synchronize:
  // a pipeline transfer holds the sender's stream until it completes, starts only when the
  // receiver has posted its receive (in the p2p call that ends one of its own steps), and the
  // next step starts when every receive of the call has arrived.
  bool p2p_blocking = false;
  // Gradient accumulation by running the pipeline schedule again (torch.distributed.pipelining as
  // torchtitan and NeMo AutoModel drive it: each run a whole schedule over its share of the
  // micro-batches, with its own fill and drain); 1: one schedule over all of them (Megatron).
  std::int64_t pipeline_runs = 1;

  std::int64_t gpus() const { return dp * tp * pp * cp; }
};

}  // namespace scaleout
