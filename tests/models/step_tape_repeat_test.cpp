// Blocks past the second are copies of it with their numbers moved on (build_step_tape's
// repeat_layers): each tape must be exactly the one built op by op.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "models/step_tape.hpp"
#include "tools/io/scenario.hpp"

using namespace scaleout;

namespace {

void same_kernels(const std::vector<Kernel>& a, const std::vector<Kernel>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t k = 0; k < a.size(); ++k) {
    const Kernel &x = a[k], &y = b[k];
    CHECK(x.name == y.name);
    CHECK(x.kind == y.kind);
    CHECK(x.dtype == y.dtype);
    CHECK(x.bytes == y.bytes);
    CHECK(x.reduction == y.reduction);
    CHECK(x.coll == y.coll);
    CHECK(x.group == y.group);
    CHECK(x.launches == y.launches);
    CHECK((x.gemm.m == y.gemm.m && x.gemm.n == y.gemm.n && x.gemm.k == y.gemm.k && x.gemm.batch == y.gemm.batch &&
           x.gemm.a_transposed == y.gemm.a_transposed));
    CHECK((x.attn.batch == y.attn.batch && x.attn.heads == y.attn.heads && x.attn.seq == y.attn.seq &&
           x.attn.head_dim == y.attn.head_dim && x.attn.causal == y.attn.causal && x.attn.seq_kv == y.attn.seq_kv));
  }
}

void same_tape(const Tape& a, const Tape& b) {
  CHECK(a.input == b.input);
  CHECK(a.output == b.output);
  CHECK(a.regions == b.regions);
  REQUIRE(a.tensors.size() == b.tensors.size());
  for (std::size_t t = 0; t < a.tensors.size(); ++t) {
    INFO("tensor " << t);
    CHECK(a.tensors[t].bytes == b.tensors[t].bytes);
    CHECK(a.tensors[t].category == b.tensors[t].category);
    CHECK(a.tensors[t].requires_grad == b.tensors[t].requires_grad);
    CHECK(a.tensors[t].hold_until_forward_end == b.tensors[t].hold_until_forward_end);
    CHECK(a.tensors[t].producer == b.tensors[t].producer);
  }
  REQUIRE(a.params.size() == b.params.size());
  for (std::size_t p = 0; p < a.params.size(); ++p) {
    INFO("param " << p);
    CHECK(a.params[p].count == b.params[p].count);
    CHECK(a.params[p].trainable == b.params[p].trainable);
    CHECK(a.params[p].layer == b.params[p].layer);
    CHECK(a.params[p].split == b.params[p].split);
  }
  REQUIRE(a.ops.size() == b.ops.size());
  for (std::size_t i = 0; i < a.ops.size(); ++i) {
    INFO("op " << i);
    const OpRec &x = a.ops[i], &y = b.ops[i];
    CHECK(x.layer == y.layer);
    CHECK(x.region == y.region);
    CHECK(x.inputs == y.inputs);
    CHECK(x.outputs == y.outputs);
    CHECK(x.saved == y.saved);
    CHECK(x.weight_from == y.weight_from);
    CHECK(x.param == y.param);
    CHECK(x.bwd_workspace_bytes == y.bwd_workspace_bytes);
    CHECK(x.fwd_workspace_bytes == y.fwd_workspace_bytes);
    CHECK(x.keep_output == y.keep_output);
    same_kernels(x.fwd, y.fwd);
    same_kernels(x.bwd, y.bwd);
  }
}

}  // namespace

