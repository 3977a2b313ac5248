// Mixture of experts under tensor and expert parallelism, as Megatron-Core lays it out: each EP
// rank holds experts / ep experts, each split along TP like the dense MLP (the expert
// tensor-parallel size defaults to the TP size), the dispatched tokens all-gathered over the TP
// group and the partial outputs reduce-scattered back.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <map>
#include <tuple>
#include <utility>

#include "models/step_tape.hpp"
#include "sim/network/collective_model.hpp"
#include "sim/training/step.hpp"
#include "tools/io/scenario.hpp"
#include "tools/io/simulate.hpp"

using namespace scaleout;

namespace {

Json moe_scenario(std::int64_t tp, std::int64_t ep, std::int64_t pp, std::int64_t dp, const std::string& model = "mixtral-8x7b") {
  Json par = {{"tp", tp}, {"ep", ep}, {"pp", pp}, {"dp", dp}};
  if (tp > 1) par["sequence_parallel"] = true;
  const std::int64_t gpus = tp * pp * dp;
  return {{"model", {{"base", model}, {"layers", 4}}},
          {"cluster", {{"gpu", "h100-sxm"}, {"nodes", (gpus + 7) / 8}, {"gpus_per_node", std::min<std::int64_t>(gpus, 8)}}},
          {"training", {{"seq_len", 2048}, {"micro_batch", 1}, {"global_batch", 2 * dp}, {"precision", "bf16-mixed"},
                        {"recompute", "full"}}},
          {"parallelism", par}};
}

struct ExpertTally {
  double params = 0, gemm_flops = 0;
  int tp_gathers = 0, tp_scatters = 0;
  double gather_bytes = 0, alltoall_bytes = 0;
};

ExpertTally tally(const Tape& t) {
  ExpertTally x;
  for (const ParamRec& p : t.params)
    if (p.split == ParamSplit::expert) x.params += p.count;
  for (const OpRec& op : t.ops)
    for (const Kernel& k : op.fwd) {
      if (k.kind == KernelKind::gemm && k.name.rfind("expert", 0) == 0)
        x.gemm_flops += 2.0 * double(k.gemm.m) * double(k.gemm.n) * double(k.gemm.k) * double(k.gemm.batch);
      if (k.name == "moe_tp_allgather") {
        CHECK(k.group == CommGroup::tp);
        CHECK(k.coll == CollectiveKind::all_gather);
        ++x.tp_gathers;
        x.gather_bytes = k.bytes;
      }
      if (k.name == "moe_dispatch_alltoall") x.alltoall_bytes = k.bytes;
      if (k.name == "moe_tp_reducescatter") {
        CHECK(k.group == CommGroup::tp);
        CHECK(k.coll == CollectiveKind::reduce_scatter);
        ++x.tp_scatters;
      }
    }
  return x;
}

// One GPU's dense and expert parameters (elements) at TP 1 and expert parallelism ep.
std::pair<double, double> dense_and_experts(const Scenario& s, std::int64_t ep) {
  StageSpec st;
  st.ep = ep;
  double dense = 0, expert = 0;
  for (const ParamRec& p : build_step_tape(s.model, s.training, st).params)
    (p.split == ParamSplit::expert ? expert : dense) += p.count;
  return {dense, expert};
}

}  // namespace

TEST_CASE("under tensor parallelism each expert is split like the dense MLP", "[models][moe]") {
  const Scenario s = parse_scenario(moe_scenario(1, 2, 1, 2), "moe.json");
  StageSpec one;
  one.ep = 2;
  StageSpec four = one;
  four.tp = 4;
  four.sequence_parallel = true;
  const ExpertTally a = tally(build_step_tape(s.model, s.training, one));
  const ExpertTally b = tally(build_step_tape(s.model, s.training, four));
  // Four local experts (8 / ep) of gate, up and down, h x ffn each, per layer.
  const double expert = 3.0 * double(s.model.hidden) * double(s.model.ffn);
  CHECK(a.params == Approx(4 * 4 * expert));
  CHECK(b.params == Approx(4 * 4 * expert / 4));
  // The TP group shares the experts' work: the same tokens, a quarter of each expert on each GPU.
  CHECK(b.gemm_flops == Approx(a.gemm_flops / 4).epsilon(1e-12));
  CHECK(a.tp_gathers == 0);
  CHECK(b.tp_gathers == 4);
  CHECK(b.tp_scatters == 4);
  // What is gathered: every TP rank's routed tokens (s / tp each, top_k copies), as dispatched.
  CHECK(a.alltoall_bytes == Approx(2048.0 * double(s.model.top_k) * double(s.model.hidden) * 4));  // fp32 under autocast
  CHECK(b.alltoall_bytes == Approx(a.alltoall_bytes / 4));
  CHECK(b.gather_bytes == Approx(a.alltoall_bytes));
}

