#pragma once
// The per-layer decomposition of one micro-batch's forward pass into the operations a framework
// launches (PyTorch eager with or without autocast; Megatron-style fused kernels for the megatron
// recipes), with their kernels forward and backward and the tensors they save for backward.
#include "models/tape.hpp"
#include "models/training.hpp"
#include "models/transformer.hpp"

namespace scaleout {

struct ShardSpec {
  std::int64_t tp = 1;          // tensor-parallel degree dividing heads, ffn, vocab
  bool sequence_parallel = false;
};

Tape build_step_tape(const TransformerSpec& model, const TrainingSpec& training, ShardSpec shard = {});

}  // namespace scaleout
