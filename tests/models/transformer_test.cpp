// Parameter counts of the zoo against the counts each model's source reports.
#include <catch2/catch.hpp>

#include "models/step_tape.hpp"
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

TEST_CASE("DeepSeek-V3: MLA, shared experts and dense first layers give its published counts", "[models]") {
  // DeepSeek's README_WEIGHTS: the main model 671B, 36.6B activated including the 0.9B output
  // head; the input embedding (0.93B, a lookup) is in our active count, not theirs.
  const TransformerSpec m = load_model("deepseek-v3");
  const ParamCounts p = count_params(m);
  CHECK(p.total() == Approx(671e9).epsilon(0.002));
  const double embedding = double(m.vocab) * double(m.hidden);
  CHECK(p.active() - embedding == Approx(36.6e9).epsilon(0.005));
  // Layer by layer: MLA attention 187.1M; a dense layer's MLP 3 x 7168 x 18432; an MoE layer's 256
  // routed + 1 shared experts of 3 x 7168 x 2048 and a 7168 x 256 router.
  const double h = 7168, attn = h * 1536 + 1536 + 1536 * 128.0 * 192 + h * 576 + 512 + 512 * 128.0 * 256 + 128.0 * 128 * h;
  const double dense = attn + 3 * h * 18432 + 2 * h, moe = attn + 257 * 3 * h * 2048 + h * 256 + 2 * h;
  CHECK(p.per_layer * 61 == Approx(3 * dense + 58 * moe).epsilon(1e-12));
  // Attention FLOPs follow the query/key (192) and value (128) head widths.
  const double tokens = 4096, seq = 4096;
  TransformerSpec dense_attn = m;
  dense_attn.kv_lora_rank = 0;  // (only to read the formula: the same heads at head_dim 128)
  const double diff = model_flops(m, tokens, 4096) - 6 * (p.per_layer_active * 61 - 2 * h * 61 + double(m.vocab) * h) * tokens;
  CHECK(diff == Approx(3.0 * 61 * tokens * seq * 128 * (192 + 128)).epsilon(1e-6));
}

TEST_CASE("MLA and DeepSeekMoE fields are checked where they are given", "[models][io]") {
  auto with = [](Json extra) {
    Json model = {{"arch", "llama"}, {"layers", 4}, {"hidden", 1024}, {"heads", 8}, {"ffn", 2048}, {"vocab", 1000}, {"tied_embeddings", false}};
    for (auto& [k, v] : extra.items()) model[k] = v;
    return Json{{"model", model}, {"cluster", {{"gpu", "h100-sxm"}}}, {"training", {{"seq_len", 1024}}}};
  };
  CHECK_NOTHROW(parse_scenario(with({{"kv_lora_rank", 256}, {"qk_rope_dim", 32}, {"head_dim", 64}}), "m.json"));
  CHECK_THROWS_WITH(parse_scenario(with({{"q_lora_rank", 256}}), "m.json"), Catch::Contains("/model/q_lora_rank") && Catch::Contains("kv_lora_rank"));
  CHECK_THROWS_WITH(parse_scenario(with({{"kv_lora_rank", 256}, {"kv_heads", 2}}), "m.json"), Catch::Contains("/model/kv_heads"));
  CHECK_THROWS_WITH(parse_scenario(with({{"shared_experts", 1}}), "m.json"), Catch::Contains("/model/shared_experts") && Catch::Contains("experts > 1"));
  CHECK_THROWS_WITH(parse_scenario(with({{"experts", 4}, {"top_k", 2}, {"dense_layers", 4}}), "m.json"), Catch::Contains("/model/dense_layers"));
}

