// Transformer Engine's userbuffers (tp_comm_overlap): the linears' sequence-parallel collectives
// run beside their GEMMs, and only what the GEMM leaves exposed stays on the step.
#include <catch2/catch.hpp>

#include <algorithm>

#include "models/step_tape.hpp"
#include "sim/training/step.hpp"
#include "tools/io/input_error.hpp"
#include "tools/io/scenario.hpp"
#include "tools/io/simulate.hpp"

using namespace scaleout;

namespace {

Json tp_scenario(bool overlap, bool sp = true) {
  return {{"model", {{"base", "llama-3-8b"}, {"layers", 4}}},
          {"cluster", {{"gpu", "h100-sxm"}, {"nodes", 1}, {"gpus_per_node", 8}}},
          {"training", {{"seq_len", 8192}, {"micro_batch", 1}, {"global_batch", 2}, {"precision", "megatron-bf16"}}},
          {"parallelism", {{"tp", 8}, {"sequence_parallel", sp}, {"tp_comm_overlap", overlap}}}};
}

}  // namespace

TEST_CASE("tp_comm_overlap needs sequence parallelism", "[parallel][tp][io]") {
  try {
    parse_scenario(tp_scenario(true, false), "ub.json");
    FAIL("accepted tp_comm_overlap without sequence_parallel");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("parallelism/tp_comm_overlap") != std::string::npos);
  }
}

TEST_CASE("the linears' TP collectives point at the GEMM that hides them", "[parallel][tp]") {
  const Scenario s = parse_scenario(tp_scenario(true), "ub.json");
  StageSpec st;
  st.tp = 8;
  st.sequence_parallel = true;
  st.tp_comm_overlap = true;
  const Tape tape = build_step_tape(s.model, s.training, st);
  int overlapped = 0, exposed = 0;
  for (const OpRec& op : tape.ops)
    for (const auto* ks : {&op.fwd, &op.bwd})
      for (std::size_t i = 0; i < ks->size(); ++i) {
        const Kernel& k = (*ks)[i];
        if (k.kind != KernelKind::collective || k.group != CommGroup::tp) continue;
        if (k.overlaps == 0) {
          ++exposed;
          continue;
        }
        ++overlapped;
        const auto j = std::ptrdiff_t(i) + k.overlaps;
        REQUIRE(j >= 0);
        REQUIRE(std::size_t(j) < ks->size());
        CHECK((*ks)[std::size_t(j)].kind == KernelKind::gemm);
      }
  // Per block: QKV and gate/up all-gather forward and re-gather backward, their dgrad
  // reduce-scatters; out-proj and down reduce-scatter forward, gradient all-gather backward:
  // 4 linears' worth, 8 overlapped collectives a block... at least 6 a block, whatever the fusion.
  CHECK(overlapped >= 6 * 4);
  // The embedding's and the loss's stay exposed.
  CHECK(exposed > 0);
  // Without the switch none is marked.
  st.tp_comm_overlap = false;
  for (const OpRec& op : build_step_tape(s.model, s.training, st).ops)
    for (const auto* ks : {&op.fwd, &op.bwd})
      for (const Kernel& k : *ks) CHECK(k.overlaps == 0);
}

TEST_CASE("overlapped TP collectives shorten the step by exactly the TP time they hide", "[parallel][tp]") {
  // TP alone: every TP collective sits on the compute stream, so the step is shorter by what the
  // exposed TP time shrinks, no more, no less.
  const StepResult off = simulate_scenario(parse_scenario(tp_scenario(false), "ub.json"));
  const StepResult on = simulate_scenario(parse_scenario(tp_scenario(true), "ub.json"));
  CHECK(on.tp_comm_s < 0.5 * off.tp_comm_s);
  CHECK(on.tp_comm_s > 0);  // the first chunk of each pipelined pair, the embedding and loss
  CHECK(off.step_time_s - on.step_time_s == Approx(off.tp_comm_s - on.tp_comm_s).epsilon(1e-9));
  CHECK(on.compute_s == Approx(off.compute_s).epsilon(1e-12));
  // Memory is what it was: the same buffers.
  CHECK(on.peak_bytes == Approx(off.peak_bytes).epsilon(1e-12));
}

TEST_CASE("overlapped collectives still wait for their group: folding a straggler stays exact", "[parallel][tp][fold]") {
  // One slow GPU in the TP group: its peers wait for it at every collective, overlapped or not;
  // the folded step (by symmetry classes) equals every GPU simulated, on both networks.
  for (const char* network : {"analytic", "flow"}) {
    Json j = tp_scenario(true);
    j["parallelism"]["tp"] = 4;
    j["parallelism"]["dp"] = 2;
    j["training"]["global_batch"] = 4;
    j["faults"] = {{"stragglers", {{{"gpu", 5}, {"slowdown", 1.3}}}}};
    j["simulation"] = {{"network", network}};
    const StepResult folded = simulate_scenario(parse_scenario(j, "ub.json"));
    j["simulation"]["fold"] = "off";
    const StepResult full = simulate_scenario(parse_scenario(j, "ub.json"));
    INFO(network);
    CHECK(folded.step_time_s == Approx(full.step_time_s).epsilon(1e-12));
    CHECK(folded.tp_comm_s == Approx(full.tp_comm_s).epsilon(1e-12));
    CHECK(folded.peer_wait_s == Approx(full.peer_wait_s).epsilon(1e-12));
    // The slow GPU holds its peers up.
    Json k = j;
    k.erase("faults");
    CHECK(full.step_time_s > simulate_scenario(parse_scenario(k, "ub.json")).step_time_s);
  }
}
