#!/usr/bin/env python3
"""Every CUDA kernel of one training step's forward and backward, for a few configurations of
measure_steps.py, cut to two layers (the model classes and the precision handling of
measure_steps.py itself, imported, not copied).

The eager Llama flash rows of the single-GPU validation run 4 to 8 % slower than the model
predicts. This lists what their step runs, kernel by kernel (torch.profiler), so that the
elementwise kernels' access paths (vectorized, unrolled, strided: ATen's Loops.cuh) can be
measured in place: RMSNorm's x.float() and broadcast multiplies, RoPE over transposed views,
SwiGLU, the residual adds, autocast's casts, the loss.

    python3 validation/single_gpu/measure_block_kernels.py --out DIR [--layers 2] [--pick ID,ID]

Writes DIR/block_kernels.json: per configuration, the kernels of one forward + backward
(name, launches, total seconds), averaged over the timed repetitions.
"""
import argparse, json, os, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# Validation and calibration configurations with flash attention (eager Llama and GPT blocks).
PICK = [
    'llama-1b_s2048_b8_bf16_none_flash',
    'llama-3b_s2048_b4_bf16mixed_none_flash',
    'llama2-7b_s2048_b4_bf16_none_flash',
    'llama3-8b_s2048_b2_bf16_none_flash',
    'gpt2-355m_s1024_b8_bf16mixed_none_flash',
    'gpt2-1.5b_s1024_b4_bf16mixed_none_flash',
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', required=True)
    ap.add_argument('--layers', type=int, default=2)
    ap.add_argument('--reps', type=int, default=3)
    ap.add_argument('--pick', default=','.join(PICK), help='comma-separated configuration ids of measure_steps.py')
    a = ap.parse_args()
    import torch
    import measure_steps as ms
    import gpu_timing
    os.makedirs(a.out, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    env = {'date_utc': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()), 'torch': torch.__version__,
           'cuda': torch.version.cuda, 'gpu': props.name, 'sms': props.multi_processor_count,
           'layers': a.layers,
           'nvidia_smi': subprocess.run(['nvidia-smi', '--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem',
                                         '--format=csv'], capture_output=True, text=True).stdout}
    build = ms.define_model(torch)
    configs = {c['id']: c for c in ms.build_config_list()}
    rows = []
    for cid in a.pick.split(','):
        cfg = dict(configs[cid])
        cfg['layers'] = a.layers
        torch.manual_seed(1234)
        model = build(cfg)
        b, s, V = cfg['micro_batch'], cfg['seq_len'], cfg['vocab']
        idx = torch.randint(0, V, (b, s), device='cuda')
        tgt = torch.randint(0, V, (b, s), device='cuda')
        mixed = cfg['precision'] == 'bf16-mixed'

        def step():
            model.zero_grad(set_to_none=True)
            if mixed:
                with torch.autocast('cuda', dtype=torch.bfloat16):
                    loss = model(idx, tgt)
            else:
                loss = model(idx, tgt)
            loss.backward()

        # The step's wall time between CUDA events (kernels and the gaps the host leaves), then
        # its kernels under the profiler.
        step_s = gpu_timing.timed(torch, step, a.reps, warmup=2)[0]
        ks = gpu_timing.kernels_of(torch, step, a.reps)
        keep = {k: cfg[k] for k in ('model', 'arch', 'hidden', 'heads', 'kv_heads', 'ffn', 'vocab', 'seq_len',
                                    'micro_batch', 'precision') if k in cfg}
        rows.append({'config': cid, 'cfg': keep, 'layers': a.layers, 'step_s': step_s, 'gpu_s': sum(r[2] for r in ks),
                     'kernels': ks})
        print('%-44s %8.3f ms step, %8.3f ms of kernels' % (cid, step_s * 1e3, rows[-1]['gpu_s'] * 1e3), flush=True)
        for name, c, t in ks[:25]:
            print('    %7.3f ms x%-5.1f %s' % (t * 1e3, c, name[:120]), flush=True)
        del model, idx, tgt
        torch.cuda.empty_cache()
    json.dump({'env': env, 'rows': rows}, open(os.path.join(a.out, 'block_kernels.json'), 'w'), indent=1)


if __name__ == '__main__':
    sys.exit(main())