TEST_CASE("a plain MLP: two ffn-wide matrices, fc1 and fc2 on the tape, checked where it cannot be", "[models][io]") {
  // Nemotron-4 15B: 32 x (GQA attention + 2 h ffn + 2 norms) + untied embeddings, 15.63B (the
  // report: 3.2B embedding + 12.5B non-embedding).
  const TransformerSpec m = load_model("nemotron-4-15b");
  CHECK_FALSE(m.gated_mlp());
  const double h = 6144, f = 24576, kv = 1024;
  const double layer = h * (h + 2 * kv) + h * h + 2 * h * f + 2 * h;
  CHECK(count_params(m).total() == Approx(32 * layer + 2 * 256000.0 * h + h));
  TrainingSpec tr;
  tr.seq_len = 256;
  tr.precision = *precision_recipe("nemo-bf16");
  int fc = 0, gates = 0, acts = 0;
  for (const OpRec& op : build_step_tape(m, tr).ops)
    for (const Kernel& k : op.fwd) {
      fc += k.name == "fc1" || k.name == "fc2";
      gates += k.name == "gate_up" || k.name == "gate";
      acts += k.name == "squared_relu";
    }
  CHECK(fc == 64);
  CHECK(gates == 0);
  CHECK(acts == 32);
  auto with = [](Json extra) {
    Json model = {{"arch", "llama"}, {"layers", 4}, {"hidden", 1024}, {"heads", 8}, {"ffn", 2048}, {"vocab", 1000}, {"tied_embeddings", false}};
    for (auto& [k, v] : extra.items()) model[k] = v;
    return Json{{"model", model}, {"cluster", {{"gpu", "h100-sxm"}}}, {"training", {{"seq_len", 1024}}}};
  };
  CHECK(parse_scenario(with({{"activation", "gelu"}}), "m.json").model.activation == Activation::gelu);
  CHECK_THROWS_WITH(parse_scenario(with({{"activation", "relu"}}), "m.json"), Catch::Contains("/model/activation"));
  CHECK_THROWS_WITH(parse_scenario(with({{"activation", "squared_relu"}, {"experts", 4}, {"top_k", 2}}), "m.json"),
                    Catch::Contains("/model/activation") && Catch::Contains("dense"));
  CHECK_THROWS_WITH(parse_scenario(with({{"arch", "gpt"}, {"activation", "squared_relu"}}), "m.json"),
                    Catch::Contains("/model/activation") && Catch::Contains("arch llama"));
}

TEST_CASE("eager kernels say how ATen walks their tensors: upcasts unrolled, the broadcast mask strided", "[models]") {
  // Copy.cu vectorizes only fp32 -> bf16/fp16; masked_fill_ with an s x s mask over every head runs
  // the strided loop; SoftMax.cu's backward multiplies grad * output in a kernel of its own first.
  const TransformerSpec m = load_model("llama-3.2-1b");
  TrainingSpec tr;
  tr.seq_len = 1024;
  tr.micro_batch = 2;
  tr.precision = *precision_recipe("bf16-mixed");
  tr.attention = AttentionImpl::naive;
  StageSpec st;
  int upcasts = 0, downcasts = 0, masks = 0, muls = 0;
  for (const OpRec& op : build_step_tape(m, tr, st).ops) {
    if (op.layer != 1) continue;
    for (std::size_t i = 0; i < op.fwd.size(); ++i) {
      const Kernel& k = op.fwd[i];
      if (k.name == "to_fp32") {
        CHECK(k.access == Kernel::Access::unrolled);
        for (const Kernel& b : op.bwd) CHECK(b.access == Kernel::Access::vectorized);
        ++upcasts;
      } else if (k.name == "to_bf16") {
        CHECK(k.access == Kernel::Access::vectorized);
        for (const Kernel& b : op.bwd) CHECK(b.access == Kernel::Access::unrolled);
        ++downcasts;
      } else if (k.name == "scale_mask") {
        CHECK(k.access == (i == 1 ? Kernel::Access::strided : Kernel::Access::vectorized));
        if (i == 1) ++masks;
      }
    }
    for (std::size_t i = 0; i < op.bwd.size(); ++i)
      if (op.bwd[i].name == "softmax_bwd_mul") {
        REQUIRE(i + 1 < op.bwd.size());
        CHECK(op.bwd[i + 1].name == "softmax_bwd");
        CHECK(op.bwd[i].bytes == Approx(op.bwd[i + 1].bytes));  // grad and output read, tmp written
        CHECK_FALSE(op.bwd[i].reduction);
        ++muls;
      }
  }
  CHECK(upcasts == 1);     // the scores' (the fp32 residual stream's norms have nothing to upcast)
  CHECK(downcasts >= 3);  // the probabilities, and autocast's casts of the linears' inputs
  CHECK(masks == 1);
  CHECK(muls == 1);
  // Compiled (fused) kernels have no such loops.
  tr.precision.fused_kernels = true;
  for (const OpRec& op : build_step_tape(m, tr, st).ops)
    for (const auto* ks : {&op.fwd, &op.bwd})
      for (const Kernel& k : *ks) CHECK(k.access == Kernel::Access::vectorized);
}
