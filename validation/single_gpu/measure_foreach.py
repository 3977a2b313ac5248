#!/usr/bin/env python3
"""How fast PyTorch's multi-tensor (foreach) optimizer kernels stream, by element width.

The single-GPU steps (steps.jsonl) time optimizer.step() apart with CUDA events: AdamW with
foreach=True over 16-bit states took about 20 % longer than its bytes at the streaming
bandwidth, over 32-bit states about 5 %. This measures the kernels themselves on synthetic
parameter lists shaped like a Llama model's (no model, no data): the whole AdamW step and its
single foreach ops, for bf16 and fp32 tensors, and one plain elementwise op over one large
tensor for the streaming reference. Bytes per element are counted from what each op reads and
writes (torch/optim/adamw.py _multi_tensor_adamw, torch 2.x).

    python3 validation/single_gpu/measure_foreach.py --out DIR [--params 1.0e9]

Writes DIR/foreach.json (one object: environment, then one row per measurement).
"""
import argparse, json, os, subprocess, sys, time

import gpu_timing


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', required=True)
    ap.add_argument('--params', type=float, default=1.0e9, help='parameters in the synthetic list')
    ap.add_argument('--reps', type=int, default=10)
    a = ap.parse_args()
    import torch
    os.makedirs(a.out, exist_ok=True)
    dev = torch.device('cuda')
    props = torch.cuda.get_device_properties(dev)
    env = {
        'date_utc': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()),
        'torch': torch.__version__, 'cuda': torch.version.cuda, 'gpu': props.name,
        'sms': props.multi_processor_count, 'memory_bytes': props.total_memory,
        'nvidia_smi': subprocess.run(['nvidia-smi', '--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit',
                                      '--format=csv'], capture_output=True, text=True).stdout,
    }
    # One Llama-3-8B-like layer's matrices (q, k, v, o, gate, up, down) and two norms, repeated.
    layer = [(4096, 4096), (1024, 4096), (1024, 4096), (4096, 4096), (14336, 4096), (14336, 4096), (4096, 14336),
             (4096,), (4096,)]
    per_layer = sum(int(torch.tensor(s).prod()) for s in layer)
    layers = max(1, int(a.params // per_layer))
    shapes = layer * layers
    n = sum(int(torch.tensor(s).prod()) for s in shapes)
    rows = []

    def timed(fn, reps):
        return gpu_timing.timed(torch, fn, reps)

    for dt in (torch.bfloat16, torch.float32):
        b = torch.tensor([], dtype=dt).element_size()
        params = [torch.randn(s, device=dev, dtype=dt).mul_(0.02).requires_grad_() for s in shapes]
        for p in params:
            p.grad = torch.randn_like(p).mul_(1e-3)
        # torch's fused AdamW (one multi_tensor_apply kernel for the whole update) first, its
        # states dropped before the foreach optimizer makes its own.
        fused = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, fused=True)
        t, ts = timed(fused.step, a.reps)
        # reads p, g, m, v and writes p, m, v: 7 elements
        rows.append({'what': 'adamw_fused_step', 'dtype': str(dt), 'element_bytes': b, 'elements': n,
                     'tensors': len(params), 'bytes_model': 7 * b * n, 'median_s': t, 'times_s': ts})
        del fused
        torch.cuda.empty_cache()
        opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, foreach=True)
        t, ts = timed(opt.step, a.reps)
        # decay p 2b; lerp m 3b; mul v 2b; addcmul v 3b (g read once per element); sqrt 2b; div 2b; add 2b; addcdiv p 4b
        rows.append({'what': 'adamw_foreach_step', 'dtype': str(dt), 'element_bytes': b, 'elements': n,
                     'tensors': len(params), 'bytes_model': 20 * b * n, 'median_s': t, 'times_s': ts})
        ms = [opt.state[p]['exp_avg'] for p in params]
        vs = [opt.state[p]['exp_avg_sq'] for p in params]
        gs = [p.grad for p in params]
        with torch.no_grad():
            ps = [p.detach() for p in params]
            tmp = torch._foreach_sqrt(vs)
            for name, fn, per in (
                    ('foreach_mul_', lambda: torch._foreach_mul_(vs, 0.999), 2),
                    ('foreach_lerp_', lambda: torch._foreach_lerp_(ms, gs, 0.1), 3),
                    ('foreach_addcmul_', lambda: torch._foreach_addcmul_(vs, gs, gs, 0.001), 3),
                    ('foreach_sqrt', lambda: torch._foreach_sqrt(vs), 2),
                    ('foreach_addcdiv_', lambda: torch._foreach_addcdiv_(ps, ms, tmp, -1e-6), 4)):
                t, ts = timed(fn, a.reps)
                rows.append({'what': name, 'dtype': str(dt), 'element_bytes': b, 'elements': n, 'tensors': len(params),
                             'bytes_model': per * b * n, 'median_s': t, 'times_s': ts})
            del tmp
            big = torch.randn(n, device=dev, dtype=dt)
            t, ts = timed(lambda: big.mul_(0.999), a.reps)
            rows.append({'what': 'one_tensor_mul_', 'dtype': str(dt), 'element_bytes': b, 'elements': n, 'tensors': 1,
                         'bytes_model': 2 * b * n, 'median_s': t, 'times_s': ts})
            del big
        del params, opt, ms, vs, gs, ps
        torch.cuda.empty_cache()
    for r in rows:
        r['bandwidth_Bps'] = r['bytes_model'] / r['median_s']
        print('%-20s %-15s %6.2f ms  %7.1f GB/s' % (r['what'], r['dtype'], r['median_s'] * 1e3, r['bandwidth_Bps'] / 1e9), flush=True)
    json.dump({'env': env, 'rows': rows}, open(os.path.join(a.out, 'foreach.json'), 'w'), indent=1)


if __name__ == '__main__':
    sys.exit(main())
