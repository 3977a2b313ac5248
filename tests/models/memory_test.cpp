// Memory through the step, checked against closed forms of the state and against the direction
// each technique must move the peak.
#include <catch2/catch.hpp>

#include "models/step_tape.hpp"
#include "sim/training/single_gpu_step.hpp"
#include "sim/training/step.hpp"
#include "tools/io/scenario.hpp"
#include "tools/io/simulate.hpp"

using namespace scaleout;

namespace {

StepResult run(const std::string& model, std::int64_t seq, std::int64_t mb, const std::string& precision,
               Recompute rc, AttentionImpl attn = AttentionImpl::flash, Optimizer opt = Optimizer::adamw,
               std::optional<LoraSpec> lora = std::nullopt, std::int64_t global_batch = 0) {
  StepConfig c;
  c.model = load_model(model);
  c.training.seq_len = seq;
  c.training.micro_batch = mb;
  c.training.global_batch = global_batch > 0 ? global_batch : mb;
  c.training.precision = *precision_recipe(precision);
  c.training.recompute = rc;
  c.training.attention = attn;
  c.training.optimizer = opt;
  c.training.lora = lora;
  c.gpu = load_gpu("h200");
  c.profile = default_profile(c.gpu);
  return simulate_single_gpu_step(c);
}

constexpr std::size_t kParams = 0, kGrads = 1, kOpt = 2;

}  // namespace

TEST_CASE("bf16-mixed AdamW holds 16 bytes of state per parameter, plus foreach's temporary", "[models][memory]") {
  // params fp32 (4) + grads fp32 (4) + two fp32 moments (8) = 16 B/param; the foreach optimizer's
  // sqrt(v) temporary adds 4 more at its peak. With full recompute and a short sequence the
  // optimizer step is the peak.
  const StepResult r = run("llama-2-7b", 512, 1, "bf16-mixed", Recompute::full);
  const double n = r.params_total;
  CHECK(r.peak_breakdown[kParams] == Approx(4 * n));
  CHECK(r.peak_breakdown[kGrads] == Approx(4 * n));
  CHECK(r.peak_breakdown[kOpt] == Approx(8 * n));
  CHECK(r.peak_bytes == Approx(20 * n).epsilon(0.02));
}

TEST_CASE("megatron-bf16 holds 18 bytes per parameter", "[models][memory]") {
  const StepResult r = run("gpt2-xl", 512, 1, "megatron-bf16", Recompute::full);
  const double n = r.params_total;
  CHECK(r.peak_breakdown[kParams] + r.peak_breakdown[kGrads] + r.peak_breakdown[kOpt] == Approx(18 * n));
}

TEST_CASE("nemo-bf16's distributed optimizer keeps the master weights' low halves: 16 bytes per parameter",
          "[models][memory]") {
  // bf16 params (2) + fp32 main grads (4) + two fp32 moments (8) + the fp32 masters' low 16 bits (2).
  const StepResult r = run("gpt2-xl", 512, 1, "nemo-bf16", Recompute::full);
  const double n = r.params_total;
  CHECK(r.peak_breakdown[kOpt] == Approx(10 * n));
  CHECK(r.peak_breakdown[kParams] + r.peak_breakdown[kGrads] + r.peak_breakdown[kOpt] == Approx(16 * n));
  // Only under the distributed optimizer: without ZeRO NeMo keeps a full fp32 copy.
  auto master_bytes = [](int zero) {
    const Json j = {{"model", "gpt2-xl"},
                    {"cluster", {{"gpu", "h100-sxm"}, {"nodes", 1}, {"gpus_per_node", 2}}},
                    {"training", {{"seq_len", 512}, {"global_batch", 2}, {"precision", "nemo-bf16"}}},
                    {"parallelism", {{"dp", 2}, {"zero", zero}}}};
    return parse_scenario(j, "nemo.json").training.precision.master_bytes;
  };
  CHECK(master_bytes(1) == 2.0);
  CHECK(master_bytes(0) == 4.0);
  // NeMo's FP8 runs: the same bf16 parameters and optimizer, FP8 GEMMs.
  const StepResult f = run("gpt2-xl", 512, 1, "nemo-fp8", Recompute::full);
  CHECK(f.peak_breakdown[kOpt] == Approx(10 * f.params_total));
  CHECK(precision_recipe("nemo-fp8")->compute == Dtype::fp8);
}

