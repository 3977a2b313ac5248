#include "models/training.hpp"

namespace scaleout {

std::optional<PrecisionRecipe> precision_recipe(const std::string& name) {
  PrecisionRecipe r;
  r.name = name;
  if (name == "bf16-mixed" || name == "fp16-mixed") {
    // PyTorch autocast: fp32 weights, grads and moments (16 bytes/param with Adam); matmuls in
    // bf16; fp32 embedding output keeps the residual stream in fp32.
    r.param = r.grad = r.state = r.residual = Dtype::fp32;
    r.compute = name == "bf16-mixed" ? Dtype::bf16 : Dtype::fp16;
    r.autocast = true;
  } else if (name == "fsdp-bf16") {
    // FSDP's MixedPrecision(param_dtype=bf16, reduce_dtype=fp32) without autocast, as torchtitan
    // runs FSDP2: fp32 sharded weights, gradients and moments (16 bytes/param with Adam, sharded);
    // the weights gathered in bf16, so activations and the residual stream are bf16 throughout.
    r.param = r.grad = r.state = Dtype::fp32;
    r.compute = r.residual = Dtype::bf16;
  } else if (name == "bf16") {
    r.param = r.grad = r.state = r.residual = r.compute = Dtype::bf16;
  } else if (name == "megatron-bf16" || name == "megatron-fp16" || name == "fp8-mixed" || name == "nemo-bf16" || name == "nemo-fp8") {
    // Megatron-LM: low-precision params, fp32 main grads, fp32 master copy and moments (18 B/param).
    // NeMo (1.x, through 24.x containers) runs the same model with Apex's distributed Adam, and
    // for bf16 weights and an fp32 optimizer sets store_params=False, store_param_remainders=True
    // (megatron_base_model.py setup_optimization): the master weight is the bf16 parameter plus
    // its low 16 bits kept by the optimizer, 2 bytes, not a 4-byte copy (16 B/param). Without the
    // distributed optimizer NeMo keeps a full fp32 copy: the scenario sets 4 again.
    const Dtype lo = name == "megatron-fp16" ? Dtype::fp16 : Dtype::bf16;
    r.param = r.residual = lo;
    r.compute = name == "fp8-mixed" || name == "nemo-fp8" ? Dtype::fp8 : lo;
    r.grad = r.state = Dtype::fp32;
    r.master_copy = true;
    // (NeMo's FP8 runs keep bf16 parameters, Transformer Engine casting them for each GEMM: the
    // same optimizer, the same remainders.)
    if (name == "nemo-bf16" || name == "nemo-fp8") r.master_bytes = 2.0;
    r.fused_kernels = true;
    r.megatron = true;
  } else {
    return std::nullopt;
  }
  return r;
}

double optimizer_state_bytes(Optimizer o, Dtype state) {
  switch (o) {
    case Optimizer::adamw: return 2 * dtype_bytes(state);
    case Optimizer::sgd: return dtype_bytes(state);
    // Adafactor (Shazeer & Stern 2018) without momentum: factored second moment, row and column
    // vectors per matrix: O(rows + cols), negligible per parameter; counted as 1/64 byte.
    case Optimizer::adafactor: return dtype_bytes(state) / 64.0;
    // bitsandbytes 8-bit Adam: two 1-byte moments plus an fp32 absmax per 2048-element block each.
    case Optimizer::adamw_8bit: return 2.0 + 2.0 * 4.0 / 2048.0;
  }
  return 0;
}

}  // namespace scaleout
