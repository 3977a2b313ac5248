#!/usr/bin/env python3
# Random plans with session 19's options (MLA, shared experts, dense first layers, DeepEP and
# the fake balanced gate, grouped expert GEMMs, FP8 recipes, fused kernels, Megatron's recompute
# modules, pipeline_runs) on top of plans.py's draws (a second generator, so plans.py's seeds
# keep their plans): folded against unfolded (mode fold: with a straggler and/or link faults) or
# extended against exact (mode ext). Prints each plan whose reports differ, and a summary.
#
#   python3 tools/check/new_options_compare.py BUILD/scaleout SEED SECONDS fold|ext [s20] [faults] [pipes]
#
# With s20, session 20's options too (a third generator): torch's op-level selective
# checkpointing, fsdp-bf16 with upcast logits, a plain squared-ReLU MLP, ZeRO-1/2's parameter
# gathers overlapped with the next forward.
#
# With faults (mode ext), a slow GPU (1.1-1.3x) and/or the plan's link faults (flow network) as in
# mode fold, from a fourth generator: the extension's second look (step.cpp's later_windows) and
# its checks against stragglers, which the other draws of mode ext never have.
#
# Session 19: seed 5 fold, 6 min: 5,351 valid plans, none different; seed 6 ext: 8,408, none.
# Session 20 (s20): seed 7 fold, 5 min: 8,581 valid plans, none different; seed 8 ext: 12,393
# valid plans, one different: s8_2664 (TP 4 x PP 2 x CP 2, flow), comm_total_s/pp_p2p 2.8e-8
# relative apart, the same without the s20 options (the extension's rounding of that sum).
# With overlap_param_gather in s20: seed 9 fold 8,111 valid plans, none different; seed 10 ext
# 10,278, one 3e-9 apart (a 1-ns rounding of the extension); after the end-of-step DP attribution:
# seed 11 fold 4,927 and seed 13 fold (without s20) 4,034, none different; seed 12 ext 7,512, none.
# Session 27 (ext faults pipes: pipelined plans with a slow GPU or loader only): seed 107, 7 min:
# 9,061 valid plans, 3,250 extended, none different (seed 105 had found one, fixed before); seed
# 108 on the session's last build: 8,830 valid, 3,050 extended, none different.
# Session 28 (ext faults, on the session's last build, 5 min): seed 282, 6,506 plans, 5,248 valid,
# one different: s282_3820 (Mixtral-like MoE TP 4 x DP 8, EP 4, ZeRO-1 without overlapped grad
# reduction, one GPU 10 % slow, analytic, 96 micro-batches, extended from the looks 2-4 and 8-10):
# the step exact, rank 0's peer_wait_s 0.0261 s extended against 0.0208 s simulated in full,
# max_peer_wait_s 1 % high; the same with session 27's build (pre-existing, not fixed). The two
# EP groups keep their own paces until the data-parallel reduction; while the healthy group's lead
# is short several of its buckets wait on the slow group, and once it is long only the first does
# (the later ones queue behind it on the data-parallel stream), so the waits grow faster in the
# looks than over the step. The same seed, fold faults: seed 281, 7,884 valid, none different.
# Session 29: step.cpp's same_bindings (the windows' arrivals at every rendezvous must keep what
# bound them when extended to m) simulates s282_3820 in full, now exact; ext faults seed 291,
# 6 min: 6,312 plans, 5,135 valid, none different. Then pipelines whose replicas keep their own
# paces (analytic network) were extended too: ext faults pipes seed 292 found four plans whose
# max_peer_wait_s came out 1-1.5 % short (the longest wait changed; now checked), seed 293 one
# host-bound MoE pipeline whose idle split between host and bubble was 39 % and 87 % off (a
# kernel's launch stopped binding; every compute kernel's start now checked). On the builds
# after each fix: pipes seed 294 (7 min) 7,422 valid, none different; pipes seed 296 (5 min)
# 5,517 valid, 1,184 analytic and 1,186 flow extended, none different; ext faults seed 295
# 5,363 valid and seed 297 (the session's last build) 3,862 valid, none different.
# Session 30 (ext pipes calm: the pipelined plans without a slow GPU, for the extension of a
# healthy pipeline from two of its windows): seed 300 found six flow plans with a slow link
# extended 1-6 % off in data-parallel time and longest wait (passes settled, the step's end not;
# now checked); seed 301, 10 min, on the committed build: 16,040 valid, 4,042 extended (1,686
# analytic, 2,356 flow), two 4e-9 and 2e-9 apart in max_peer_wait_s (picoseconds; the same in the
# build before).
# Session 31 (ext faults, after a slow GPU's step without a pipeline on the analytic network was
# extended from a settled pair): seed 310, 7 min: 9,687 plans, 7,801 valid, none of the analytic
# ones different (1,786 of them extended that way); two flow plans (s310_6005, s310_8742, extended
# from 2-4 micro-batches) 0.3-0.75 % off in the exposed time's CP/DP split, the same on the build
# before. On the session's last build (cd4e436): ext faults seed 311, 5 min, 5,845 plans, 4,631
# valid, none different; ext seed 312, 3 min, 8,190 valid, none different.
import json, os, random, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plans import random_plan, run_pair, compare, EXTENSION_SKIP
BIN, seed, budget, mode = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
rng = random.Random(seed); r2 = random.Random(seed + 1000); r3 = random.Random(seed + 2000)
s20 = 's20' in sys.argv[5:]
with_faults = 'faults' in sys.argv[5:]
r4 = random.Random(seed + 3000)
# pipes (mode ext): only pipelined plans with a slow GPU (1.05-1.3x, or a loader delay) are run,
# the draws otherwise unchanged: the settled-pipeline extension's check (step.cpp, settled_in).
pipes = 'pipes' in sys.argv[5:]
r5 = random.Random(seed + 4000)
# calm (with pipes): the same pipelined plans without a slow GPU: healthy, or (half of those with
# link faults drawn) a slow link: the windows that a and c alone may extend (step.cpp).
calm = 'calm' in sys.argv[5:]
t0 = time.time(); n = 0; stats = {}
os.makedirs('/tmp/nc', exist_ok=True)
while time.time() - t0 < budget:
    n += 1
    sc, links, G, fabric = random_plan(rng, [2, 4, 8] if mode == 'fold' else [48, 64, 96])
    m = sc['model']; t = sc['training']; p = sc['parallelism']
    if r2.random() < 0.5:
        m.update({'kv_lora_rank': 128, 'qk_rope_dim': 32, 'head_dim': 64, 'v_head_dim': 64, 'q_lora_rank': r2.choice([0, 256])})
    if m.get('experts', 1) > 1:
        if r2.random() < 0.5: m.update({'moe_ffn': 1024, 'shared_experts': 1})
        if r2.random() < 0.3 and m['layers'] > 2: m['dense_layers'] = 1
        t['moe_dispatcher'] = r2.choice(['alltoall', 'deepep']); t['moe_router'] = r2.choice(['learned', 'fake_balanced'])
        t['moe_grouped_gemm'] = r2.random() < 0.5
    t['precision'] = r2.choice(['bf16-mixed', 'bf16', 'nemo-fp8', 'megatron-bf16'])
    if r2.random() < 0.3: t['kernels'] = 'fused'
    if r2.random() < 0.5:
        t['recompute'] = 'selective'
        t['recompute_modules'] = r2.sample(['core_attn', 'layernorm', 'mla_up_proj', 'moe_act', 'mlp', 'moe', 'shared_experts'], r2.randint(1, 4))
    mbs = t['global_batch'] // (t['micro_batch'] * p['dp'])
    if p['pp'] > 1 and p.get('pipeline_p2p') != 'blocking' and r2.random() < 0.3:
        for k in (2, 4):
            per = mbs // k
            if mbs % k == 0 and (p.get('pp_schedule') != 'interleaved' or per % p['pp'] == 0): p['pipeline_runs'] = k; break
    if s20:
        if r3.random() < 0.3:
            t['recompute'] = 'op'; t.pop('recompute_modules', None)
        if p.get('fsdp') in ('full_shard', 'shard_grad_op', 'hybrid_shard') and r3.random() < 0.5:
            t['precision'] = 'fsdp-bf16'
        if r3.random() < 0.3: t['upcast_logits'] = True
        if p.get('zero', 0) in (1, 2) and r3.random() < 0.6: p['overlap_param_gather'] = True
        if m.get('experts', 1) <= 1 and not m.get('kv_lora_rank') and r3.random() < 0.3: m['activation'] = 'squared_relu'
    faults = {}
    if mode == 'fold':
        if links: faults['links'] = links
        if r2.random() < 0.5 or not links: faults['stragglers'] = [{'gpu': r2.randrange(G), 'slowdown': r2.choice([1.1, 1.3])}]
    elif with_faults:
        if links and r4.random() < 0.5: faults['links'] = links
        if r4.random() < 0.7 or 'links' not in faults: faults['stragglers'] = [{'gpu': r4.randrange(G), 'slowdown': r4.choice([1.1, 1.2, 1.3])}]
    if pipes and calm:
        faults = {'links': links} if links and r5.random() < 0.5 else {}
    elif pipes:
        st = {'gpu': r5.randrange(G)}
        if r5.random() < 0.8: st['slowdown'] = r5.choice([1.05, 1.1, 1.2, 1.3])
        else: st['loader_delay'] = r5.choice(['1 ms', '5 ms', '20 ms'])
        faults['stragglers'] = [st]
    sc['faults'] = faults
    sc['cluster']['gpu'] = r2.choice(['h100-sxm', 'a100-80g'])
    if pipes and (p['pp'] == 1 or p.get('pp_schedule') == 'gpipe' or p.get('pipeline_runs', 1) > 1 or
                  p.get('zero', 0) >= 2 or p.get('fsdp')):
        stats['skipped'] = stats.get('skipped', 0) + 1
        continue
    f = '/tmp/nc/s%d_%d.json' % (seed, n); json.dump(sc, open(f, 'w'))
    net = r2.choice(['analytic', 'flow'])
    if mode == 'fold':
        a, b = ['simulation.fold=on', 'simulation.network=' + net], ['simulation.fold=off', 'simulation.network=' + net]
    else:
        a, b = ['simulation.extrapolate=on', 'simulation.network=' + net], ['simulation.extrapolate=off', 'simulation.network=' + net]
    pair = run_pair(BIN, f, a, b)
    if pair is None: stats['invalid'] = stats.get('invalid', 0) + 1; continue
    out = []
    compare(pair[0], pair[1], '', out, EXTENSION_SKIP, 1e-12)
    k = ('diff' if out else 'same') + '_' + net
    stats[k] = stats.get(k, 0) + 1
    if pipes and pair[0].get('simulated_micro_batches', mbs) < mbs: stats['extended_' + net] = stats.get('extended_' + net, 0) + 1
    if out: print('DIFF', net, f, len(out), out[:3], flush=True)
print('SUMMARY', mode, n, stats, flush=True)