TEST_CASE("the report counts a model's parameters once whatever the plan", "[models][moe][parallel]") {
  struct Plan {
    std::int64_t tp, ep, pp, dp;
    const char* model;
  };
  for (const Plan& p : {Plan{1, 1, 1, 1, "mixtral-8x7b"}, Plan{4, 2, 2, 2, "mixtral-8x7b"}, Plan{2, 4, 1, 8, "mixtral-8x7b"},
                        Plan{8, 8, 2, 8, "mixtral-8x7b"}, Plan{8, 1, 2, 2, "llama-3-8b"}, Plan{1, 1, 4, 8, "gpt3-125m"}}) {
    INFO(p.model << " tp " << p.tp << " ep " << p.ep << " pp " << p.pp << " dp " << p.dp);
    Json j = moe_scenario(p.tp, p.ep, p.pp, p.dp, p.model);
    if (p.ep == 1) j["parallelism"].erase("ep");
    const Scenario s = parse_scenario(j, "moe.json");
    const StepResult r = simulate_step(step_config(s));
    CHECK(r.params_total == Approx(count_params(s.model).total()).epsilon(1e-12));
    CHECK(r.params_trainable == Approx(r.params_total).epsilon(1e-12));
  }
}

TEST_CASE("expert weights, their gradients and optimizer state shrink with TP as the dense ones do", "[models][moe][memory]") {
  // bf16-mixed AdamW: 4 + 4 + 8 bytes per parameter of the GPU's own slice. TP 4 holds a quarter
  // of every expert and of every dense linear, all the norms and the router.
  const StepResult one = simulate_step(step_config(parse_scenario(moe_scenario(1, 2, 1, 2), "moe.json")));
  const StepResult four = simulate_step(step_config(parse_scenario(moe_scenario(4, 2, 1, 2), "moe.json")));
  CHECK(four.peak_breakdown[0] == Approx(one.peak_breakdown[0] / 4).epsilon(0.01));
  CHECK(four.peak_breakdown[2] == Approx(one.peak_breakdown[2] / 4).epsilon(0.01));
}

TEST_CASE("experts' optimizer state is sharded over the GPUs holding the same experts", "[models][moe][memory]") {
  // ZeRO-1 over 8 data-parallel GPUs: the dense parameters' AdamW moments (8 bytes each under
  // bf16-mixed) are split 8 ways; the experts' only over the dp / ep GPUs that hold them.
  for (std::int64_t ep : {1, 2, 4, 8}) {
    INFO("ep " << ep);
    Json j = moe_scenario(1, ep, 1, 8);
    j["parallelism"]["zero"] = 1;
    if (ep == 1) j["parallelism"].erase("ep");
    const Scenario s = parse_scenario(j, "moe.json");
    const auto [dense, expert] = dense_and_experts(s, ep);
    const StepResult r = simulate_step(step_config(s));
    CHECK(r.peak_breakdown[2] == Approx(8.0 * (dense / 8 + expert / double(8 / ep))).epsilon(1e-9));
  }
}

