#!/usr/bin/env python3
"""The host's cost of activation checkpointing (torch.utils.checkpoint, use_reentrant=False), per
transformer block, measured where the GPU cannot be the bottleneck.

The model classes of measure_steps.py (imported, not copied) run at 32 tokens (one micro-batch),
so every kernel is a few microseconds and the step's wall time is the host's: the Python forward,
autograd's engine and the launches. Each configuration runs with 2 and with 6 layers, plainly
and with its blocks checkpointed (or, for recompute=selective, the attention core), and the
difference of the two depths gives one block's host time in the forward (the model call until it
returns) and in the backward (loss.backward() until it returns), and its kernels (torch.profiler).

    python3 validation/single_gpu/measure_checkpoint_host.py --out DIR [--reps 40]

Writes DIR/checkpoint_host.json: per configuration, recompute mode and depth the median host
seconds of the forward and of the backward and the kernels of one step, and prints per-block
figures: the checkpointed forward's host time over the plain one's, and the backward's extra host
time over the plain forward's (the recompute's host cost in units of the forward's).
"""
import argparse, json, os, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# Rows of the single-GPU validation with full or selective recompute (their model and precision;
# the sequence and batch are cut to 32 x 1 here).
PICK = [
    ('gpt2-124m_s1024_b16_bf16mixed_full_flash', ('none', 'full')),
    ('gpt2-355m_s2048_b4_bf16mixed_full_flash', ('none', 'full')),
    ('gpt2-355m_s2048_b8_bf16mixed_selective_naive', ('none', 'selective')),
    ('llama-1b_s4096_b2_bf16mixed_full_naive', ('none', 'full')),
    ('llama-3b_s4096_b4_bf16mixed_full_flash', ('none', 'full')),
    ('llama2-7b_s4096_b4_bf16_full_flash', ('none', 'full')),
]
DEPTHS = (2, 6)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', required=True)
    ap.add_argument('--reps', type=int, default=40)
    ap.add_argument('--tokens', type=int, default=32)
    a = ap.parse_args()
    import torch
    import measure_steps as ms
    import gpu_timing
    os.makedirs(a.out, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    env = {'date_utc': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()), 'torch': torch.__version__,
           'cuda': torch.version.cuda, 'gpu': props.name, 'tokens': a.tokens, 'reps': a.reps,
           'cpu': subprocess.run(['sh', '-c', "grep -m1 'model name' /proc/cpuinfo"], capture_output=True,
                                 text=True).stdout.strip()}
    build = ms.define_model(torch)
    configs = {c['id']: c for c in ms.build_config_list()}
    rows = []
    for cid, modes in PICK:
        for mode in modes:
            for L in DEPTHS:
                cfg = dict(configs[cid])
                cfg.update(layers=L, seq_len=a.tokens, micro_batch=1, recompute=mode)
                torch.manual_seed(1234)
                model = build(cfg)
                idx = torch.randint(0, cfg['vocab'], (1, a.tokens), device='cuda')
                tgt = torch.randint(0, cfg['vocab'], (1, a.tokens), device='cuda')
                mixed = cfg['precision'] == 'bf16-mixed'

                def forward():
                    if mixed:
                        with torch.autocast('cuda', dtype=torch.bfloat16):
                            return model(idx, tgt)
                    return model(idx, tgt)

                def step():
                    model.zero_grad(set_to_none=True)
                    forward().backward()

                for _ in range(5):
                    step()
                torch.cuda.synchronize()
                fw, bw = [], []
                for _ in range(a.reps):
                    model.zero_grad(set_to_none=True)
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    loss = forward()
                    t1 = time.perf_counter()
                    loss.backward()
                    t2 = time.perf_counter()
                    torch.cuda.synchronize()
                    fw.append(t1 - t0)
                    bw.append(t2 - t1)
                fw.sort()
                bw.sort()
                ks = gpu_timing.kernels_of(torch, step, 3)
                rows.append({'config': cid, 'recompute': mode, 'layers': L, 'fwd_host_s': fw[len(fw) // 2],
                             'bwd_host_s': bw[len(bw) // 2], 'kernels': sum(k[1] for k in ks),
                             'gpu_s': sum(k[2] for k in ks)})
                r = rows[-1]
                print('%-46s %-9s L=%d  fwd %7.3f ms  bwd %7.3f ms  %5.0f kernels (%.3f ms on the GPU)' % (
                    cid, mode, L, r['fwd_host_s'] * 1e3, r['bwd_host_s'] * 1e3, r['kernels'], r['gpu_s'] * 1e3),
                    flush=True)
                del model, idx, tgt, loss
                torch.cuda.empty_cache()
    json.dump({'env': env, 'rows': rows}, open(os.path.join(a.out, 'checkpoint_host.json'), 'w'), indent=1)
    # Per block: the difference of the two depths.
    by = {(r['config'], r['recompute'], r['layers']): r for r in rows}
    lo, hi = DEPTHS
    print('\nper block (depth %d minus depth %d, over %d blocks):' % (hi, lo, hi - lo))
    for cid, modes in PICK:
        per = {}
        for mode in modes:
            d = {k: (by[(cid, mode, hi)][k] - by[(cid, mode, lo)][k]) / (hi - lo)
                 for k in ('fwd_host_s', 'bwd_host_s', 'kernels')}
            per[mode] = d
            print('  %-46s %-9s fwd %7.1f us  bwd %7.1f us  %5.1f kernels' % (
                cid, mode, d['fwd_host_s'] * 1e6, d['bwd_host_s'] * 1e6, d['kernels']))
        base, ck = per[modes[0]], per[modes[1]]
        print('    checkpointed forward / plain forward %.3f;  (backward extra) / plain forward %.3f' % (
            ck['fwd_host_s'] / base['fwd_host_s'], (ck['bwd_host_s'] - base['bwd_host_s']) / base['fwd_host_s']))


if __name__ == '__main__':
    sys.exit(main())
