#!/usr/bin/env python3
"""The naive (materialised) attention core of measure_steps.py, kernel by kernel.

The single-GPU validation's naive-attention rows run 17 to 24 % slower than the model
predicts. Their batched products have k = 64 (the head dimension) or n = 64, shapes the
calibration harness never measures. This times, for each naive configuration of
steps.jsonl (GPT-2 heads of 64 and Llama heads of 64/96/128), the attention core exactly as
measure_steps.py writes it (q, k, v as non-contiguous views of the projection output;
scores = q @ k^T * hd^-0.5; masked_fill_; fp32 softmax; bf16 probs; probs @ v), forward and
backward under autograd, and lists every CUDA kernel it launched with its time (torch.profiler),
then each of the six batched products alone on contiguous operands (CUDA events).

    python3 validation/single_gpu/measure_naive_attention.py --out DIR

Writes DIR/naive_attention.json.
"""
import argparse, json, os, subprocess, sys, time

import gpu_timing

# (name, batch, heads, seq, head_dim): the naive rows of validation/single_gpu/results/steps.jsonl
CONFIGS = [
    ('gpt2-124m_s1024_b8', 8, 12, 1024, 64),
    ('gpt2-124m_s2048_b8', 8, 12, 2048, 64),
    ('gpt2-355m_s1024_b8', 8, 16, 1024, 64),
    ('gpt2-355m_s2048_b8', 8, 16, 2048, 64),
    ('gpt2-1.5b_s1024_b8', 8, 25, 1024, 64),
    ('gpt-2.7b_s4096_b2', 2, 32, 4096, 80),
    ('llama-1b_s2048_b2', 2, 32, 2048, 64),
    ('llama-1b_s4096_b2', 2, 32, 4096, 64),
    ('llama-3b_s2048_b1', 1, 24, 2048, 128),
    ('llama2-7b_s4096_b1', 1, 32, 4096, 128),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', required=True)
    ap.add_argument('--reps', type=int, default=10)
    a = ap.parse_args()
    import torch
    os.makedirs(a.out, exist_ok=True)
    dev = torch.device('cuda')
    props = torch.cuda.get_device_properties(dev)
    env = {'date_utc': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()), 'torch': torch.__version__,
           'cuda': torch.version.cuda, 'gpu': props.name, 'sms': props.multi_processor_count,
           'nvidia_smi': subprocess.run(['nvidia-smi', '--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem',
                                         '--format=csv'], capture_output=True, text=True).stdout}
    dt = torch.bfloat16

    def timed(fn, reps):
        return gpu_timing.timed(torch, fn, reps)[0]

    rows = []
    for name, b, heads, s, hd in CONFIGS:
        h = heads * hd
        mask = torch.ones(s, s, device=dev, dtype=torch.bool).triu(1)
        x = torch.randn(b, s, 3 * h, device=dev, dtype=dt, requires_grad=True)

        def core():
            q, k, v = x.split(h, dim=2)
            q = q.view(b, s, heads, hd).transpose(1, 2)
            k = k.view(b, s, heads, hd).transpose(1, 2)
            v = v.view(b, s, heads, hd).transpose(1, 2)
            scores = (q @ k.transpose(-2, -1)) * (hd ** -0.5)
            scores.masked_fill_(mask, float('-inf'))
            probs = torch.softmax(scores.float(), dim=-1).to(dt)
            return probs @ v

        gy = torch.randn(b, heads, s, hd, device=dev, dtype=dt)

        def fwd():
            with torch.no_grad():
                core()

        def fwd_bwd():
            y = core()
            y.backward(gy)
            x.grad = None

        row = {'config': name, 'batch': b, 'heads': heads, 'seq': s, 'head_dim': hd,
               'fwd_s': timed(fwd, a.reps), 'fwd_bwd_s': timed(fwd_bwd, a.reps)}
        row['kernels_per_fwd_bwd'] = gpu_timing.kernels_of(torch, fwd_bwd, a.reps)
        # The six products alone, contiguous operands, (b*heads) batches.
        B = b * heads
        q = torch.randn(B, s, hd, device=dev, dtype=dt)
        kk = torch.randn(B, s, hd, device=dev, dtype=dt)
        p = torch.randn(B, s, s, device=dev, dtype=dt)
        prods = {}
        prods['qk_T (m=s n=s k=hd)'] = timed(lambda: torch.bmm(q, kk.transpose(1, 2)), a.reps)
        prods['pv (m=s n=hd k=s)'] = timed(lambda: torch.bmm(p, kk), a.reps)
        prods['p_T_dy (m=s n=hd k=s, a transposed)'] = timed(lambda: torch.bmm(p.transpose(1, 2), kk), a.reps)
        prods['dy_v_T (m=s n=s k=hd)'] = timed(lambda: torch.bmm(q, kk.transpose(1, 2)), a.reps)
        row['products_s'] = prods
        row['flops_per_product'] = {'m=s n=s k=hd': 2.0 * B * s * s * hd, 'm=s n=hd k=s': 2.0 * B * s * s * hd}
        rows.append(row)
        print('%-22s fwd %7.3f ms  fwd+bwd %7.3f ms  qkT %6.3f  pv %6.3f' %
              (name, row['fwd_s'] * 1e3, row['fwd_bwd_s'] * 1e3, prods['qk_T (m=s n=s k=hd)'] * 1e3,
               prods['pv (m=s n=hd k=s)'] * 1e3), flush=True)
        for kname, cnt, t in row['kernels_per_fwd_bwd'][:8]:
            print('    %7.3f ms x%-4.1f %s' % (t * 1e3, cnt, kname[:110]), flush=True)
        del x, gy, q, kk, p, mask
        torch.cuda.empty_cache()
    json.dump({'env': env, 'rows': rows}, open(os.path.join(a.out, 'naive_attention.json'), 'w'), indent=1)


if __name__ == '__main__':
    sys.exit(main())