TEST_CASE("experts' gradients are reduced over their own data-parallel group, not at all where ep = dp", "[models][moe][parallel]") {
  // The same 8 GPUs of one node, DDP: the dense gradients are all-reduced over all 8; the
  // experts' over the 8 / ep GPUs holding the same experts.
  auto dp_traffic = [](std::int64_t ep) {
    Json j = moe_scenario(1, ep, 1, 8);
    const Scenario s = parse_scenario(j, "moe.json");
    StepConfig c = step_config(s);
    const auto [dense, expert] = dense_and_experts(s, ep);
    return std::make_tuple(simulate_step(c).dp_comm_total_s, dense, expert, c);
  };
  const auto [t8, dense8, expert8, c8] = dp_traffic(8);
  const auto [t2, dense2, expert2, c2] = dp_traffic(2);
  // Per bucket of 25 MiB the ring's time is affine in the bytes; every bucket here is one GPU's
  // share of a layer or less, so the totals compare through the bytes each group reduces.
  CHECK(dense8 == Approx(dense2));
  CHECK(t8 < t2);
  // ep = dp: only the dense gradients travel (fp32 under bf16-mixed): one all-reduce of them,
  // plus each 25 MiB bucket's latencies.
  const double one = collective_time(c8, CollectiveKind::all_reduce, CommGroup::dp, dense8 * 4);
  CHECK(t8 >= one);
  CHECK(t8 < 1.1 * one);
  // ep = 2: plus the experts' over 4 GPUs (over all 8 the ring would take 7/6 as long).
  const double experts = expert_dp_collective_time(c2, CollectiveKind::all_reduce, expert2 * 4);
  CHECK(t2 - t8 >= experts);
  CHECK(t2 - t8 < 1.05 * experts);
  CHECK(experts == Approx(collective_seconds(CollectiveKind::all_reduce, 4, expert2 * 4,
                                             c2.parallel.links.intra_node_bandwidth * c2.parallel.links.intra_node_efficiency,
                                             c2.parallel.links.intra_node_latency_s)));
}

TEST_CASE("under FSDP experts are sharded, gathered and reduce-scattered over the GPUs holding them", "[models][moe][memory]") {
  // FULL_SHARD over 8 GPUs: each holds 1/8 of the dense parameters (fp32 under bf16-mixed) and
  // 1/(8/ep) of its experts'; at ep = dp the experts are held whole and never gathered.
  double traffic_ep2 = 0, traffic_ep8 = 0;
  for (std::int64_t ep : {1, 2, 4, 8}) {
    INFO("ep " << ep);
    Json j = moe_scenario(1, ep, 1, 8);
    j["parallelism"]["fsdp"] = "full_shard";
    if (ep == 1) j["parallelism"].erase("ep");
    const Scenario s = parse_scenario(j, "moe.json");
    const auto [dense, expert] = dense_and_experts(s, ep);
    const StepResult r = simulate_step(step_config(s));
    CHECK(r.peak_breakdown[0] == Approx(4.0 * (dense / 8 + expert / double(8 / ep))).epsilon(1e-9));
    if (ep == 2) traffic_ep2 = r.dp_comm_total_s;
    if (ep == 8) traffic_ep8 = r.dp_comm_total_s;
  }
  CHECK(traffic_ep8 < traffic_ep2);
}

TEST_CASE("under autocast an expert's linear casts only the tokens routed to it", "[models][moe]") {
  // PyTorch autocast casts each F.linear's input: an expert's gate and up each cast the expert's
  // own rows of the dispatched tokens (fp32 under autocast's fp32 residual stream). A cast of the
  // whole dispatched buffer per expert cost 16 local experts x 32 full copies a layer (Qwen3-30B
  // on 8 GPUs: 76 s a step instead of 38 s).
  Scenario s = parse_scenario(moe_scenario(1, 2, 1, 2), "moe.json");
  StageSpec st;
  st.ep = 2;
  const Tape t = build_step_tape(s.model, s.training, st);
  const std::int64_t tokens = s.training.seq_len * s.training.micro_batch;
  const double routed = double(tokens) * double(s.model.top_k);                 // this rank's dispatched rows
  const double per_expert = routed / double(s.model.experts / 2) * s.training.moe_capacity_factor;
  int expert_casts = 0;
  double cast_bytes = 0, whole = 0;
  for (std::size_t i = 0; i + 1 < t.ops.size(); ++i) {
    const OpRec& op = t.ops[i];
    if (op.fwd.size() != 1 || op.fwd[0].name != "to_bf16") continue;
    // The cast an expert's GEMM reads: the next op's kernel is an expert's gate or up GEMM.
    const OpRec& next = t.ops[i + 1];
    if (next.fwd.empty() || next.fwd[0].name.rfind("expert", 0) != 0) continue;
    ++expert_casts;
    cast_bytes = op.fwd[0].bytes;
    whole = routed * double(s.model.hidden) * (4.0 + 2.0);
    CHECK(t.tensors[op.outputs[0]].bytes == Approx(per_expert * double(s.model.hidden) * 2.0));
  }
  // Every local expert's gate and up, in each of the 4 layers.
  CHECK(expert_casts == 4 * 2 * int(s.model.experts / 2));
  CHECK(cast_bytes == Approx(per_expert * double(s.model.hidden) * (4.0 + 2.0)));
  CHECK(cast_bytes < whole / 2);
}

