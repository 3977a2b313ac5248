#pragma once
// The per-layer decomposition of one micro-batch's forward pass into the operations a framework
// launches (PyTorch eager with or without autocast; Megatron-style fused kernels for the megatron
// recipes), with their kernels forward and backward and the tensors they save for backward.
#include "models/tape.hpp"
#include "models/training.hpp"
#include "models/transformer.hpp"

namespace scaleout {

// What one rank computes: a range of layers (a pipeline stage or one of its virtual chunks), with
// or without the embedding and the head, sharded by tensor parallelism (Megatron: column- and
// row-parallel linears, heads and ffn split, vocabulary-parallel embedding and loss; with
// sequence parallelism the norms and residuals on s/tp tokens), context parallelism (s/cp
// tokens per rank, keys and values gathered over the ring) and expert parallelism.
struct StageSpec {
  std::int64_t first_layer = 0;
  std::int64_t layers = -1;  // -1: all of the model's layers
  bool embedding = true;
  bool head = true;
  std::int64_t tp = 1;
  bool sequence_parallel = false;
  bool tp_comm_overlap = false;  // TE userbuffers: the linears' TP collectives overlap their GEMMs
  std::int64_t cp = 1;
  std::int64_t ep = 1;
  // FSDP with MixedPrecision(param_dtype = compute dtype), DeepSpeed ZeRO-3: each layer's weights
  // are gathered already in the compute dtype, so autocast has no weight to cast (no cast copy
  // cached for the forward, no cast kernels; casting the 1/N shard before the gather is left out).
  bool weights_gathered_in_compute_dtype = false;
};

// Every transformer block is the same function of its input: past the second, blocks are copies of
// it with their tensors, parameters and regions numbered on (`repeat_layers` false: each built op
// by op, the reference the tests compare with).
Tape build_step_tape(const TransformerSpec& model, const TrainingSpec& training, StageSpec stage = {},
                     bool repeat_layers = true);

}  // namespace scaleout
