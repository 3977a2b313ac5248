#!/usr/bin/env python3
# How long `scaleout run` takes on random 64-GPU plans: the speed target "any scenario of up to
# 64 GPUs under 50 ms" (issue 8) measured over a population instead of a few hand-picked plans.
#
#   python3 tools/check/speed_survey.py BUILD/scaleout SEED COUNT [LIMIT_S]
#
# Plans: 8 nodes of 8 H100 (the shipped llama3-8b-8xh100 scenario, widened), Llama-3-8B,
# Llama-3-70B or Mixtral-8x7B; TP 1-8, PP 1-8 (1F1B, interleaved with 2 chunks, GPipe), CP 1-2,
# DP the rest, EP for Mixtral; no ZeRO, ZeRO-1 or FSDP; 8, 32 or 128 micro-batches; sequence
# 4096 or 8192; analytic or flow network; healthy, one GPU 20 % slow, or one NIC at a quarter of
# its bandwidth (flow network on a single-switch or rail-optimized graph). Each plan runs twice
# through the CLI (a fresh process each time, as a user runs it) and the faster wall time counts;
# a run past LIMIT_S (default 60) is stopped and counted as over; SURVEY_ONLY=none keeps the healthy
# plans only (the draws unchanged). Prints one line per plan, then
# the share under 50 ms and the median, by network and fault. Scenario files go to /tmp/survey.
import json, os, random, subprocess, sys, time
from plans import split_gpus

BIN = sys.argv[1]
seed = int(sys.argv[2])
count = int(sys.argv[3])
limit = float(sys.argv[4]) if len(sys.argv) > 4 else 60.0
# SURVEY_ONLY=none (or none,nic ...) runs only the plans with those faults; the draws are the same.
only = [f for f in os.environ.get('SURVEY_ONLY', '').split(',') if f]
here = os.path.dirname(os.path.abspath(__file__))
base = json.load(open(os.path.join(here, '..', '..', 'scenarios', 'parallel', 'llama3-8b-8xh100.json')))
rng = random.Random(seed)
os.makedirs('/tmp/survey', exist_ok=True)
rows = []
for n in range(count):
    sc = json.loads(json.dumps(base))
    sc['cluster']['nodes'] = 8
    model = rng.choice(['llama-3-8b', 'llama-3-8b', 'llama-3-70b', 'mixtral-8x7b'])
    sc['model'] = model
    tp, pp, cp, dp = split_gpus(rng, 64, [1, 2, 4, 8], [1, 2, 4, 8])
    par = {'tp': tp, 'pp': pp, 'dp': dp}
    if cp > 1: par['cp'] = cp
    if tp > 1: par['sequence_parallel'] = True
    if model == 'mixtral-8x7b' and dp >= 2: par['ep'] = rng.choice([e for e in [2, 4, 8] if dp % e == 0])
    sched = '-'
    if pp > 1:
        sched = rng.choice(['1f1b', 'interleaved', 'gpipe'])
        if sched != '1f1b': par['pp_schedule'] = sched
        if sched == 'interleaved': par['virtual_stages'] = 2
    z = rng.choice(['none', 'zero1', 'fsdp'])
    if dp > 1 and z == 'zero1': par['zero'] = 1
    if dp > 1 and z == 'fsdp' and pp == 1: par['fsdp'] = 'full_shard'
    sc['parallelism'] = par
    m = rng.choice([8, 32, 128])
    sc['training']['global_batch'] = m * dp
    sc['training']['seq_len'] = rng.choice([4096, 8192])
    net = rng.choice(['analytic', 'flow'])
    fault = rng.choice(['none', 'none', 'straggler', 'nic'])
    if fault == 'straggler':
        sc['faults'] = {'stragglers': [{'gpu': rng.randrange(64), 'slowdown': 1.2}]}
    if fault == 'nic':
        fabric = rng.choice(['single-switch', 'rail-optimized'])
        sc['cluster']['topology'] = {'nodes': 8, 'gpus_per_node': 8, 'node': 'nvswitch', 'nics_per_node': 8,
                                     'network': 'infiniband-ndr', 'fabric': fabric,
                                     'levels': 1 if fabric == 'single-switch' else 2}
        del sc['cluster']['nodes'], sc['cluster']['gpus_per_node']
        sc['faults'] = {'links': [{'nic': [rng.randrange(8), rng.randrange(8)], 'bandwidth_factor': 0.25}]}
        net = 'flow'
    if only and fault not in only: continue
    path = '/tmp/survey/s%d_%d.json' % (seed, n)
    json.dump(sc, open(path, 'w'))
    best, out, err = None, None, ''
    for _ in range(2):
        t0 = time.time()
        try:
            p = subprocess.run([BIN, 'run', path, '--format', 'json', '--set', 'simulation.network=' + net],
                               capture_output=True, text=True, timeout=limit)
        except subprocess.TimeoutExpired:
            best = None
            break
        dt = time.time() - t0
        if p.returncode != 0:
            err = p.stderr.strip().replace('\n', ' ')[:160]
            break
        best = dt if best is None else min(best, dt)
        out = p.stdout
    desc = '%s tp%d pp%d cp%d dp%d ep%d %s m%d %s %s' % (model, tp, pp, cp, dp, par.get('ep', 1), sched, m, net, fault)
    if err:
        print('refused  %s: %s' % (desc, err), flush=True)
        continue
    if best is None:
        print('>%.0f s   %s  %s' % (limit, desc, path), flush=True)
        rows.append((limit, net, fault))
        continue
    d = json.loads(out)
    print('%.3f s  ranks %s events %s  %s  %s' % (best, d.get('simulated_ranks', pp), d.get('events'), desc, path), flush=True)
    rows.append((best, net, fault))


def summary(name, ts):
    if not ts: return
    ts = sorted(ts)
    under = sum(1 for t in ts if t < 0.05)
    print('%-22s %3d plans: %3d under 50 ms (%.0f %%), median %.3f s, worst %s' %
          (name, len(ts), under, 100.0 * under / len(ts), ts[len(ts) // 2],
           ('>%.0f s' % limit) if ts[-1] >= limit else '%.2f s' % ts[-1]))


print('SUMMARY seed %d' % seed)
summary('all', [r[0] for r in rows])
for net in ('analytic', 'flow'):
    for fault in ('none', 'straggler', 'nic'):
        summary('%s, %s' % (net, fault), [r[0] for r in rows if r[1] == net and r[2] == fault])
