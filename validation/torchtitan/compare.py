#!/usr/bin/env python3
"""torchtitan's published Llama 3.1 8B FSDP runs (pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md)
beside scaleout's prediction: one markdown report on stdout.

    python3 validation/torchtitan/compare.py [path/to/scaleout] > validation/torchtitan/REPORT.md

The runs used H100s with 96 GB of HBM2e at 2.4 TB/s and a 500 W power limit; scaleout's H100 profile
is the 700 W SXM part (given 96 GB here). Absolute throughput is therefore not comparable, and is
shown only as the ratio; what is compared is what the part does not change: that each run fits, the
memory it needed, and the ratios between runs on the same part (torch.compile against eager kernels,
128 GPUs against 8). Nothing in scaleout is fitted to these rows."""
import json
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
binary = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, '..', '..', 'build', 'scaleout')
rows = json.load(open(os.path.join(here, 'published.json')))
GiB = 2.0 ** 30
pred = {}
print('| run | GPUs | published TPS/GPU | predicted (700 W profile) | ratio | published memory | predicted need | error | fits |')
print('|---|---:|---:|---:|---:|---:|---:|---:|---|')
mem_errs = []
not_fitting = []
for row in rows:
    p = subprocess.run([binary, 'run', os.path.join(here, row['scenario']), '--format', 'json'], capture_output=True, text=True)
    if p.returncode != 0:
        print('| %s | %d | failed: %s |' % (row['id'], row['gpus'], p.stderr.strip().splitlines()[-1][:120]))
        continue
    r = json.loads(p.stdout)
    tps = r['tokens_per_s'] / r['gpus']
    need = r['memory']['required_bytes'] / GiB
    err = (need - row['measured_memory_gib']) / row['measured_memory_gib']
    mem_errs.append(abs(err))
    if not r['fits']:
        not_fitting.append(row['id'])
    pred[row['id']] = tps
    print('| %s | %d | %d | %d | %.2f | %.1f GiB | %.1f GiB | %+.1f%% | %s |' % (
        row['id'], row['gpus'], row['measured_tokens_per_s_per_gpu'], tps, tps / row['measured_tokens_per_s_per_gpu'],
        row['measured_memory_gib'], need, 100 * err, 'yes' if r['fits'] else 'NO'))
pub = {row['id']: row['measured_tokens_per_s_per_gpu'] for row in rows}
print('\nRatios on the same part (published, predicted, error):\n')
print('| ratio | published | predicted | error |')
print('|---|---:|---:|---:|')
for a, b, what in [('torchtitan-llama3.1-8b-8gpu-compile', 'torchtitan-llama3.1-8b-8gpu', 'torch.compile / eager, 8 GPUs'),
                   ('torchtitan-llama3.1-8b-128gpu-compile', 'torchtitan-llama3.1-8b-128gpu', 'torch.compile / eager, 128 GPUs'),
                   ('torchtitan-llama3.1-8b-128gpu', 'torchtitan-llama3.1-8b-8gpu', '128 GPUs / 8 GPUs, eager'),
                   ('torchtitan-llama3.1-8b-128gpu-compile', 'torchtitan-llama3.1-8b-8gpu-compile', '128 GPUs / 8 GPUs, compiled')]:
    if a in pred and b in pred:
        pr, pp = pub[a] / pub[b], pred[a] / pred[b]
        print('| %s | %.3f | %.3f | %+.1f%% |' % (what, pr, pp, 100 * (pp - pr) / pr))
if mem_errs:
    mem_errs.sort()
    n = len(mem_errs)
    med = mem_errs[n // 2] if n % 2 else 0.5 * (mem_errs[n // 2 - 1] + mem_errs[n // 2])
    print('\nRows: %d. Memory |error| against the reserved peak: median %.1f%%, worst %.1f%%. Predicted to fit, as '
          'every one of them did: %s.' % (n, 100 * med, 100 * mem_errs[-1],
                                          'all' if not not_fitting else 'NOT ' + ', '.join(not_fitting)))
