// The measurement phases of the harness. Each runs in its own child process (see
// harness.cu), writes one JSON line per measurement through ctx.sink and stops
// starting new measurements when ctx.budget runs out.
#pragma once

#include <string>

#include "common.h"

namespace harness {

void run_launch_phase(PhaseContext& ctx);
void run_membound_phase(PhaseContext& ctx);
void run_pcie_phase(PhaseContext& ctx);
void run_gemm_phase(PhaseContext& ctx);
void run_gemm_novel_phase(PhaseContext& ctx);  // shapes of no grid, for checking a profile
void run_fp8acc_phase(PhaseContext& ctx);      // FP8 products with and without fast accumulation
void run_attention_phase(PhaseContext& ctx);      // cuDNN
void run_attention_own_phase(PhaseContext& ctx);  // own kernels

// CPU-only view of a phase's plan (for --list): number of entries and a rough
// H200 runtime prediction from datasheet-level rates.
struct PlanSummary {
  int entries = 0;
  double predicted_s = 0;
};
PlanSummary plan_launch(bool quick);
PlanSummary plan_membound(bool quick);
PlanSummary plan_pcie(bool quick);
PlanSummary plan_gemm(bool quick);
PlanSummary plan_gemm_novel(bool quick);
PlanSummary plan_fp8acc(bool quick);
PlanSummary plan_attention(bool quick);
PlanSummary plan_attention_own(bool quick);

// cuDNN is loaded with dlopen so that a machine without it still runs every
// other phase. Returns the version (e.g. 91900) or 0 with *error set.
long cudnn_runtime_version(std::string* error);

// Builds the cuDNN attention graphs as far as this machine allows and prints
// where each stops (no GPU needed for the descriptor checks).
int cudnn_graph_selftest();

}  // namespace harness
