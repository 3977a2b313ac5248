#!/usr/bin/env python3
"""Published H100 training runs (NVIDIA's DGX Cloud benchmarks with NeMo 24.09, NeMo AutoModel's
MoE benchmark) beside scaleout's
prediction of the same step: one markdown table on stdout.

    python3 validation/h100/compare.py [path/to/scaleout] [--network analytic|flow] > validation/h100/REPORT.md

Each row of published.json names its scenario (scenarios/*.json, the run's model, GPUs, batch and
parallel plan as its recipe set them); nothing in scaleout is fitted to these rows."""
import json
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
args = [a for a in sys.argv[1:] if not a.startswith('--')]
binary = args[0] if args else os.path.join(here, '..', '..', 'build', 'scaleout')
network = 'analytic'
if '--network' in sys.argv:
    network = sys.argv[sys.argv.index('--network') + 1]
    args = [a for a in args if a != network]
    binary = args[0] if args else os.path.join(here, '..', '..', 'build', 'scaleout')

rows = json.load(open(os.path.join(here, 'published.json')))
print('| run | GPUs | dp/tp/pp/cp/v | published step | predicted | error | exposed comm (tp, cp, dp, ep) | bubble | peak memory | fits |')
print('|---|---:|---|---:|---:|---:|---|---:|---:|---|')
errs = []
not_fitting = []
for row in rows:
    p = subprocess.run([binary, 'run', os.path.join(here, row['scenario']), '--format', 'json',
                        '--set', 'simulation.network=' + network], capture_output=True, text=True)
    if p.returncode != 0:
        print('| %s | %d | - | %.2f s | failed: %s | | | | | |' % (row['id'], row['gpus'], row['measured_step_s'],
                                                               p.stderr.strip().splitlines()[-1][:120]))
        continue
    r = json.loads(p.stdout)
    pub, pred = row['measured_step_s'], r['step_time_s']
    err = (pred - pub) / pub
    errs.append(abs(err))
    if not r['fits']:
        not_fitting.append(row['id'])
    ex = r['exposed_comm_s']
    tb = r['time_breakdown_s']
    print('| %s | %d | %d/%d/%d/%d/%d | %.2f s | %.2f s | %+.1f%% | %.2f s (%.2f, %.2f, %.2f, %.2f) | %.2f s | %.1f GB of %.1f | %s |' % (
        row['id'], row['gpus'], row['dp'], row['tp'], row['pp'], row['cp'], row['vp'], pub, pred, 100 * err,
        tb['exposed_comm'], ex.get('tp', 0), ex.get('cp', 0), ex.get('dp', 0), ex.get('ep', 0), tb.get('pipeline_bubble', 0),
        r['memory']['required_bytes'] / 1e9, r['memory']['capacity_bytes'] / 1e9, 'yes' if r['fits'] else 'NO'))
errs.sort()
if errs:
    n = len(errs)
    med = errs[n // 2] if n % 2 else 0.5 * (errs[n // 2 - 1] + errs[n // 2])
    print('\nRows: %d (network: %s). Step time |error|: median %.1f%%, worst %.1f%%. Predicted to fit, as every '
          'one of them did: %s.' % (n, network, 100 * med, 100 * errs[-1],
                                    'all' if not not_fitting else 'NOT ' + ', '.join(not_fitting)))
