#!/usr/bin/env bash
# `scaleout sweep`: exit codes, strict sweep files, error rows for invalid points, the same rows
# whatever --jobs (sorted by index), shards that add up to the whole, quiet in pipes, and the shipped
# example sweeps.
set -u
bin=$1
src=$2
source "$(dirname "$0")/lib/expect.sh"
sorted() { { head -n 1 "$1"; tail -n +2 "$1" | sort -t, -k1,1n; }; }
sorted_jsonl() { sort -t: -k2,2n "$1"; }

cat >"$tmp/s.json" <<'JSON'
{
  "name": "cli-test",
  "base": {"model": {"base": "gpt3-125m"}, "cluster": {"gpu": "h100-sxm"}, "training": {"seq_len": 256}},
  "grid": {"training.micro_batch": [1, 2, 3], "cluster.gpu": ["a100-80g", "h200"]},
  "zip": {"training.precision": ["bf16-mixed", "bf16"], "training.optimizer": ["adamw", "adamw-8bit"]},
  "list": [{"training.global_batch": 6}, {"training.global_batch": 4}]
}
JSON
# 24 points; micro_batch 3 with global_batch 4 is invalid: an error row, not a failure.
expect 0 "24 rows written .* \(4 with an error\)" -- "$bin" sweep "$tmp/s.json" --out "$tmp/j1.csv" --jobs 1
[ "$(grep -c '' "$tmp/j1.csv")" = 25 ] || { echo "FAIL: expected a header and 24 rows"; fail=1; }
grep -q '^17,3,a100-80g,bf16-mixed,adamw,4,,.*/base/training/global_batch: 4 is not a multiple of micro_batch=3$' "$tmp/j1.csv" ||
  { echo "FAIL: point 17 should be an error row naming /base/training/global_batch"; fail=1; }
head -n 1 "$tmp/j1.csv" | grep -q '^index,training.micro_batch,cluster.gpu,training.precision,training.optimizer,training.global_batch,fits,step_time_s,tokens_per_s,mfu,memory.peak_bytes,memory.required_bytes,' ||
  { echo "FAIL: CSV header: $(head -n 1 "$tmp/j1.csv")"; fail=1; }
# The same rows whatever --jobs, once sorted by index.
"$bin" sweep "$tmp/s.json" --out "$tmp/j3.csv" --jobs 3 --quiet || fail=1
[ "$(sorted "$tmp/j1.csv")" = "$(sorted "$tmp/j3.csv")" ] || { echo "FAIL: --jobs 1 and --jobs 3 differ (csv)"; fail=1; }
"$bin" sweep "$tmp/s.json" --out "$tmp/j1.jsonl" --jobs 1 --quiet || fail=1
"$bin" sweep "$tmp/s.json" --out "$tmp/j3.jsonl" --jobs 3 --quiet || fail=1
[ "$(sorted_jsonl "$tmp/j1.jsonl")" = "$(sorted_jsonl "$tmp/j3.jsonl")" ] || { echo "FAIL: --jobs 1 and --jobs 3 differ (jsonl)"; fail=1; }
python3 - "$tmp/j1.jsonl" <<'PY' || fail=1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert sorted(r["index"] for r in rows) == list(range(24))
r = next(r for r in rows if r["index"] == 0)
assert r["params"] == {"training.micro_batch": 1, "cluster.gpu": "a100-80g", "training.precision": "bf16-mixed",
                       "training.optimizer": "adamw", "training.global_batch": 6}, r["params"]
assert r["result"]["fits"] is True and r["result"]["micro_batches"] == 6
assert sum("error" in r for r in rows) == 4
PY
# Multi-GPU points add result fields (speedup_vs_one_gpu, ...) that one-GPU points lack: the CSV
# header is the union, the same whatever order the points finish in.
cat >"$tmp/mg.json" <<'JSON'
{"base": {"model": {"base": "gpt3-125m", "layers": 4}, "cluster": {"gpu": "h100-sxm"},
          "training": {"seq_len": 256, "global_batch": 8}},
 "zip": {"cluster.gpus_per_node": [1, 2, 4], "parallelism.dp": [1, 2, 4]}, "grid": {"training.micro_batch": [1, 2]}}
