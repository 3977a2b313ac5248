# Shared by fold_compare.py, extrapolation_compare.py and speed_survey.py: the random plans they
# draw (the same sequence of draws, so a seed gives the plans it always gave), the paired runs and
# the report comparison.
import json, subprocess


def split_gpus(rng, gpus, tps, pps):
    """TP from `tps`, PP from `pps` (those dividing what is left), CP 1 or 2, DP the rest."""
    tp = rng.choice(tps)
    rest = gpus // tp
    pp = rng.choice([p for p in pps if rest % p == 0])
    rest //= pp
    cp = rng.choice([c for c in [1, 1, 2] if rest % c == 0])
    return tp, pp, cp, rest // cp


def random_plan(rng, micro_batches):
    """A plan of 4-32 GPUs on a graph, and 0-2 random link faults on it.

    Returns (scenario without faults, link faults, GPU count, fabric); the scenario's global
    batch is m * dp for m drawn from `micro_batches`."""
    gpn = rng.choice([2, 4, 8])
    nodes = rng.choice([2, 4])
    G = gpn * nodes
    tp, pp, cp, dp = split_gpus(rng, G, [t for t in [1, 2, 4] if gpn % t == 0], [1, 2, 4])
    par = {'tp': tp, 'pp': pp, 'dp': dp}
    if cp > 1: par['cp'] = cp
    if tp > 1: par['sequence_parallel'] = rng.random() < 0.5
    moe = rng.random() < 0.2 and dp >= 2
    if moe: par['ep'] = rng.choice([e for e in [2, 4] if dp % e == 0 and 4 % e == 0] or [1])
    m = rng.choice(micro_batches)
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
        elif z == 'hybrid' and pp == 1: par['fsdp'] = 'hybrid_shard'  # (with CP since session 17)
        if rng.random() < 0.3: par['overlap_grad_reduce'] = False
    layers = 4 * pp * (2 if par.get('pp_schedule') == 'interleaved' else 1) // (1 if pp < 4 else 2)
    model = {'arch': 'llama', 'layers': max(layers, 2 * pp), 'hidden': 1024, 'heads': 8, 'kv_heads': 8, 'ffn': 4096, 'vocab': 1024, 'tied_embeddings': False}
    if moe: model.update({'experts': 4, 'top_k': 2})
    nics = rng.choice([n_ for n_ in [1, 2, gpn] if gpn % n_ == 0])
    fabric = rng.choice(['single-switch', 'single-switch', 'fat-tree', 'rail-optimized'])
    topo = {'nodes': nodes, 'gpus_per_node': gpn, 'node': 'nvswitch', 'nics_per_node': nics, 'network': 'infiniband-ndr', 'fabric': fabric, 'levels': 1 if fabric == 'single-switch' else 2}
    if fabric == 'fat-tree': topo['switch_radix'] = rng.choice([4, 8])
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
    # The GPU is drawn after the faults (the order the scripts always drew in).
    sc = {'model': model, 'cluster': {'topology': topo},
          'training': {'seq_len': 1024, 'micro_batch': 1, 'global_batch': m * dp, 'precision': 'bf16-mixed'},
          'parallelism': par}
    return sc, links, G, fabric


def run_pair(binary, path, sets_a, sets_b):
    """The scenario run twice with different --set overrides: the two reports, or None when a run
    failed (printing RC MISMATCH when only one did)."""
    runs = [subprocess.run([binary, 'run', path, '--format', 'json'] + [x for s in sets for x in ('--set', s)],
                           capture_output=True, text=True) for sets in (sets_a, sets_b)]
    if runs[0].returncode != 0 or runs[1].returncode != 0:
        if runs[0].returncode != runs[1].returncode:
            print('RC MISMATCH', path, runs[0].stderr[:300], runs[1].stderr[:300], flush=True)
        return None
    return json.loads(runs[0].stdout), json.loads(runs[1].stdout)


# What an extended run and a full one may differ in: how they were simulated, not what they found.
EXTENSION_SKIP = ('events', 'event_fingerprint', 'simulated_ranks', 'waited_for_gpu', 'simulated_micro_batches',
                  'extended_from_micro_batches', 'kernels')


def compare(x, y, path, out, skip, margin):
    """Appends to `out` each difference between two reports beyond 1e-9 relative (+ margin)."""
    if isinstance(x, dict):
        for k in set(x) | set(y):
            if k in skip: continue
            if k not in x or k not in y: out.append(('missing', path + '/' + k)); continue
            compare(x[k], y[k], path + '/' + k, out, skip, margin)
    elif isinstance(x, list):
        if len(x) != len(y): out.append(('len', path)); return
        for i, (p, q) in enumerate(zip(x, y)): compare(p, q, path + '/%d' % i, out, skip, margin)
    elif x != y:
        if isinstance(x, (int, float)) and isinstance(y, (int, float)) and abs(x - y) <= 1e-9 * max(abs(x), abs(y)) + margin: return
        out.append((path, x, y))
