#!/usr/bin/env bash
# Sweep throughput: 10,000 small scenarios (GPT-3 125M cut to 2..12 layers; micro-batch x seq x
# precision x GPU x recompute x layers) through `scaleout sweep --jobs JOBS`; prints points/s.
# The target (issue 7): the whole sweep in under a minute on 2 cores.
#   tools/bench/sweep_bench.sh [BIN (default build/scaleout)] [JOBS (default 2)] [csv|jsonl]
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$src/build/scaleout}
jobs=${2:-2}
fmt=${3:-csv}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/bench.json" <<JSON
{
  "name": "sweep-bench",
  "description": "10,000 small GPT scenarios for the sweep throughput benchmark",
  "base": {
    "model": {"base": "gpt3-125m"},
    "cluster": {"gpu": "h100-sxm"},
    "training": {"seq_len": 1024, "precision": "bf16-mixed", "optimizer": "adamw", "attention": "flash"}
  },
  "grid": {
    "training.micro_batch": [1, 2, 3, 4, 5, 6, 7, 8],
    "training.seq_len": [128, 256, 512, 1024, 2048],
    "training.precision": ["bf16-mixed", "fp16-mixed", "bf16", "megatron-bf16", "fp8-mixed"],
    "cluster.gpu": ["a100-40g", "a100-80g", "h100-sxm", "h200", "b200"],
    "training.recompute": ["none", "full"],
    "model.layers": [2, 4, 6, 8, 12]
  }
}
JSON
out=$tmp/results.$fmt
start=$(date +%s.%N)
"$bin" sweep "$tmp/bench.json" --out "$out" --jobs "$jobs" --quiet
end=$(date +%s.%N)
rows=$(grep -c '' "$out")
[ "$fmt" = csv ] && rows=$((rows - 1))
python3 - "$start" "$end" "$rows" "$jobs" "$fmt" <<'PY'
import sys
start, end, rows, jobs, fmt = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
s = end - start
print(f"sweep_bench: {rows} points ({fmt}) with --jobs {jobs} in {s:.2f} s: {rows / s:.0f} points/s")
sys.exit(0 if rows == 10000 else 1)
PY