JSON
for j in 1 3; do "$bin" sweep "$tmp/mg.json" --out "$tmp/mg$j.csv" --jobs $j --quiet || fail=1; done
[ "$(sorted "$tmp/mg1.csv")" = "$(sorted "$tmp/mg3.csv")" ] || { echo "FAIL: multi-GPU sweep: --jobs 1 and 3 differ"; fail=1; }
head -n 1 "$tmp/mg1.csv" | grep -q ',speedup_vs_one_gpu,' || { echo "FAIL: no speedup_vs_one_gpu column"; fail=1; }
# Shards partition the points.
for i in 0 1 2; do "$bin" sweep "$tmp/s.json" --out "$tmp/shard$i.csv" --shard $i/3 --quiet || fail=1; done
merged=$( { head -n 1 "$tmp/shard0.csv"; for i in 0 1 2; do tail -n +2 "$tmp/shard$i.csv"; done | sort -t, -k1,1n; } )
[ "$merged" = "$(sorted "$tmp/j1.csv")" ] || { echo "FAIL: shards 0/3..2/3 do not add up to the whole sweep"; fail=1; }
tail -n +2 "$tmp/shard1.csv" | cut -d, -f1 | grep -qvE '^(1|4|7|10|13|16|19|22)$' && { echo "FAIL: shard 1/3 took a wrong index"; fail=1; }
# In a pipe: no progress bar; --quiet: nothing at all.
"$bin" sweep "$tmp/s.json" --out "$tmp/p.csv" 2>"$tmp/err" | cat
grep -q $'\r' "$tmp/err" && { echo "FAIL: a progress bar in a pipe"; fail=1; }
"$bin" sweep "$tmp/s.json" --out "$tmp/q.csv" --quiet 2>"$tmp/err"
[ -s "$tmp/err" ] && { echo "FAIL: --quiet printed: $(cat "$tmp/err")"; fail=1; }

# Bad input exits 2 naming the file and the JSON path.
expect 2 "already exists; pass --resume" -- "$bin" sweep "$tmp/s.json" --out "$tmp/j1.csv"
expect 2 "ending in .csv or .jsonl" -- "$bin" sweep "$tmp/s.json" --out "$tmp/r.txt"
expect 2 "--shard 3/3: expected i/N" -- "$bin" sweep "$tmp/s.json" --out "$tmp/x.csv" --shard 3/3
expect 2 "" -- "$bin" sweep "$tmp/s.json"
expect 2 "no-such.json: cannot open file" -- "$bin" sweep "$tmp/no-such.json" --out "$tmp/x.csv"
echo '{"base": {}, "grid": {"training.seq_len": [1]}, "zipp": {}}' >"$tmp/bad.json"
expect 2 "bad.json: /zipp: unknown key" -- "$bin" sweep "$tmp/bad.json" --out "$tmp/x.csv"
echo '{"base": {}, "zip": {"a.b": [1, 2], "a.c": [1]}}' >"$tmp/bad.json"
expect 2 "bad.json: /zip/a.c: has 1 values but /zip/a.b has 2" -- "$bin" sweep "$tmp/bad.json" --out "$tmp/x.csv"
[ -e "$tmp/x.csv" ] && { echo "FAIL: a bad sweep left a results file"; fail=1; }
# Resuming a file of another sweep is refused.
expect 2 "another sweep" -- "$bin" sweep "$src/scenarios/sweeps/7b-finetune-gpus.json" --out "$tmp/j1.csv" --resume

# The shipped example sweeps parse and run (one point in ten of each), without error rows.
for f in "$src"/scenarios/sweeps/*.json; do
  out=$tmp/$(basename "$f" .json).jsonl
  expect 0 "with an error" -- "$bin" sweep "$f" --out "$out" --shard 0/10
  grep -q '"error"' "$out" && { echo "FAIL: $f: $(grep -m1 -o '"error":.*' "$out")"; fail=1; }
done
exit $fail
