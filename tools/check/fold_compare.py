#!/usr/bin/env python3
# Random plans simulated folded (one GPU per class) and unfolded (every GPU): prints each plan whose
# reports differ beyond 1e-9 relative (events, fingerprints and the simulated count aside), and a
# summary. Session 7 wrote it for the classes of stragglers and link faults; session 9 ran it on
# the flow network's run-time check of the classes (seed 41: 5,095 plans, none different).
#
#   python3 tools/check/fold_compare.py BUILD/scaleout SEED SECONDS [PATH=VALUE ...]
#
# Plans: 4-32 GPUs of 2-8 per node on a graph (one switch, fat tree or rails; 1, 2 or one NIC per
# GPU), TP/PP/CP/DP/EP, 1F1B, GPipe or interleaved with async or blocking transfers, ZeRO 1-3,
# FSDP, HSDP, 2-8 micro-batches, one or two link faults (slow or failed NICs, slow NVLinks or
# fabric links: the flow network) and/or a straggler. Scenario files are written to /tmp/cc.
import json, random, sys, time, os
from plans import random_plan, run_pair, compare
BIN = sys.argv[1] if len(sys.argv) > 1 else 'build/scaleout'
seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1
budget = float(sys.argv[3]) if len(sys.argv) > 3 else 600
# Further --set overrides for both runs, e.g. simulation.network=analytic (plans with link faults
# then fail both ways and count as invalid).
EXTRA = sys.argv[4:]
rng = random.Random(seed)
t0 = time.time()
os.makedirs("/tmp/cc", exist_ok=True)
stats = {'same': 0, 'diff': 0, 'invalid': 0, 'unfolded_same_ranks': 0}
n = 0
while time.time() - t0 < budget:
    n += 1
    sc, links, G, fabric = random_plan(rng, [2, 4, 8])
    faults = {}
    if links: faults['links'] = links
    if rng.random() < 0.4 or not links:
        faults['stragglers'] = [{'gpu': rng.randrange(G), 'slowdown': rng.choice([1.1, 1.3])}]
    sc['cluster']['gpu'] = rng.choice(['h100-sxm', 'a100-80g'])
    sc['faults'] = faults
    par = sc['parallelism']
    f = '/tmp/cc/s%d_%d.json' % (seed, n)
    json.dump(sc, open(f, 'w'))
    pair = run_pair(BIN, f, ['simulation.fold=on'] + EXTRA, ['simulation.fold=off'] + EXTRA)
    if pair is None:
        stats['invalid'] += 1
        continue
    a, b = pair
    out = []
    compare(a, b, '', out, ('events', 'event_fingerprint', 'simulated_ranks', 'waited_for_gpu'), 1e-15)
    ranks = a.get('simulated_ranks', par.get('pp', 1))
    if out:
        stats['diff'] += 1
        print('DIFF', f, 'ranks', ranks, 'of', G, fabric, 'n', len(out), out[:4], flush=True)
    else:
        stats['same'] += 1
    if ranks == G: stats['unfolded_same_ranks'] += 1
print('SUMMARY seed', seed, n, stats, flush=True)
