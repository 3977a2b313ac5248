// Parameter counts of the zoo against the counts each model's source reports.
#include <catch2/catch.hpp>

#include "models/transformer.hpp"
#include "tools/io/scenario.hpp"

using namespace scaleout;

TEST_CASE("every zoo model's parameter count matches its reported count within 3%", "[models]") {
  int checked = 0;
  for (const auto& name : zoo_names("models")) {
    const TransformerSpec m = load_model(name);
    if (m.reported_params <= 0) continue;
    INFO(name);
    CHECK(count_params(m).total() == Approx(m.reported_params).epsilon(0.03));
    ++checked;
  }
  CHECK(checked >= 20);
}

TEST_CASE("exact counts: GPT-2 124M and Llama-2-7B", "[models]") {
  CHECK(count_params(load_model("gpt2")).total() == 124439808.0);
  CHECK(count_params(load_model("llama-2-7b")).total() == 6738415616.0);
}

TEST_CASE("model FLOPs are 6 per parameter per token plus causal attention", "[models]") {
  const TransformerSpec m = load_model("llama-2-7b");
  const double tokens = 4096, seq = 4096;
  const ParamCounts p = count_params(m);
  const double matmul = p.total() - double(m.vocab) * double(m.hidden) - 2.0 * double(m.hidden) * double(m.layers) -
                        double(m.hidden);
  const double expect = 6 * matmul * tokens + 6.0 * double(m.layers) * tokens * seq * double(m.hidden);
  CHECK(model_flops(m, tokens, std::int64_t(seq)) == Approx(expect).epsilon(1e-9));
}

TEST_CASE("MoE counts every expert in total and top_k experts as active", "[models]") {
  const TransformerSpec m = load_model("mixtral-8x7b");
  const ParamCounts p = count_params(m);
  CHECK(p.total() == Approx(46.7e9).epsilon(0.01));
  CHECK(p.active() == Approx(12.9e9).epsilon(0.02));
}
