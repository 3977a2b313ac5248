// Context-parallel ranks hold the same weights and see other parts of each sequence: their
// gradients are summed with the data-parallel ones (Megatron's data-parallel group with context
// parallelism; torchtitan's FSDP mesh dp_shard_cp), and ZeRO shards state over all of them.
#include <catch2/catch.hpp>

#include "models/step_tape.hpp"
#include "sim/training/step.hpp"
#include "tools/io/scenario.hpp"
#include "tools/io/simulate.hpp"

using namespace scaleout;

namespace {

Json cp_scenario(std::int64_t cp, std::int64_t dp) {
  return {{"model", {{"base", "llama-3-8b"}, {"layers", 4}}},
          {"cluster", {{"gpu", "h100-sxm"}, {"nodes", 1}, {"gpus_per_node", cp * dp}}},
          {"training", {{"seq_len", 8192}, {"micro_batch", 1}, {"global_batch", 2 * dp}, {"precision", "bf16-mixed"}}},
          {"parallelism", {{"cp", cp}, {"dp", dp}}}};
}

double stage_params(const Scenario& s, std::int64_t cp) {
  StageSpec st;
  st.cp = cp;
  double n = 0;
  for (const ParamRec& p : build_step_tape(s.model, s.training, st).params) n += p.count;
  return n;
}

}  // namespace

TEST_CASE("context-parallel ranks all-reduce their gradients with the data-parallel ones", "[parallel][cp]") {
  // CP 2 without data parallelism: the two halves of each sequence give two partial gradients,
  // summed by one all-reduce (fp32 under bf16-mixed) over both GPUs, plus each bucket's latency.
  const Scenario s = parse_scenario(cp_scenario(2, 1), "cp.json");
  const StepConfig c = step_config(s);
  const double bytes = stage_params(s, 2) * 4;
  const StepResult r = simulate_step(c);
  const double one = collective_time(c, CollectiveKind::all_reduce, CommGroup::dp, bytes);
  CHECK(one > 0);
  CHECK(r.dp_comm_total_s >= one);
  CHECK(r.dp_comm_total_s < 1.1 * one);
  // CP 2 x DP 2: one group of four.
  const Scenario s4 = parse_scenario(cp_scenario(2, 2), "cp.json");
  const StepConfig c4 = step_config(s4);
  const double four = collective_time(c4, CollectiveKind::all_reduce, CommGroup::dp, bytes);
  CHECK(four > one);  // 2 (n - 1) / n of the bytes: 3/2 against 1
  const StepResult r4 = simulate_step(c4);
  CHECK(r4.dp_comm_total_s >= four);
  CHECK(r4.dp_comm_total_s < 1.1 * four);
}

TEST_CASE("ZeRO shards state over the data-parallel and context-parallel ranks together", "[parallel][cp][memory]") {
  // ZeRO-1 with CP 2 x DP 2: AdamW's two fp32 moments (8 bytes per parameter) split four ways.
  Json j = cp_scenario(2, 2);
  j["parallelism"]["zero"] = 1;
  const Scenario s = parse_scenario(j, "cp.json");
  const StepResult r = simulate_step(step_config(s));
  CHECK(r.peak_breakdown[2] == Approx(8.0 * stage_params(s, 2) / 4).epsilon(1e-9));
}

TEST_CASE("HYBRID_SHARD's shard group holds its data-parallel ranks' CP ranks too", "[parallel][cp][memory]") {
  // Two nodes of 8: CP 2 x DP 8, HYBRID_SHARD. A node holds 4 data-parallel ranks and their CP
  // partners: the shard group is those 8 GPUs (torchtitan's dp_shard_cp inside a replica), so each
  // holds 1/8 of the fp32 parameters; the replicas all-reduce across the two nodes.
  Json j = cp_scenario(2, 8);
  j["cluster"] = {{"gpu", "h100-sxm"}, {"nodes", 2}, {"gpus_per_node", 8}};
  j["parallelism"]["fsdp"] = "hybrid_shard";
  const Scenario s = parse_scenario(j, "cp.json");
  const StepResult r = simulate_step(step_config(s));
  CHECK(r.peak_breakdown[0] == Approx(4.0 * stage_params(s, 2) / 8).epsilon(1e-9));
  CHECK(r.dp_comm_total_s > 0);
}
