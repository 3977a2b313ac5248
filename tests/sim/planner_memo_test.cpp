// The planner hands out one shared plan for every micro-batch's forward and for every backward
// that leaves the gradient state as it found it: each must be exactly the plan made afresh.
#include <catch2/catch.hpp>

#include <cmath>

#include "models/step_tape.hpp"
#include "sim/training/planner.hpp"
#include "tools/io/scenario.hpp"

using namespace scaleout;

namespace {

void same_items(const std::vector<PlanItem>& a, const std::vector<PlanItem>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("item " << i);
    CHECK(a[i].phase == b[i].phase);
    CHECK(a[i].from_tape == b[i].from_tape);
    REQUIRE(a[i].kernels().size() == b[i].kernels().size());
    if (a[i].from_tape) {
      CHECK(a[i].kernels().data() == b[i].kernels().data());  // the same tape kernels
    } else {
      for (std::size_t k = 0; k < a[i].kernels().size(); ++k) {  // the optimizer's own
        CHECK(a[i].kernels()[k].name == b[i].kernels()[k].name);
        CHECK(a[i].kernels()[k].bytes == b[i].kernels()[k].bytes);
        CHECK(a[i].kernels()[k].launches == b[i].kernels()[k].launches);
      }
    }
    CHECK(a[i].layer == b[i].layer);
    CHECK(a[i].grads_done == b[i].grads_done);
    REQUIRE(a[i].allocs.size() == b[i].allocs.size());
    REQUIRE(a[i].frees.size() == b[i].frees.size());
    for (std::size_t k = 0; k < a[i].allocs.size(); ++k) {
      CHECK(a[i].allocs[k].category == b[i].allocs[k].category);
      CHECK(a[i].allocs[k].bytes == b[i].allocs[k].bytes);
    }
    for (std::size_t k = 0; k < a[i].frees.size(); ++k) {
      CHECK(a[i].frees[k].category == b[i].frees[k].category);
      CHECK(a[i].frees[k].bytes == b[i].frees[k].bytes);
    }
  }
}

// A 1F1B order over m micro-batches with `ahead` forwards in flight, planned both ways.
void check_memo(const TrainingSpec& tr, ShardPlan shard, bool split, int m, int ahead) {
  const TransformerSpec model = load_model("llama-3.2-1b");
  StageSpec st;
  st.first_layer = 2;
  st.layers = 3;
  const Tape tape = build_step_tape(model, tr, st);
  // Two planners sharing one book (two ranks of a stage): the second hands out what the first
  // planned, the first what it planned itself for earlier micro-batches.
  auto book = std::make_shared<ChunkPlanner::Book>();
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    ChunkPlanner memo(tape, tr, shard, book), fresh(tape, tr, shard);
    int fwd = 0, bwd = 0, hits = 0;
    ChunkPlanner::Pass seen_fwd;
    while (bwd < m) {
      if (fwd < m && fwd - bwd < ahead) {
        INFO("forward " << fwd);
        const ChunkPlanner::Pass p = memo.forward_pass(fwd);
        hits += seen_fwd == p;
        seen_fwd = p;
        same_items(*p, fresh.forward(fwd));
        ++fwd;
        continue;
      }
      INFO("backward " << bwd);
      const bool last = bwd + 1 == m;
      ChunkPlanner::Pass wm;
      std::vector<PlanItem> wf;
      const ChunkPlanner::Pass p = memo.backward_pass(bwd, last, split ? &wm : nullptr);
      same_items(*p, fresh.backward(bwd, last, split ? &wf : nullptr));
      if (split) {
        REQUIRE(wm);
        same_items(*wm, wf);
      }
      ++bwd;
    }
    CHECK(hits == m - 1);  // every forward after the first was the shared plan
    same_items(memo.optimizer(), fresh.optimizer());
    const PlanItem za = memo.release_grads(), zb = fresh.release_grads();
    same_items({za}, {zb});
  }
}

}  // namespace

