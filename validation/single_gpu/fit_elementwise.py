#!/usr/bin/env python3
"""ATen's non-vectorized elementwise loops, from measure_naive_attention.py's kernel lists.

Reads naive_attention.json (every CUDA kernel of the naive attention core, forward and backward,
with its time) and works out, over the ten configurations, the bandwidth of:
  - the unrolled loop: the bf16 -> fp32 upcast of the scores (direct_copy_kernel_cuda through
    unrolled_elementwise_kernel), 6 bytes an element;
  - the strided loop: masked_fill_ with the s x s mask broadcast over batch and heads
    (gpu_kernel_impl_nocast's elementwise_kernel<128, 4>), 4 bytes an element (the bf16 scores
    read and written; the mask, 1/(batch*heads) of them, stays in L2);
  - the vectorized kernels beside them, for reference: the fp32 -> bf16 downcast
    (bfloat16_copy_kernel_cuda, 6 bytes), the bf16 scale (4 bytes), the softmax backward's
    fp32 grad * output (12 bytes).
Each is a known number of passes over the scores (the upcast: .float() forward and the
gradient of .to(bf16) backward); tensors past 2^31 elements run as several launches
(TensorIterator's 32-bit indexing), so launches are not counted, time is summed. Prints each median
bandwidth and the profile keys: unrolled_efficiency and strided_efficiency as fractions of the
GPU's HBM bandwidth (--hbm, this GPU's), and for another GPU of the same SMs (--other-hbm with its
profile's --other-memory-efficiency) the same ratios to the vectorized kernels' bandwidth.

    python3 validation/single_gpu/fit_elementwise.py naive_attention.json --hbm 3.35e12 \
        --other-memory-efficiency 0.8288
"""
import argparse, json, statistics, sys

KERNELS = {  # pattern, bytes an element, passes per forward and backward
    'unrolled upcast bf16->fp32': ('unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda', 6, 2),
    'strided masked_fill bf16': ('masked_fill_kernel', 4, 2),
    'vectorized downcast fp32->bf16': ('bfloat16_copy_kernel_cuda', 6, 2),
    'vectorized scale bf16': ('AUnaryFunctor<c10::BFloat16', 4, 2),
    'vectorized mul fp32': ('BinaryFunctor<float, float, float', 12, 1),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('file')
    ap.add_argument('--hbm', type=float, required=True, help='HBM bandwidth of the GPU measured, bytes/s')
    ap.add_argument('--block', default=None,
                    help="measure_block_kernels.py's block_kernels.json: the strided loop over fp32 (RMSNorm's "
                         "x * rsqrt(mean) forward and its gradient's product with the same statistic), and over bf16 "
                         "(RoPE's products with cos/sin, RMSNorm's weight) in the pure-bf16 Llama configurations")
    ap.add_argument('--other-memory-efficiency', type=float, default=None,
                    help="another GPU's profile memory_efficiency: print its keys by the same ratios")
    a = ap.parse_args()
    d = json.load(open(a.file))
    bw = {k: [] for k in KERNELS}
    for r in d['rows']:
        elems = r['batch'] * r['heads'] * r['seq'] ** 2
        for key, (pattern, per, passes) in KERNELS.items():
            t = sum(t for name, c, t in r['kernels_per_fwd_bwd'] if pattern in name)
            if t > 0:
                bw[key].append(per * elems * passes / t)
    med = {k: statistics.median(v) for k, v in bw.items() if v}
    print('measured on %s (%s)' % (d['env']['gpu'], d['env']['date_utc']))
    for k, v in bw.items():
        print('  %-32s %2d configs: median %.3f TB/s (%.3f-%.3f)' % (k, len(v), med[k] / 1e12, min(v) / 1e12, max(v) / 1e12))
    vec = statistics.median([med[k] for k in med if k.startswith('vectorized')])
    u, s = med['unrolled upcast bf16->fp32'], med['strided masked_fill bf16']
    print('vectorized reference (median of the three): %.3f TB/s = %.3f of HBM' % (vec / 1e12, vec / a.hbm))
    print('this GPU:  unrolled_efficiency %.3f  strided_efficiency %.3f  (fractions of %.3g B/s)' % (u / a.hbm, s / a.hbm, a.hbm))
    print('ratios to the vectorized kernels: unrolled %.3f, strided %.3f' % (u / vec, s / vec))
    f32 = None
    if a.block:
        b = json.load(open(a.block))
        f32s, b16s = [], []
        for r in b['rows']:
            c = r['cfg']
            if c['arch'] != 'llama' or c['precision'] != 'bf16':
                continue  # (under autocast the norm's weight product is fp32 too: another count)
            L, tok, h, hd = r['layers'], c['micro_batch'] * c['seq_len'], c['hidden'], c['hidden'] // c['heads']
            norms = 2 * L + 1
            for name, n, t in r['kernels']:
                # fp32: 8 bytes an element (read, write; the row statistic stays in cache), one
                # launch per norm forward and one backward
                if 'elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, float' in name:
                    assert round(n) == 2 * norms, (r['config'], n)
                    f32s.append(8.0 * tok * h * n / t)
                # bf16: RoPE's q and k products with cos and sin, forward and
                # backward, and the norms' weight product forward and its gradient's backward
                if 'elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16' in name:
                    assert round(n) == 8 * L + 2 * norms, (r['config'], n)
                    per_layer = 4 * tok * (c['heads'] + c['kv_heads']) * hd * 4.0
                    b16s.append((L * per_layer + 2 * norms * tok * h * 4.0) / t)
        f32 = statistics.median(f32s)
        print('  %-32s %2d configs: median %.3f TB/s (%.3f-%.3f)' % ('strided fp32 (RMSNorm x * rs)', len(f32s), f32 / 1e12,
                                                                     min(f32s) / 1e12, max(f32s) / 1e12))
        print('  %-32s %2d configs: median %.3f TB/s (check of the bf16 figure above)' % (
            'strided bf16 (RoPE, norm weight)', len(b16s), statistics.median(b16s) / 1e12))
        print('this GPU:  strided_efficiency fp32 %.3f (ratio to the vectorized kernels %.3f)' % (f32 / a.hbm, f32 / vec))
    if a.other_memory_efficiency:
        e = a.other_memory_efficiency
        print('other GPU (memory_efficiency %.4f): unrolled_efficiency %.3f  strided_efficiency bf16 %.3f%s' %
              (e, e * u / vec, e * s / vec, '' if f32 is None else '  fp32 %.3f' % (e * f32 / vec)))


if __name__ == '__main__':
    sys.exit(main())
