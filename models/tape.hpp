#pragma once
// The forward pass of a training step as the framework's autograd records it: operations over
// tensors, each with the kernels it launches forward and backward and the tensors it saves for
// backward. Memory is not summed from formulas but followed: the step simulation allocates each
// output, frees a tensor when no later operation reads it and nothing saved it, frees saved
// tensors as backward passes them, and replays checkpointed regions (recompute) in backward.
#include <cstdint>
#include <string>
#include <vector>

#include "hardware/kernel.hpp"
#include "sim/engine/small_vec.hpp"

namespace scaleout {

enum class MemCategory : std::uint8_t { params, grads, optimizer, activations, other };
inline constexpr std::size_t kMemCategoryCount = 5;
inline constexpr const char* kMemCategoryNames[kMemCategoryCount] = {"params", "grads", "optimizer", "activations",
                                                                     "other"};

struct TensorRec {
  double bytes = 0;
  MemCategory category = MemCategory::activations;
  bool requires_grad = true;
  bool hold_until_forward_end = false;  // autocast's cache of weight casts
  int producer = -1;
};

// How a stage's parameter is split over the GPUs that hold the stage: along tensor parallelism
// (the linears, the vocabulary), copied on every TP rank (norms, the MoE router, learned
// positions), an expert's (EP ranks hold different experts, each sharded along TP like a dense
// MLP: Megatron's expert tensor-parallel size defaults to the TP size), or a second copy of
// another stage's parameter (tied embeddings across a pipeline: the last stage's output layer,
// split along TP; held, trained and all-reduced with the first's, counted once in the model).
enum class ParamSplit : std::uint8_t { tensor, replicated, expert, tied_copy };

struct ParamRec {
  double count = 0;      // elements, on one GPU
  bool trainable = true;
  int layer = -1;        // -1: embedding, final norm, head
  ParamSplit split = ParamSplit::tensor;
};

struct OpRec {
  int layer = -1;          // -1: embedding / head
  int region = -1;         // checkpointed region (recompute), -1: none
  SmallVec<int, 4> inputs, outputs, saved;
  std::vector<Kernel> fwd, bwd;
  // bwd[weight_from..] compute the parameter's gradient only (a linear layer's wgrad and bgrad):
  // what a zero-bubble schedule defers to a separate W pass; -1: none.
  int weight_from = -1;
  int param = -1;                 // parameter whose gradient this op's backward produces
  double bwd_workspace_bytes = 0;  // scratch allocated for the backward kernels only
  double fwd_workspace_bytes = 0;  // scratch allocated for the forward kernels only
  // In a checkpointed region: the outputs are stored by the forward and handed to the recompute,
  // which does not run the op (torch selective checkpointing's CheckpointPolicy.MUST_SAVE).
  bool keep_output = false;
};

struct Tape {
  int input = -1;   // the tensor received from the previous pipeline stage (-1: token ids)
  int output = -1;  // the tensor sent to the next pipeline stage (-1: the loss)
  std::vector<TensorRec> tensors;
  std::vector<ParamRec> params;
  std::vector<OpRec> ops;
  // Per op: an earlier op whose kernels are the same (the block a repeated one was copied from;
  // see build_step_tape), or -1.
  std::vector<int> copy_of;
  int regions = 0;
  // Per region: 1 where its outputs are dropped once the forward has used them, even where an op
  // outside the region saved them, and recomputed before the first backward that needs them
  // (Megatron-Core's CheckpointWithoutOutput: the layernorm, moe_act and mla_up_proj recompute
  // modules); 0: torch.utils.checkpoint, which keeps only the region's inputs.
  std::vector<std::uint8_t> region_discards;

  int add_tensor(double bytes, bool requires_grad = true, MemCategory cat = MemCategory::activations) {
    tensors.push_back(TensorRec{bytes, cat, requires_grad, false, -1});
    return int(tensors.size()) - 1;
  }
  int add_param(double count, bool trainable = true, int layer = -1, ParamSplit split = ParamSplit::tensor) {
    params.push_back(ParamRec{count, trainable, layer, split});
    return int(params.size()) - 1;
  }
  int add_op(OpRec op) {
    const int id = int(ops.size());
    for (int t : op.outputs)
      if (tensors[t].producer < 0) tensors[t].producer = id;
    ops.push_back(std::move(op));
    copy_of.push_back(-1);
    return id;
  }
};

}  // namespace scaleout
