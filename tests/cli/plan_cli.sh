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
expect 0 "plans simulated" -- "$bin" plan "$tmp/s.json" --top 3
expect 0 "^1 +dp" -- "$bin" plan "$tmp/s.json" --top 1
expect 0 "one GPU +fits" -- "$bin" plan "$tmp/s.json" --tokens 1e9 --price 2
expect 2 "/training/micro_batchx: unknown key" -- "$bin" plan "$tmp/s.json" --set training.micro_batchx=1
expect 2 "--gpus: expected 1 to 65536" -- "$bin" plan "$tmp/s.json" --gpus 100000
exit $fail
