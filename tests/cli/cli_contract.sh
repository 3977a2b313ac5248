#!/usr/bin/env bash
# The command line's contract: exit 0 for a finished simulation (also when it does not fit), 2 with
# one line naming the file and JSON path for bad input, valid JSON with the contract's keys.
set -u
bin=$1
src=$2
source "$(dirname "$0")/lib/expect.sh"
scenario=$src/scenarios/llama2-7b-finetune-h100.json
expect 0 "verdict" -- "$bin" run "$scenario"
expect 0 '"fits"' -- "$bin" run "$scenario" --format json
expect 0 "llama-2-7b" -- "$bin" list models
expect 0 "h200" -- "$bin" list gpus
expect 2 "no-such.json: cannot open file" -- "$bin" run "$tmp/no-such.json"
echo '{"model": "llama-2-7b",' >"$tmp/broken.json"
expect 2 "broken.json: invalid JSON" -- "$bin" run "$tmp/broken.json"
expect 2 "/training/micro_batchx: unknown key" -- "$bin" run "$scenario" --set training.micro_batchx=2
expect 2 "/training/seq_len: expected an integer" -- "$bin" run "$scenario" --set training.seq_len='"long"'
expect 2 "/cluster/gpu: unknown GPU" -- "$bin" run "$scenario" --set cluster.gpu=h900
expect 2 "" -- "$bin" run "$scenario" --format xml
expect 2 "" -- "$bin" frobnicate
# Not fitting is a result, not an error.
expect 0 '"fits": false' -- "$bin" run "$scenario" --format json --set training.micro_batch=64 --set training.global_batch=64
# The JSON has the contract's keys.
"$bin" run "$scenario" --format json >"$tmp/r.json" || fail=1
python3 - "$tmp/r.json" <<'PY' || fail=1
import json, sys
r = json.load(open(sys.argv[1]))
for k in ["fits", "gpus", "step_time_s", "tokens_per_s", "model_flops_per_step", "model_tflops_per_gpu", "mfu", "memory", "time_breakdown_s"]:
    assert k in r, k
for k in ["peak_bytes", "capacity_bytes", "breakdown_bytes"]:
    assert k in r["memory"], k
for k in ["params", "grads", "optimizer", "activations", "other"]:
    assert k in r["memory"]["breakdown_bytes"], k
for k in ["compute", "exposed_comm", "pipeline_bubble", "optimizer"]:
    assert k in r["time_breakdown_s"], k
PY
# The trace is valid Chrome-trace JSON with kernels on two tracks.
"$bin" run "$scenario" --trace "$tmp/t.json" >/dev/null || fail=1
python3 - "$tmp/t.json" <<'PY' || fail=1
import json, sys
t = json.load(open(sys.argv[1]))["traceEvents"]
spans = [e for e in t if e["ph"] == "X"]
assert len(spans) > 100 and {e["tid"] for e in spans} == {0, 1}
assert any(e["ph"] == "C" for e in t)
PY
# A million GPUs: simulated folded (in well under a second), refused unfolded or on the flow network.
cat >"$tmp/million.json" <<'JSON'
{"model": "gpt2", "cluster": {"gpu": "h100-sxm", "nodes": 131072, "gpus_per_node": 8},
 "training": {"seq_len": 1024, "micro_batch": 1, "global_batch": 1048576, "precision": "bf16-mixed"},
 "parallelism": {"dp": 1048576}}
JSON
expect 0 "^verdict +FITS" -- timeout 20 "$bin" run "$tmp/million.json"
expect 2 "/simulation/fold: .*at most 65536 unfolded" -- timeout 20 "$bin" run "$tmp/million.json" --set simulation.fold=off
expect 2 "flow-level network simulates at most 65536 GPUs" -- timeout 20 "$bin" run "$tmp/million.json" --set simulation.network=flow
# Determinism on the flow network, unfolded, with faults: byte-identical JSON and trace.
cat >"$tmp/faulty.json" <<'JSON'
{"model": {"arch": "llama", "layers": 2, "hidden": 256, "heads": 4, "kv_heads": 4, "ffn": 512, "vocab": 1000, "tied_embeddings": false},
 "cluster": {"gpu": "a100-80g", "topology": {"nodes": 2, "gpus_per_node": 2, "nics_per_node": 2, "fabric": "single-switch", "levels": 1}},
 "training": {"seq_len": 256, "micro_batch": 1, "global_batch": 4, "precision": "bf16-mixed"},
 "parallelism": {"dp": 2, "tp": 2},
 "faults": {"stragglers": [{"gpu": 3, "slowdown": 1.5}], "links": [{"nic": [1, 1], "bandwidth_factor": 0.5}]}}
JSON
"$bin" run "$tmp/faulty.json" --set simulation.fold=off --format json --trace "$tmp/f1.trace" >"$tmp/f1.json" 2>&1
"$bin" run "$tmp/faulty.json" --set simulation.fold=off --format json --trace "$tmp/f2.trace" >"$tmp/f2.json" 2>&1
cmp -s "$tmp/f1.json" "$tmp/f2.json" || { echo "FAIL: flow/unfolded JSON differs between runs"; fail=1; }
cmp -s "$tmp/f1.trace" "$tmp/f2.trace" || { echo "FAIL: flow/unfolded trace differs between runs"; fail=1; }
grep -q '"simulated_ranks": 4' "$tmp/f1.json" || { echo "FAIL: faults did not unfold the simulation: $(head -c 300 "$tmp/f1.json")"; fail=1; }
exit $fail