TEST_CASE("DeepEP sends a token once per destination rank; the all-to-all dispatcher once per expert", "[models][moe]") {
  // 128 experts over EP 8 (16 a rank), top 8, as Qwen3-30B-A3B.
  Json j = moe_scenario(1, 8, 1, 8);
  j["model"] = {{"arch", "llama"}, {"layers", 2}, {"hidden", 1024}, {"heads", 8}, {"ffn", 768}, {"vocab", 1024},
                {"tied_embeddings", false}, {"experts", 128}, {"top_k", 8}};
  StageSpec st;
  st.ep = 8;
  const double tokens = 2048, h = 1024, act = 4;  // bf16-mixed: the dispatched tokens are fp32 under autocast
  auto wire = [&](const std::string& dispatcher, const std::string& router) {
    Json k = j;
    k["training"]["moe_dispatcher"] = dispatcher;
    k["training"]["moe_router"] = router;
    const Scenario s = parse_scenario(k, "moe.json");
    return tally(build_step_tape(s.model, s.training, st)).alltoall_bytes / (tokens * h * act);
  };
  CHECK(wire("alltoall", "learned") == Approx(8));
  CHECK(wire("alltoall", "fake_balanced") == Approx(8));
  // 1 - C(112, 8) / C(128, 8) of the 8 ranks: 5.34 on average.
  double none = 1;
  for (int i = 0; i < 8; ++i) none *= double(112 - i) / double(128 - i);
  CHECK(wire("deepep", "learned") == Approx(8 * (1 - none)));
  CHECK(wire("deepep", "learned") == Approx(5.34).margin(0.01));
  // AutoModel's benchmark gate: a token's 8 experts are one aligned block, on one rank.
  CHECK(wire("deepep", "fake_balanced") == Approx(1));
  j["training"]["moe_dispatcher"] = "flex";
  CHECK_THROWS_WITH(parse_scenario(j, "moe.json"), Catch::Contains("moe_dispatcher") && Catch::Contains("deepep"));
}

TEST_CASE("grouped expert GEMMs do the per-expert GEMMs' work in one kernel per projection", "[models][moe]") {
  Json j = moe_scenario(1, 2, 1, 2);
  StageSpec st;
  st.ep = 2;
  const Scenario loop = parse_scenario(j, "moe.json");
  j["training"]["moe_grouped_gemm"] = true;
  const Scenario grouped = parse_scenario(j, "moe.json");
  const Tape a = build_step_tape(loop.model, loop.training, st), b = build_step_tape(grouped.model, grouped.training, st);
  const ExpertTally x = tally(a), y = tally(b);
  CHECK(y.params == Approx(x.params));
  CHECK(y.gemm_flops == Approx(x.gemm_flops));
  auto count = [](const Tape& t, const std::string& prefix, bool gemm) {
    int n = 0;
    for (const OpRec& op : t.ops)
      for (const Kernel& k : op.fwd)
        if (k.name.rfind(prefix, 0) == 0 && (k.kind == KernelKind::gemm) == gemm) ++n;
    return n;
  };
  const int local = int(loop.model.experts / 2), layers = int(loop.model.layers);
  CHECK(count(a, "expert", true) == 3 * local * layers);
  CHECK(count(b, "experts.", true) == 3 * layers);
  // No copy of each expert's output into the combined buffer: the grouped GEMM writes it there.
  CHECK(count(a, "expert1.gather", false) == layers);
  CHECK(count(b, "experts.gather", false) == 0);
  // Whatever the kernels, the same weights are held.
  CHECK(a.params.size() > b.params.size());
}