TEST_CASE("blocks repeated from the second are the tape built op by op", "[tape]") {
  struct Case {
    const char* model;
    const char* recipe;
    Recompute recompute;
    AttentionImpl attention;
    bool lora, nf4;
    StageSpec stage;
  };
  StageSpec whole, tp_sp, cp_ep, middle, lone, gathered;
  tp_sp.tp = 4;
  tp_sp.sequence_parallel = true;
  cp_ep.cp = 2;
  cp_ep.ep = 4;
  middle.first_layer = 3;
  middle.layers = 5;
  middle.embedding = middle.head = false;
  middle.tp = 2;
  lone.layers = 1;  // one block: nothing to repeat
  gathered.weights_gathered_in_compute_dtype = true;
  const std::vector<Case> cases = {
      {"llama-3.2-1b", "bf16-mixed", Recompute::none, AttentionImpl::flash, false, false, whole},
      {"llama-3.2-1b", "bf16-mixed", Recompute::full, AttentionImpl::flash, false, false, tp_sp},
      {"llama-3.2-1b", "bf16", Recompute::selective, AttentionImpl::naive, false, false, middle},
      {"llama-3.2-1b", "megatron-bf16", Recompute::full, AttentionImpl::flash, false, false, tp_sp},
      {"llama-3.2-1b", "fp8-mixed", Recompute::selective, AttentionImpl::flash, false, false, middle},
      {"llama-3.2-1b", "bf16-mixed", Recompute::none, AttentionImpl::flash, true, false, whole},
      {"llama-3.2-1b", "bf16-mixed", Recompute::full, AttentionImpl::flash, true, true, whole},
      {"llama-3.2-1b", "bf16-mixed", Recompute::none, AttentionImpl::flash, false, false, gathered},
      {"llama-3.2-1b", "bf16-mixed", Recompute::none, AttentionImpl::flash, false, false, lone},
      {"llama-3.2-1b", "fsdp-bf16", Recompute::op, AttentionImpl::flash, false, false, gathered},
      {"llama-3.2-1b", "bf16-mixed", Recompute::op, AttentionImpl::flash, true, false, tp_sp},
      {"gpt2", "fp16-mixed", Recompute::none, AttentionImpl::naive, false, false, whole},
      {"gpt2", "megatron-fp16", Recompute::selective, AttentionImpl::flash, false, false, middle},
      {"mixtral-8x7b", "bf16-mixed", Recompute::full, AttentionImpl::flash, false, false, cp_ep},
      {"mixtral-8x7b", "megatron-bf16", Recompute::none, AttentionImpl::flash, false, false, tp_sp},
  };
  for (const Case& c : cases) {
    INFO(c.model << " " << c.recipe << " recompute " << int(c.recompute) << " lora " << c.lora << " tp " << c.stage.tp
                 << " cp " << c.stage.cp << " ep " << c.stage.ep << " layers " << c.stage.layers);
    const TransformerSpec model = load_model(c.model);
    TrainingSpec tr;
    tr.seq_len = 1024;
    tr.micro_batch = 2;
    tr.precision = *precision_recipe(c.recipe);
    tr.recompute = c.recompute;
    tr.attention = c.attention;
    tr.dropout = std::string(c.model) == "gpt2" ? 0.1 : 0.0;
    if (c.lora) {
      tr.lora = LoraSpec{};
      tr.lora->nf4_base = c.nf4;
    }
    const Tape fast = build_step_tape(model, tr, c.stage), slow = build_step_tape(model, tr, c.stage, false);
    same_tape(fast, slow);
    // Every block past the second was copied (one block: none).
    const auto copies = std::count_if(fast.copy_of.begin(), fast.copy_of.end(), [](int i) { return i >= 0; });
    const std::int64_t layers = c.stage.layers < 0 ? model.layers : c.stage.layers;
    std::size_t block_ops = 0;
    for (const OpRec& op : slow.ops) block_ops += op.layer == c.stage.first_layer + 1 ? 1 : 0;
    CHECK(std::size_t(copies) == std::size_t(std::max<std::int64_t>(0, layers - 2)) * block_ops);
    CHECK(std::count_if(slow.copy_of.begin(), slow.copy_of.end(), [](int i) { return i >= 0; }) == 0);
    REQUIRE(fast.copy_of.size() == fast.ops.size());
    for (std::size_t i = 0; i < fast.ops.size(); ++i)
      if (fast.copy_of[i] >= 0) same_kernels(fast.ops[i].fwd, fast.ops[std::size_t(fast.copy_of[i])].fwd);
  }
}

TEST_CASE("MLA blocks with shared experts repeat from the first MoE block past the dense ones", "[tape]") {
  TransformerSpec model = load_model("deepseek-v3");
  model.layers = 7;  // 3 dense, 4 MoE
  TrainingSpec tr;
  tr.seq_len = 1024;
  tr.precision = *precision_recipe("bf16");
  for (const bool sp : {false, true}) {
    INFO("sp " << sp);
    // Full recompute without SP; with it Megatron's fine-grained modules (discarding regions).
    tr.recompute = sp ? Recompute::selective : Recompute::full;
    tr.recompute_modules = sp ? unsigned(kRecomputeLayernorm | kRecomputeMlaUpProj | kRecomputeMoeAct | kRecomputeCoreAttn) : 1u;
    StageSpec st;
    st.ep = 64;
    st.tp = sp ? 2 : 1;
    st.sequence_parallel = sp;
    const Tape fast = build_step_tape(model, tr, st), slow = build_step_tape(model, tr, st, false);
    same_tape(fast, slow);
    CHECK(fast.region_discards == slow.region_discards);
    CHECK(int(fast.region_discards.size()) == fast.regions);
    if (sp) CHECK(std::count(fast.region_discards.begin(), fast.region_discards.end(), 1) > 0);
    // Layers 0-2 dense and 3 built op by op (3 is the template), 4-6 copied from it.
    std::size_t block_ops = 0;
    for (const OpRec& op : slow.ops) block_ops += op.layer == 3 ? 1 : 0;
    const auto copies = std::count_if(fast.copy_of.begin(), fast.copy_of.end(), [](int i) { return i >= 0; });
    CHECK(std::size_t(copies) == 3 * block_ops);
    for (std::size_t i = 0; i < fast.ops.size(); ++i)
      if (fast.copy_of[i] >= 0) CHECK(fast.ops[i].layer >= 4);
    // Dense layers have no router, MoE layers a router and a shared expert.
    auto has = [&](int layer, const std::string& name) {
      for (const OpRec& op : slow.ops)
        for (const Kernel& k : op.fwd)
          if (op.layer == layer && k.name == name) return true;
      return false;
    };
    CHECK(!has(2, "router"));
    CHECK(has(3, "router"));
    CHECK(has(3, "shared.down"));
    CHECK(has(0, "kv_up"));
    CHECK(has(0, "q_down"));
    CHECK(has(0, "down"));
    CHECK(has(0, "k_rope_allgather") == sp);
  }
}
