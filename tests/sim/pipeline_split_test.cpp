// Uneven pipeline splits (parallelism.layers_per_stage): the explicit even split is the default,
// a lighter last stage balances the LM head's work, and bad splits are refused with their path.
#include <catch2/catch.hpp>

#include "tools/io/input_error.hpp"
#include "tools/io/scenario.hpp"
#include "tools/io/simulate.hpp"

using namespace scaleout;

namespace {

Json four_stages(const Json& split) {
  Json j = {{"model", "llama-3-8b"},
            {"cluster", {{"gpu", "h100-sxm"}, {"nodes", 1}, {"gpus_per_node", 4}}},
            {"training", {{"seq_len", 4096}, {"micro_batch", 1}, {"global_batch", 32}, {"precision", "megatron-bf16"},
                          {"recompute", "selective"}}},
            {"parallelism", {{"pp", 4}}}};
  if (!split.is_null()) j["parallelism"]["layers_per_stage"] = split;
  return j;
}

StepResult run(const Json& j) { return simulate_scenario(parse_scenario(j, "split.json")); }

}  // namespace

TEST_CASE("an explicit even split is the default split", "[parallel][pipeline]") {
  const StepResult even = run(four_stages(nullptr));
  const StepResult given = run(four_stages({8, 8, 8, 8}));
  CHECK(given.fingerprint == even.fingerprint);
  CHECK(given.step_time_s == even.step_time_s);
}

TEST_CASE("a lighter last stage balances the LM head (128K vocabulary)", "[parallel][pipeline]") {
  const StepResult even = run(four_stages({8, 8, 8, 8}));
  const StepResult lighter = run(four_stages({9, 8, 8, 7}));
  // The head stage was the slowest; one layer moved off it shortens every 1F1B step.
  CHECK(lighter.step_time_s < 0.97 * even.step_time_s);
  // Memory follows the layers: the first stage holds more, the last less.
  CHECK(lighter.rank_peak_bytes[0] > even.rank_peak_bytes[0]);
  CHECK(lighter.rank_peak_bytes[3] < even.rank_peak_bytes[3]);
}

TEST_CASE("bad splits are refused with their path", "[parallel][pipeline][input]") {
  CHECK_THROWS_WITH(run(four_stages({8, 8, 8})), Catch::Contains("/parallelism/layers_per_stage: 3 entries"));
  CHECK_THROWS_WITH(run(four_stages({8, 8, 8, 9})), Catch::Contains("hold 33 layers; the model has 32"));
  CHECK_THROWS_WITH(run(four_stages({8, -1, 8, 17})), Catch::Contains("non-negative integers"));
  CHECK_THROWS_AS(run(four_stages("even")), InputError);
}
