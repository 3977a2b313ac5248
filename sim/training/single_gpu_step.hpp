#pragma once
// One training step on one GPU, simulated: the forward and backward of every micro-batch and the
// optimizer step become kernels issued by a host stream and run in order on the GPU's compute
// stream, with memory followed allocation by allocation.
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "hardware/compute_model.hpp"
#include "hardware/topology.hpp"
#include "models/training.hpp"
#include "models/transformer.hpp"
#include "sim/training/memory_tracker.hpp"
#include "sim/training/parallel.hpp"

namespace scaleout {

// A GPU that falls behind (DESIGN.md "faults"): thermal throttling slows its kernels, a slow data
// loader delays each of its micro-batches, a stall (a hung loader, a storage hiccup) stops it once.
struct Straggler {
  std::int64_t rank = 0;          // global GPU rank, in the plan's placement order
  double compute_slowdown = 1.0;  // kernel times multiplied by this
  double loader_delay_s = 0;      // before each micro-batch it feeds (first pipeline stage)
  double stall_s = 0;             // once, before the forward pass of micro-batch `stall_micro_batch`
  std::int64_t stall_micro_batch = 0;
};

struct FaultSpec {
  std::vector<Straggler> stragglers;
  // How long a rank waits in a collective before NCCL's watchdog aborts the job (torch.distributed's
  // default for NCCL process groups is 10 minutes).
  double nccl_timeout_s = 600;
};

struct StepConfig {
  TransformerSpec model;
  TrainingSpec training;
  GpuSpec gpu;
  ComputeProfile profile;
  ParallelPlan parallel;
  bool keep_trace = false;
  // Fold ranks that provably behave alike (the tensor-, context- and data-parallel peers of a
  // stage) into one simulated rank; off simulates every GPU, as stragglers need.
  bool fold = true;
  // Extend a long gradient accumulation from the steady state of shorter windows, where the
  // windows prove it steady (step.hpp); off simulates every micro-batch.
  bool extrapolate = true;
  FaultSpec faults;
  // When set, collectives and pipeline transfers run as flows on this cluster graph (NCCL's
  // algorithms, max-min sharing of every link), contending with all concurrent traffic; when
  // folded, the groups a simulated rank stands for send their (identical) traffic too.
  std::shared_ptr<const Topology> topology;
  // On that graph, a collective whose links no other flow uses is run apart, once, and costs one
  // event (exact: it is carried back onto the network where it had got to as soon as another
  // flow comes onto its links). Off runs every flow on the network: the same figures, slower.
  bool collectives_apart = true;
  // Off: the step's time only, no memory accounting (what the single-GPU baseline needs; every
  // memory figure of the result is then zero). Memory never moves a task, so the times are the same.
  bool track_memory = true;
  // What the process holds beyond its tensors: the CUDA context, cuBLAS/cuDNN workspaces (outside
  // torch's allocator), and the caching allocator's fragmentation, as a fraction of the peak.
  double context_reserve_bytes = 0.5 * kGiB;
  double fragmentation = 0.03;
  // The plan search's screen: a step whose persistent state alone (weights, gradient buffers and
  // optimizer state, as the step allocates them before its first kernel) needs more than the GPU
  // holds cannot fit whatever its activations do, and is not simulated (the result says so:
  // StepResult::state_outgrows_memory, its peak that state, no times).
  bool screen_state = false;
};

struct TraceSpan {
  std::string name;
  int rank = 0;   // the simulated rank (a pipeline stage)
  int track = 0;  // 0: host, 1: compute stream, 2: data-parallel comm, 3/4: pipeline sends
  Time start, end;
};

struct StepResult {
  bool fits = false;
  double step_time_s = 0;
  double tokens_per_s = 0;
  double model_flops_per_step = 0;
  double model_tflops_per_gpu = 0;
  double mfu = 0;
  double peak_bytes = 0;
  double required_bytes = 0;  // peak plus context and fragmentation reserves
  double capacity_bytes = 0;
  std::array<double, kMemCategoryCount> peak_breakdown{};
  double compute_s = 0, recompute_s = 0, optimizer_s = 0, host_stall_s = 0;
  double exposed_comm_s = 0, pipeline_bubble_s = 0;
  double tp_comm_s = 0, dp_comm_exposed_s = 0, pp_comm_s = 0, cp_comm_s = 0, ep_comm_s = 0;
  double dp_comm_total_s = 0;        // all data-parallel traffic, overlapped or not
  std::vector<double> rank_peak_bytes;  // per simulated rank (pipeline stage)
  int busiest_rank = 0;
  double params_total = 0, params_trainable = 0;
  std::int64_t micro_batches = 1;
  std::int64_t simulated_ranks = 1;
  std::vector<std::string> rank_names;  // per simulated rank, for the trace ("stage 2, GPU 16")
  // Unfolded simulations: how long rank 0 waited in collectives for later peers, the longest wait
  // of any rank in one collective and the GPU rank it waited for.
  double peer_wait_s = 0;
  double peer_wait_exposed_s = 0;  // of it, what left rank 0's compute stream idle
  double max_peer_wait_s = 0;
  std::int64_t waited_for_rank = -1;
  // screen_state: the step was not simulated, as its persistent state alone does not fit
  // (peak_bytes, required_bytes and fits say by how much; every time is zero).
  bool state_outgrows_memory = false;
  // A wait longer than the NCCL timeout: the watchdog aborts the job; the step never completes.
  bool failed = false;
  std::string failure;
  std::int64_t extrapolated_from = 0;  // > 0: simulated over this many micro-batches and extended linearly
  std::int64_t extrapolated_base = 0;  // then: by its growth over the run of this many (a shorter window)
  // For the extrapolation's check: the latest host clock of any simulated rank at the end of
  // its launches, and every rank's compute-stream idle time waiting for launches.
  double host_clock_max_s = 0;
  double host_gap_total_s = 0;
  // and how long each stream (compute, transfers, collectives' rendezvous) was busy.
  std::vector<double> stream_busy_s;
  // A pipelined step with a slow GPU, for the check of its windows (step.cpp, settled_in; empty in
  // the results simulate_step and simulate_step_exact hand out): when each simulated rank's passes
  // started (picoseconds, in its schedule's order), its host clock at the end of its launches and
  // its compute stream's idle time waiting for them.
  std::vector<std::vector<std::int64_t>> pass_starts_ps;
  std::vector<std::vector<std::uint64_t>> pass_shapes;  // a hash of its tasks' starts and ends from its start
  std::vector<std::int64_t> host_end_ps;
  std::vector<double> host_gap_s;
  // A step with a slow GPU, without a pipeline or with replicas joined only by the reduction at the
  // end, for the check of its windows (step.cpp, same_bindings; empty in the results handed out):
  // per group of collectives, in one order, each rendezvous in turn as [its arrivals, when it was
  // complete, then per arrival: how many times follow, its host's launch, the end of each task it
  // waited for] (picoseconds), and where each rendezvous's record starts.
  std::vector<std::vector<std::int64_t>> arrivals_ps;
  std::vector<std::vector<std::uint32_t>> arrivals_at;
  // and per simulated rank, each compute kernel in turn as [its launch, the end of the rank's
  // kernels before it, then per track the latest end of the tasks it waited for there (-1: none)],
  // and where each starts.
  std::vector<std::vector<std::int64_t>> tasks_ps;
  std::vector<std::vector<std::uint32_t>> tasks_at;
  std::uint64_t kernels = 0;
  std::uint64_t events = 0;
  std::uint64_t fingerprint = 0;  // FNV-style hash over every task's start and finish, in task order
  std::vector<TraceSpan> trace;
  std::vector<std::pair<Time, double>> memory_timeline;
};

StepResult simulate_single_gpu_step(const StepConfig& config);

}  // namespace scaleout