TEST_CASE("pure bf16 halves the state; SGD keeps one moment", "[models][memory]") {
  const StepResult bf = run("llama-3.2-1b", 512, 1, "bf16", Recompute::full);
  CHECK(bf.peak_breakdown[kParams] == Approx(2 * bf.params_total));
  const StepResult sgd = run("llama-3.2-1b", 512, 1, "bf16-mixed", Recompute::full, AttentionImpl::flash, Optimizer::sgd);
  CHECK(sgd.peak_breakdown[kOpt] == Approx(4 * sgd.params_total));
}

TEST_CASE("recompute lowers the activation peak: none > selective(naive) and none > full", "[models][memory]") {
  const StepResult none = run("llama-3.2-1b", 4096, 4, "bf16-mixed", Recompute::none, AttentionImpl::naive);
  const StepResult sel = run("llama-3.2-1b", 4096, 4, "bf16-mixed", Recompute::selective, AttentionImpl::naive);
  const StepResult full = run("llama-3.2-1b", 4096, 4, "bf16-mixed", Recompute::full, AttentionImpl::naive);
  CHECK(none.peak_bytes > sel.peak_bytes);
  CHECK(sel.peak_bytes > full.peak_bytes);
  // Recompute costs time: a second forward in backward.
  CHECK(full.step_time_s > none.step_time_s);
  CHECK(full.recompute_s > 0);
  CHECK(none.recompute_s == 0);
}

TEST_CASE("naive attention keeps s^2 per head; flash does not", "[models][memory]") {
  const StepResult flash = run("llama-3.2-1b", 4096, 2, "bf16-mixed", Recompute::none, AttentionImpl::flash);
  const StepResult naive = run("llama-3.2-1b", 4096, 2, "bf16-mixed", Recompute::none, AttentionImpl::naive);
  // At least the fp32 probabilities and their bf16 copy: 6 bytes per score per layer.
  const TransformerSpec m = load_model("llama-3.2-1b");
  const double scores = 2.0 * double(m.heads) * 4096.0 * 4096.0 * double(m.layers);
  CHECK(naive.peak_bytes - flash.peak_bytes > 6 * scores * 0.95);
}

TEST_CASE("gradient accumulation raises the peak by at most the gradients", "[models][memory]") {
  // From the second micro-batch on, the first one's gradients (4 B/param in bf16-mixed) are alive
  // during forward; activations do not grow with the number of micro-batches.
  const StepResult one = run("gpt2", 1024, 4, "bf16-mixed", Recompute::none);
  const StepResult four = run("gpt2", 1024, 4, "bf16-mixed", Recompute::none, AttentionImpl::flash, Optimizer::adamw,
                              std::nullopt, 16);
  CHECK(four.micro_batches == 4);
  CHECK(four.peak_bytes >= one.peak_bytes);
  CHECK(four.peak_bytes <= one.peak_bytes + 4 * one.params_total * 1.001);
  CHECK(four.step_time_s > 3 * one.step_time_s);
}

TEST_CASE("QLoRA keeps the frozen base in about half a byte per parameter", "[models][memory]") {
  LoraSpec q;
  q.nf4_base = true;
  const StepResult r = run("llama-2-13b", 1024, 1, "bf16-mixed", Recompute::full, AttentionImpl::flash,
                           Optimizer::adamw, q);
  CHECK(r.params_trainable < 0.02 * r.params_total);
  CHECK(r.peak_breakdown[kParams] < 0.6 * r.params_total);
  CHECK(r.peak_bytes < 20e9);
}

TEST_CASE("the step time is at least the model FLOPs at peak rate", "[models]") {
  const StepResult r = run("llama-2-7b", 2048, 1, "bf16", Recompute::none);
  CHECK(r.mfu > 0.2);
  CHECK(r.mfu < 0.8);
}

