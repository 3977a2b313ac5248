#!/usr/bin/env python3
# Random plans simulated folded (one GPU per class) and unfolded (every GPU): prints each plan whose
# reports differ beyond 1e-9 relative (events, fingerprints and the simulated count aside), and a
# summary. Session 7 wrote it for the classes of stragglers and link faults; session 9 ran it on
# the flow network's run-time check of the classes (seed 41: 5,095 plans, none different).
#
#   python3 tools/check/fold_compare.py BUILD/scaleout SEED SECONDS
#
# Plans: 4-32 GPUs of 2-8 per node on a graph (one switch, fat tree or rails; 1, 2 or one NIC per
# GPU), TP/PP/CP/DP/EP, 1F1B, GPipe or interleaved with async or blocking transfers, ZeRO 1-3,
# FSDP, HSDP, 2-8 micro-batches, one or two link faults (slow or failed NICs, slow NVLinks or
# fabric links: the flow network) and/or a straggler. Scenario files are written to /tmp/cc.
import json, random, subprocess, sys, time, os
BIN = sys.argv[1] if len(sys.argv) > 1 else 'build/scaleout'
seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1
budget = float(sys.argv[3]) if len(sys.argv) > 3 else 600
rng = random.Random(seed)
t0 = time.time()
os.makedirs("/tmp/cc", exist_ok=True)
stats = {'same': 0, 'diff': 0, 'invalid': 0, 'unfolded_same_ranks': 0}
def walk(x, y, path, out):
    if isinstance(x, dict):
        for k in set(x) | set(y):
            if k in ('events', 'event_fingerprint', 'simulated_ranks', 'waited_for_gpu'): continue
            if k not in x or k not in y: out.append(('missing', path + '/' + k)); continue
            walk(x[k], y[k], path + '/' + k, out)
    elif isinstance(x, list):
        if len(x) != len(y): out.append(('len', path)); return
        for i, (p, q) in enumerate(zip(x, y)): walk(p, q, path + '/%d' % i, out)
    elif x != y:
        if isinstance(x, (int, float)) and isinstance(y, (int, float)) and abs(x - y) <= 1e-9 * max(abs(x), abs(y)) + 1e-15: return
        out.append((path, x, y))
n = 0
while time.time() - t0 < budget:
    n += 1
    gpn = rng.choice([2, 4, 8])
    nodes = rng.choice([2, 4])
    G = gpn * nodes
    # plan: tp | gpn, pp, cp, dp fill
    tp = rng.choice([t for t in [1, 2, 4] if gpn % t == 0])
    rest = G // tp
    pp = rng.choice([p for p in [1, 2, 4] if rest % p == 0])
    rest //= pp
    cp = rng.choice([c for c in [1, 1, 2] if rest % c == 0])
    rest //= cp
    dp = rest
    par = {'tp': tp, 'pp': pp, 'dp': dp}
    if cp > 1: par['cp'] = cp
    if tp > 1: par['sequence_parallel'] = rng.random() < 0.5
    moe = rng.random() < 0.2 and dp >= 2
    if moe: par['ep'] = rng.choice([e for e in [2, 4] if dp % e == 0 and 4 % e == 0] or [1])
    m = rng.choice([2, 4, 8])
    if pp > 1:
        sch = rng.choice(['1f1b', 'gpipe', 'interleaved'])
        if sch == 'interleaved':
            par['pp_schedule'] = 'interleaved'; par['virtual_stages'] = 2
        elif sch == 'gpipe':
            par['pp_schedule'] = 'gpipe'
        if rng.random() < 0.3: par['pipeline_p2p'] = 'blocking'
    if dp > 1:
        z = rng.choice(['none', 'zero1', 'zero2', 'zero3', 'fsdp', 'hybrid'])
        if z.startswith('zero'): par['zero'] = int(z[-1])
        elif z == 'fsdp': par['fsdp'] = 'full_shard'
        elif z == 'hybrid' and cp == 1 and pp == 1: par['fsdp'] = 'hybrid_shard'
        if rng.random() < 0.3: par['overlap_grad_reduce'] = False
    layers = 4 * pp * (2 if par.get('pp_schedule') == 'interleaved' else 1) // (1 if pp < 4 else 2)
    model = {'arch': 'llama', 'layers': max(layers, 2 * pp), 'hidden': 1024, 'heads': 8, 'kv_heads': 8, 'ffn': 4096, 'vocab': 1024, 'tied_embeddings': False}
    if moe: model.update({'experts': 4, 'top_k': 2})
    nics = rng.choice([n_ for n_ in [1, 2, gpn] if gpn % n_ == 0])
    fabric = rng.choice(['single-switch', 'single-switch', 'fat-tree', 'rail-optimized'])
    topo = {'nodes': nodes, 'gpus_per_node': gpn, 'node': 'nvswitch', 'nics_per_node': nics, 'network': 'infiniband-ndr', 'fabric': fabric, 'levels': 1 if fabric == 'single-switch' else 2}
    if fabric == 'fat-tree': topo['switch_radix'] = rng.choice([4, 8])
    faults = {}
    links = []
    for _ in range(rng.choice([0, 1, 1, 2])):
        k = rng.choice(['nic', 'nic', 'nvlink', 'fabric'] if fabric != 'single-switch' else ['nic', 'nic', 'nvlink'])
        lf = {}
        if k == 'nic': lf['nic'] = [rng.randrange(nodes), rng.randrange(nics)]
        elif k == 'nvlink': lf['nvlink'] = [rng.randrange(nodes), rng.randrange(gpn)]
        else: lf['fabric'] = rng.randrange(4)
        if k == 'nic' and nics > 1 and rng.random() < 0.3: lf['failed'] = True
        else: lf['bandwidth_factor'] = rng.choice([0.1, 0.25, 0.5])
        links.append(lf)
    if links: faults['links'] = links
    if rng.random() < 0.4 or not links:
        faults['stragglers'] = [{'gpu': rng.randrange(G), 'slowdown': rng.choice([1.1, 1.3])}]
    sc = {'model': model, 'cluster': {'gpu': rng.choice(['h100-sxm', 'a100-80g']), 'topology': topo},
          'training': {'seq_len': 1024, 'micro_batch': 1, 'global_batch': m * dp, 'precision': 'bf16-mixed'},
          'parallelism': par, 'faults': faults}
    f = '/tmp/cc/s%d_%d.json' % (seed, n)
    json.dump(sc, open(f, 'w'))
    res = {}
    for fold in ('on', 'off'):
        p = subprocess.run([BIN, 'run', f, '--format', 'json', '--set', 'simulation.fold=' + fold], capture_output=True, text=True)
        res[fold] = (p.returncode, p.stdout, p.stderr)
    if res['on'][0] != 0 or res['off'][0] != 0:
        stats['invalid'] += 1
        if res['on'][0] != res['off'][0]: print('RC MISMATCH', f, res['on'][2][:300], res['off'][2][:300], flush=True)
        continue
    a, b = json.loads(res['on'][1]), json.loads(res['off'][1])
    out = []
    walk(a, b, '', out)
    ranks = a.get('simulated_ranks', par.get('pp', 1))
    if out:
        stats['diff'] += 1
        st = [o for o in out if o[0] == '/step_time_s']
        print('DIFF', f, 'ranks', ranks, 'of', G, fabric, 'n', len(out), out[:4], flush=True)
    else:
        stats['same'] += 1
    if ranks == G: stats['unfolded_same_ranks'] += 1
print('SUMMARY seed', seed, n, stats, flush=True)