TEST_CASE("shared forward and backward plans are exactly the plans made afresh", "[planner]") {
  TrainingSpec tr;
  tr.seq_len = 512;
  tr.micro_batch = 2;
  tr.precision = *precision_recipe("bf16-mixed");
  SECTION("eager, no recompute, DDP gradients") { check_memo(tr, {}, false, 6, 3); }
  SECTION("selective recompute (replayed regions)") {
    tr.recompute = Recompute::selective;
    check_memo(tr, {}, false, 5, 2);
  }
  SECTION("full recompute, Megatron's fused kernels and persistent grads") {
    tr.recompute = Recompute::full;
    tr.precision = *precision_recipe("megatron-bf16");
    ShardPlan sh;
    sh.persistent_grads = true;
    check_memo(tr, sh, false, 5, 4);
  }
  SECTION("ZeRO-2 sharded gradients (every backward frees its full gradient)") {
    ShardPlan sh;
    sh.grads = 8;
    sh.optimizer = 8;
    check_memo(tr, sh, false, 4, 1);
  }
  SECTION("zero-bubble: backward split from its weight pass") { check_memo(tr, {}, true, 6, 3); }
}

TEST_CASE("the foreach optimizer launches a kernel per 320 blocks of 65536 parameters, planned as one", "[planner]") {
  // Llama-3-8B on one GPU: 8.03e9 parameters / (320 * 65536) -> 383 launches of each of
  // AdamW's eight foreach passes (and of the master-weight copy), each kernel planned once with
  // its launch count and the per-launch share of the pass's bytes.
  TrainingSpec tr;
  tr.seq_len = 512;
  tr.micro_batch = 1;
  tr.precision = *precision_recipe("bf16-mixed");
  const TransformerSpec model = load_model("llama-3-8b");
  const Tape tape = build_step_tape(model, tr, StageSpec{});
  ChunkPlanner p(tape, tr, ShardPlan{});
  const std::vector<PlanItem> opt = p.optimizer();
  REQUIRE(opt.size() == 1);
  const double n = p.trainable_params();
  const auto launches = std::int32_t(std::ceil(n / (320.0 * 65536.0)));
  CHECK(launches == 383);
  const std::span<const Kernel> ks = opt[0].kernels();
  REQUIRE(ks.size() == 8 + (tr.precision.master_copy ? 1 : 0));
  for (const Kernel& k : ks) {
    CHECK(k.launches == launches);
    CHECK(k.bytes * k.launches > n);  // every pass reads and writes at least a byte per parameter
  }
  // Sharded 64 ways (ZeRO-1): 6 launches of each pass.
  ShardPlan sh;
  sh.optimizer = 64;
  ChunkPlanner q(tape, tr, sh);
  CHECK(q.optimizer()[0].kernels()[0].launches == std::int32_t(std::ceil(n / 64 / (320.0 * 65536.0))));
}

TEST_CASE("the foreach optimizer's passes are multi-tensor kernels of the states' width; torch's fused one's too, Megatron's not", "[planner]") {
  const TransformerSpec model = load_model("llama-3-8b");
  auto passes_of = [&](const char* precision, OptimizerImpl impl) {
    TrainingSpec tr;
    tr.seq_len = 512;
    tr.micro_batch = 1;
    tr.precision = *precision_recipe(precision);
    tr.optimizer_impl = impl;
    const Tape tape = build_step_tape(model, tr, StageSpec{});
    ChunkPlanner p(tape, tr, ShardPlan{});
    const std::vector<PlanItem> opt = p.optimizer();
    REQUIRE(opt.size() == 1);
    return std::vector<Kernel>(opt[0].kernels().begin(), opt[0].kernels().end());
  };
  for (const Kernel& k : passes_of("bf16", OptimizerImpl::foreach_)) {
    CHECK(k.multi_tensor);
    CHECK(k.dtype == Dtype::bf16);
  }
  // bf16-mixed: fp32 master, grads and states: the passes stream 32-bit lists.
  const std::vector<Kernel> mixed = passes_of("bf16-mixed", OptimizerImpl::foreach_);
  for (std::size_t i = 0; i < 8; ++i) {
    CHECK(mixed[i].multi_tensor);
    CHECK(mixed[i].dtype == Dtype::fp32);
  }
  // torch's fused step runs on the same multi_tensor_apply launcher.
  for (const Kernel& k : passes_of("bf16", OptimizerImpl::fused)) CHECK(k.multi_tensor);
  for (const Kernel& k : passes_of("megatron-bf16", OptimizerImpl::foreach_)) CHECK_FALSE(k.multi_tensor);
}
