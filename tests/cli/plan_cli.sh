#!/usr/bin/env bash
# `scaleout plan`: a ranked table of plans that fit, the one-GPU verdict, and exit 2 on bad input.
set -u
bin=$1
src=$2
source "$(dirname "$0")/lib/expect.sh"
cat >"$tmp/s.json" <<'JSON'
{"model": "gpt2", "cluster": {"gpu": "a100-80g", "nodes": 1, "gpus_per_node": 4},
 "training": {"seq_len": 1024, "micro_batch": 4, "global_batch": 32, "precision": "bf16-mixed"},
 "parallelism": {"dp": 4}}
JSON
expect 0 "plans searched, [0-9]+ simulated" -- "$bin" plan "$tmp/s.json" --top 3
expect 0 "^1 +4 +dp" -- "$bin" plan "$tmp/s.json" --top 1
expect 0 "one GPU +fits" -- "$bin" plan "$tmp/s.json" --tokens 1e9 --price 2
expect 2 "/training/micro_batchx: unknown key" -- "$bin" plan "$tmp/s.json" --set training.micro_batchx=1
expect 2 "--gpus: expected 1 to 65536" -- "$bin" plan "$tmp/s.json" --gpus 100000
expect 2 "--jobs: Value -1 not in range 1 to 4096" -- "$bin" plan "$tmp/s.json" --jobs -1
# Objectives, GPU counts and deadlines.
expect 0 "ranked by cost" -- "$bin" plan "$tmp/s.json" --objective cost --tokens 1e9 --price 2 --top 2
expect 0 "miss the .* deadline" -- "$bin" plan "$tmp/s.json" --tokens 1e10 --deadline "3 h"
expect 0 '"plans": \[' -- "$bin" plan "$tmp/s.json" --format json --top 2
expect 2 "--objective: expected throughput, time or cost" -- "$bin" plan "$tmp/s.json" --objective speed
expect 2 "--objective cost: needs --price" -- "$bin" plan "$tmp/s.json" --objective cost --tokens 1e9
expect 2 "--deadline: needs --tokens" -- "$bin" plan "$tmp/s.json" --deadline "2 h"
expect 2 "--deadline: .*duration" -- "$bin" plan "$tmp/s.json" --tokens 1e9 --deadline "two hours"
expect 2 "--min-gpus: 8 exceeds the budget of 4" -- "$bin" plan "$tmp/s.json" --min-gpus 8
# The cheapest plan is never beaten on cost by a later one, and each plan's cost is GPUs x time x price.
"$bin" plan "$tmp/s.json" --objective cost --tokens 1e9 --price 2 --format json --top 20 >"$tmp/p.json"
python3 - "$tmp/p.json" <<'PY' || fail=1
import json, sys
d = json.load(open(sys.argv[1]))
costs = [p["cost_usd"] for p in d["plans"]]
assert costs == sorted(costs), costs
for p in d["plans"]:
    assert abs(p["cost_usd"] - p["time_to_train_s"] / 3600 * p["gpus"] * 2) < 1e-6 * p["cost_usd"], p
    assert abs(p["time_to_train_s"] * p["tokens_per_s"] - 1e9) < 1e-3 * 1e9, p
assert set(d["gpu_counts"]) == {1, 2, 4}, d["gpu_counts"]
PY
# PyTorch-native recipes are also tried with torch's op-level selective checkpointing; Megatron's not.
"$bin" plan "$tmp/s.json" --format json --top 100000 >"$tmp/all.json"
python3 - "$tmp/all.json" <<'PY' || fail=1
import json, sys
d = json.load(open(sys.argv[1]))
assert any(p["recompute"] == "op" for p in d["plans"]), "no plan with recompute op"
PY
# MoE and long sequences: expert and context parallelism are searched.
cat >"$tmp/moe.json" <<'JSON'
{"model": {"arch": "llama", "layers": 4, "hidden": 1024, "heads": 16, "kv_heads": 4, "ffn": 2048, "vocab": 32000, "tied_embeddings": false,
           "experts": 8, "top_k": 2},
 "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 8},
 "training": {"seq_len": 16384, "micro_batch": 1, "global_batch": 16, "precision": "megatron-bf16"},
 "parallelism": {"dp": 8}}
JSON
"$bin" plan "$tmp/moe.json" --format json --top 400 >"$tmp/moe_plans.json"
python3 - "$tmp/moe_plans.json" <<'PY' || fail=1
import json, sys
d = json.load(open(sys.argv[1]))
assert any(p["ep"] > 1 for p in d["plans"]), "no expert-parallel plan"
assert any(p["cp"] > 1 for p in d["plans"]), "no context-parallel plan"
PY
# Megatron recipes with SP: Transformer Engine's TP overlap is searched both ways, its plans
# labelled and reported, each beside the same plan without it.
"$bin" plan "$tmp/moe.json" --format json --top 100000 >"$tmp/ub_plans.json"
python3 - "$tmp/ub_plans.json" <<'PY' || fail=1
import json, sys
d = json.load(open(sys.argv[1]))
ub = [p for p in d["plans"] if p["tp_comm_overlap"]]
assert ub, "no plan with tp_comm_overlap"
key = lambda p: tuple(p[k] for k in ("dp", "tp", "pp", "cp", "ep", "pp_schedule", "virtual_stages", "zero", "micro_batch", "recompute"))
plain = {key(p) for p in d["plans"] if not p["tp_comm_overlap"]}
for p in ub:
    assert p["sequence_parallel"] and "+overlap" in p["plan"], p
    assert key(p) in plain, p
assert not any(p["tp_comm_overlap"] for p in d["plans"] if p["tp"] == 1)
assert not any(p["recompute"] == "op" for p in d["plans"]), "op-level checkpointing under a Megatron recipe"
PY
# advise: the decision framework, each step with numbers.
expect 0 "1. Does it fit on one a100-80g" -- "$bin" advise "$tmp/s.json" --tokens 1e9 --max-gpus 4
expect 0 "first to meet the deadline" -- "$bin" advise "$tmp/s.json" --tokens 1e10 --deadline "10 h" --price 2 --max-gpus 4
expect 2 "--deadline: .*duration" -- "$bin" advise "$tmp/s.json" --tokens 1e9 --deadline soon
exit $fail