TEST_CASE("torchtitan's op policy keeps attention and every second matmul of a block, recomputing the rest", "[models][memory]") {
  // The tape: in each eager Llama block the 1st, 3rd, 5th and 7th aten.mm (q, v, gate, down) and
  // flash attention keep their outputs; nothing outside the blocks does.
  const TransformerSpec m = load_model("llama-3.2-1b");
  TrainingSpec tr;
  tr.seq_len = 1024;
  tr.micro_batch = 2;
  tr.precision = *precision_recipe("bf16");
  tr.recompute = Recompute::op;
  const Tape tape = build_step_tape(m, tr);
  std::vector<int> kept(std::size_t(m.layers), 0);
  double kept_bytes = 0;
  for (const OpRec& op : tape.ops) {
    if (!op.keep_output) continue;
    REQUIRE(op.layer >= 0);
    REQUIRE(op.region >= 0);
    ++kept[std::size_t(op.layer)];
    if (op.layer == 1)
      for (int t : op.outputs) kept_bytes += tape.tensors[std::size_t(t)].bytes;
  }
  for (int k : kept) CHECK(k == 5);
  // q (h), v (kv heads), gate (ffn), down (h) and the attention output (h), bf16, plus the
  // attention's fp32 row statistics.
  const double tokens = 2.0 * 1024.0, h = double(m.hidden), kv = double(m.kv_heads * m.hd()), f = double(m.ffn);
  CHECK(kept_bytes == Approx(tokens * (3 * h + kv + f) * 2 + 2.0 * double(m.heads) * 1024.0 * 4));
  // The step: memory between no recompute and full, recompute time below full's, the same
  // forward and backward; the peak above full's by about the kept outputs of every block.
  const StepResult none = run("llama-3.2-1b", 4096, 4, "bf16", Recompute::none);
  const StepResult op = run("llama-3.2-1b", 4096, 4, "bf16", Recompute::op);
  const StepResult full = run("llama-3.2-1b", 4096, 4, "bf16", Recompute::full);
  CHECK(none.peak_bytes > op.peak_bytes);
  CHECK(op.peak_bytes > full.peak_bytes);
  CHECK(op.recompute_s > 0);
  CHECK(op.recompute_s < full.recompute_s);
  CHECK(op.compute_s == Approx(full.compute_s).epsilon(1e-9));
  const double kept_step = kept_bytes * 8.0 * double(m.layers);  // 4 x 4096 tokens against 2 x 1024
  CHECK(op.peak_bytes - full.peak_bytes == Approx(kept_step).epsilon(0.15));
}

TEST_CASE("fsdp-bf16: FSDP2's mixed precision keeps fp32 shards and computes in bf16 without autocast", "[models][memory]") {
  Json j = {{"model", "llama-3.2-1b"},
            {"cluster", {{"gpu", "h100-sxm"}, {"nodes", 1}, {"gpus_per_node", 8}}},
            {"training", {{"seq_len", 2048}, {"micro_batch", 1}, {"global_batch", 8}, {"precision", "fsdp-bf16"}, {"recompute", "op"}}},
            {"parallelism", {{"dp", 8}, {"fsdp", "full_shard"}}}};
  const Scenario s = parse_scenario(j, "tt.json");
  CHECK(s.training.precision.param == Dtype::fp32);
  CHECK(s.training.precision.residual == Dtype::bf16);
  CHECK_FALSE(s.training.precision.autocast);
  CHECK(s.training.upcast_logits);  // torchtitan's loss upcasts the logits
  const StepResult r = simulate_step(step_config(s));
  // 4 bytes of fp32 weights and 8 of moments per parameter, over 8 GPUs.
  CHECK(r.peak_breakdown[kParams] == Approx(4.0 * r.params_total / 8).epsilon(0.01));
  CHECK(r.peak_breakdown[kOpt] == Approx(8.0 * r.params_total / 8).epsilon(0.01));
  // No weight is cast (FSDP gathers them in bf16) and no activation outside the norms' own fp32
  // arithmetic, except the logits for the loss; without the upcast, not those either.
  StageSpec gathered;
  gathered.weights_gathered_in_compute_dtype = true;
  auto casts = [&](const TrainingSpec& t, int layer) {
    int n = 0;
    for (const OpRec& op : build_step_tape(s.model, t, gathered).ops)
      for (const Kernel& k : op.fwd) {
        CHECK(k.name.find("w_cast") == std::string::npos);
        n += op.layer == layer && k.name.rfind("to_", 0) == 0 && k.name.find("norm") == std::string::npos ? 1 : 0;
      }
    return n;
  };
  TrainingSpec plain = s.training;
  plain.upcast_logits = false;
  CHECK(casts(s.training, -1) == casts(plain, -1) + 1);
  CHECK(casts(s.training, 3) == casts(plain, 3));
  const StepResult lean = simulate_step(step_config(parse_scenario(
      [&] { Json k = j; k["training"]["upcast_logits"] = false; return k; }(), "tt.json")));
  CHECK(lean.peak_bytes < r.peak_bytes);
  // Its weights are gathered in bf16 by FSDP: without FSDP it is an error naming the field.
  j["parallelism"] = {{"dp", 8}};
  CHECK_THROWS_WITH(parse_scenario(j, "tt.json"), Catch::Contains("tt.json") && Catch::Contains("/training/precision") &&
                                                      Catch::Contains("fsdp"));
}