TEST_CASE("training.kernels overrides the recipe's kernel style", "[models][io]") {
  Json j = moe_scenario(1, 2, 1, 2);
  StageSpec st;
  st.ep = 2;
  auto ropes = [&](const Json& k) {
    const Scenario s = parse_scenario(k, "moe.json");
    int fused = 0;
    for (const OpRec& op : build_step_tape(s.model, s.training, st).ops)
      for (const Kernel& kern : op.fwd) fused += kern.name == "q.rope" ? 1 : 0;
    return fused;
  };
  CHECK(ropes(j) == 0);  // bf16-mixed: PyTorch's eager rotate_half
  j["training"]["kernels"] = "fused";
  CHECK(ropes(j) == int(j["model"]["layers"].get<int>()));
  j["training"]["precision"] = "megatron-bf16";
  j["training"]["kernels"] = "eager";
  CHECK(ropes(j) == 0);
  j["training"]["kernels"] = "triton";
  CHECK_THROWS_WITH(parse_scenario(j, "moe.json"), Catch::Contains("kernels"));
}

// Llama 3.2 1B at 2 x 1,024 tokens on one GPU: the tape of a precision recipe.
static Tape llama_1b_tape(const char* precision) {
  TrainingSpec tr;
  tr.seq_len = 1024;
  tr.micro_batch = 2;
  tr.precision = *precision_recipe(precision);
  return build_step_tape(load_model("llama-3.2-1b"), tr, StageSpec{});
}

TEST_CASE("FP8 linears cast their inputs and output gradients, except where the norm made the input", "[models][fp8]") {
  // Transformer Engine: a LayerNormLinear (Megatron's qkv and fc1) emits FP8 from the norm; the
  // other linears cast their input (with its transpose: 2 + 1 + 1 bytes an element), and every
  // linear casts its output's gradient in backward.
  const TransformerSpec m = load_model("llama-3.2-1b");
  const Tape t = llama_1b_tape("nemo-fp8");
  std::map<std::string, double> fwd, bwd;
  for (const OpRec& op : t.ops)
    if (op.layer == 1) {
      for (const Kernel& k : op.fwd) fwd[k.name] += k.bytes;
      for (const Kernel& k : op.bwd) bwd[k.name] += k.bytes;
    }
  const double tokens = 2048, h = double(m.hidden), f = double(m.ffn);
  CHECK(fwd.count("qkv.fp8_cast") == 0);
  CHECK(fwd.count("gate_up.fp8_cast") == 0);
  CHECK(fwd["o.fp8_cast"] == Approx(tokens * double(m.q_width()) * 4));
  CHECK(fwd["down.fp8_cast"] == Approx(tokens * f * 4));
  CHECK(bwd["qkv.fp8_cast_bwd"] == Approx(tokens * double(m.q_width() + 2 * m.kv_width()) * 4));
  CHECK(bwd["down.fp8_cast_bwd"] == Approx(tokens * h * 4));
  // Not under BF16.
  for (const OpRec& op : llama_1b_tape("nemo-bf16").ops)
    for (const Kernel& k : op.fwd) CHECK(k.name.find("fp8_cast") == std::string::npos);
}

TEST_CASE("FP8 gradient GEMMs run with the split accumulator, the forward ones with fast accumulation", "[models][fp8]") {
  // Transformer Engine's module/base.py: _2X_ACC_FPROP False, _2X_ACC_DGRAD and _2X_ACC_WGRAD True.
  int fwd = 0, grads = 0;
  for (const OpRec& op : llama_1b_tape("nemo-fp8").ops) {
    for (const Kernel& k : op.fwd)
      if (k.kind == KernelKind::gemm) {
        CHECK_FALSE(k.gemm.split_accumulate);
        ++fwd;
      }
    for (const Kernel& k : op.bwd)
      if (k.kind == KernelKind::gemm && k.dtype == Dtype::fp8) {
        CHECK(k.gemm.split_accumulate);
        CHECK((k.name.ends_with("_dgrad") || k.name.ends_with("_wgrad")));
        ++grads;
      }
  }
  CHECK(fwd > 0);
  CHECK(grads > 0);
  // BF16 has no such thing.
  for (const OpRec& op : llama_1b_tape("nemo-bf16").ops)
    for (const Kernel& k : op.bwd) CHECK_FALSE(k.gemm.split_accumulate);
}
