#pragma once
// A kernel as the compute model sees it: a GEMM shape, an attention shape, or a memory-bound pass
// described by the bytes it reads and writes.
#include <cstdint>
#include <string>

#include "hardware/dtype.hpp"

namespace scaleout {

enum class KernelKind : std::uint8_t { gemm, attention_fwd, attention_bwd, memory, collective };

// Which parallel group a collective runs over.
enum class CommGroup : std::uint8_t { tp, dp, pp, cp, ep };
enum class CollectiveKind : std::uint8_t { all_reduce, reduce_scatter, all_gather, broadcast, reduce, all_to_all, send_recv };

struct GemmShape {
  // C[m,n] = A[m,k] * B[k,n], `batch` independent products (batched matmul).
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  // Which dimensions are leading dimensions of the operands in memory (they must be multiples of
  // 16 bytes for cuBLAS's vectorised kernels): n and k for a plain product and for dgrad; m and n
  // for a weight gradient (A is the transposed output gradient).
  bool a_transposed = false;
  // FP8 only: the tensor cores' partial sums promoted to fp32 as the reduction goes (cuBLASLt
  // without fast accumulation; Transformer Engine's split accumulator, its default for the dgrad
  // and wgrad products): the math takes ComputeProfile::fp8_split_accumulate times as long.
  bool split_accumulate = false;
  double flops() const { return 2.0 * double(m) * double(n) * double(k) * double(batch); }
};

struct AttentionShape {
  std::int64_t batch = 1, heads = 1, seq = 0, head_dim = 0;
  bool causal = true;
  std::int64_t seq_kv = 0;  // keys per query when it differs from seq (context parallelism); 0: seq
  // Forward FLOPs of QK^T and PV (2 matmuls of 2*s*s*d each per head), halved when causal.
  double fwd_flops() const {
    const double kv = double(seq_kv > 0 ? seq_kv : seq);
    const double full = 4.0 * double(batch) * double(heads) * double(seq) * kv * double(head_dim);
    return causal ? full / 2 : full;
  }
  // Backward recomputes QK^T and runs four more matmuls: 2.5 times the forward (Dao et al. 2022).
  double bwd_flops() const { return 2.5 * fwd_flops(); }
};

struct Kernel {
  KernelKind kind = KernelKind::memory;
  Dtype dtype = Dtype::bf16;
  GemmShape gemm;
  AttentionShape attn;
  double bytes = 0;  // memory-bound kernels: bytes read plus bytes written; collectives: message size
  bool reduction = false;  // memory-bound kernels that reduce rows (norms, softmax): their own efficiency
  // PyTorch's multi-tensor (foreach) kernels, as the optimizers run them (ATen's
  // MultiTensorApply.cuh): each thread moves kILP = 4 elements an access whatever their width, so
  // 16-bit tensors move half the bytes an access of 32-bit ones and stream at their own
  // efficiency, by `dtype` (ComputeProfile::multi_tensor_efficiency).
  bool multi_tensor = false;
  // How an eager PyTorch elementwise kernel walks its tensors (ATen's gpu_kernel_impl, Loops.cuh):
  // vectorized, contiguous operands of one dtype in vector loads (the common case); unrolled,
  // contiguous but converting dtypes element by element (an upcast: Copy.cu runs only fp32 ->
  // bf16/fp16 through its vectorized copies); strided, an operand broadcast or not contiguous
  // (the generic indexed loop, e.g. masked_fill with an s x s mask over every head). Each streams
  // at its own efficiency (ComputeProfile::unrolled_efficiency, strided_efficiency).
  enum class Access : std::uint8_t { vectorized, unrolled, strided };
  Access access = Access::vectorized;
  CollectiveKind coll = CollectiveKind::all_reduce;
  CommGroup group = CommGroup::tp;
  std::string name;
  // The compute model's time for this kernel (a collective: the closed-form network's for the
  // stage its tape belongs to), once a step simulation has worked it out (every micro-batch runs
  // the same tape kernels); negative: not yet.
  double seconds = -1;
  // Launched this many times back to back, each launch the same (the optimizer's
  // multi_tensor_apply chunks: thousands for a large model on one GPU, planned and emitted as one).
  std::int32_t launches = 1;
  // A TP collective that Transformer Engine's userbuffers overlap with a GEMM of the same op
  // (tp_comm_overlap): the GEMM at this offset in the op's kernel list (+1 the next, -1 the one
  // before), 0 for none. Such a collective never goes to the network: its `seconds` is the part of
  // it the GEMM leaves exposed (see step.cpp), and it still waits for its group.
  std::int8_t overlaps = 0;
  // How (Transformer Engine's initialize_ub methods): ring_exchange, the GEMM in tp chunks as they
  // arrive, the transfers on copy engines; pipeline, the GEMM in 4 chunks each reduce-scattered as
  // it ends, on 16 SMs taken from the GEMM; bulk, the collective beside the whole GEMM, on 16 SMs
  // taken from it.
  enum class Overlap : std::uint8_t { ring_exchange, pipeline, bulk };
  Overlap overlap = Overlap::ring_exchange;

  double flops() const {
    switch (kind) {
      case KernelKind::gemm: return gemm.flops();
      case KernelKind::attention_fwd: return attn.fwd_flops();
      case KernelKind::attention_bwd: return attn.bwd_flops();
      case KernelKind::memory: case KernelKind::collective: return 0;
    }
    return 0;
  }
};

}  // namespace scaleout
