#pragma once
// A training step on a parallel plan, simulated: one representative rank per pipeline stage
// (tensor-, context- and data-parallel peers of a stage behave alike without stragglers, so a
// collective among them completes when the representative reaches it plus its duration); with
// stragglers (or link faults on the flow network), one rank per class of GPUs that provably behave
// alike; or every GPU. Each
// rank has a host stream issuing kernels, a compute stream, a data-parallel communication stream
// and send streams to its pipeline neighbours; the pipeline bubble, exposed communication and
// overlap come out of the event simulation.
#include <cstdint>
#include <span>
#include <vector>

#include "sim/training/single_gpu_step.hpp"

namespace scaleout {

// A long accumulation is simulated over three shorter windows and extended linearly where they
// show a steady state (StepResult::extrapolated_from says so; step.cpp's windows_of and
// simulate_step list the conditions), else every micro-batch.
StepResult simulate_step(const StepConfig& config);
// Every micro-batch, however many.
StepResult simulate_step_exact(const StepConfig& config);
// Every micro-batch of each accumulation length (micro-batches per replica), the lengths sharing
// the planned kernels: cheaper than a call per length.
std::vector<StepResult> simulate_steps_exact(const StepConfig& config, std::span<const std::int64_t> micro_batches);
// How many ranks a step simulates: the pipeline stages when folded, every GPU when not, and
// folded with stragglers (or link faults on the flow network) one per class of GPUs that provably
// behave alike. On the flow network these are the plan's classes, which the step checks as it
// runs (every sibling group must end each collective with its class) and may split further
// (StepResult::simulated_ranks says how many it ran).
std::int64_t simulated_ranks(const StepConfig& config);
// The most ranks the step may simulate: simulated_ranks, or every GPU where that check may split
// the classes further (for bounds on the work before it is done).
std::int64_t max_simulated_ranks(const StepConfig& config);
// How many micro-batches simulate_step builds for this configuration (the larger window).
std::int64_t simulated_micro_batches(const StepConfig& config);

// Seconds of one collective of `bytes` over `group` for the representative rank of `stage`.
double collective_time(const StepConfig& config, CollectiveKind kind, CommGroup group, double bytes, std::int64_t stage = 0);
// HYBRID_SHARD: the data-parallel ranks one node holds at the plan's placement (the shard group;
// dp for any other strategy), and a collective over the shard group or over the replicas (the
// same shard position in every node).
std::int64_t hybrid_shard_group(const ParallelPlan& plan);
// How far apart (in global ranks) the members of a group sit under the plan's placement order.
std::int64_t placement_stride(const ParallelPlan& plan, CommGroup group);
double hybrid_collective_time(const StepConfig& config, CollectiveKind kind, bool replicas, double bytes, std::int64_t stage = 0);
// A collective over the experts' data-parallel group: the dp / ep GPUs holding the same experts.
double expert_dp_collective_time(const StepConfig& config, CollectiveKind kind, double bytes, std::int64_t stage = 0);

}  // namespace scaleout
