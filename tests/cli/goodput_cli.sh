#!/usr/bin/env bash
# `scaleout goodput`: job MTBF, optimal checkpoint interval, goodput and time to train with a Monte
# Carlo cross-check; JSON with the same numbers; exit 2 with one line for bad input.
set -u
bin=$1
src=$2
source "$(dirname "$0")/lib/expect.sh"
export SCALEOUT_DATA=$src
s=$src/scenarios/parallel/llama3-8b-8xh100.json
expect 0 "job MTBF" -- "$bin" goodput "$s" --tokens 1e11 --trials 20
expect 0 "optimum +exact .*Young .*Daly" -- "$bin" goodput "$s" --tokens 1e11 --trials 20
expect 0 "<- chosen" -- "$bin" goodput "$s" --tokens 1e11 --checkpoint-interval "5 h" --mtbf-gpu "5000 h" --trials 20
expect 0 "monte carlo 20 of 20 trials" -- "$bin" goodput "$s" --tokens 1e11 --mtbf-gpu "5000 h" --checkpoint-write "60 s" --restart "10 min" --trials 20
expect 0 "nothing fails" -- "$bin" goodput "$s" --tokens 1e10 --mtbf-gpu never --mtbf-node never --trials 2
# A million GPUs: astronomical expected time, and a Monte Carlo that stops at its budget.
expect 0 "stopped at the event budget" -- "$bin" goodput "$s" --tokens 1e12 --set cluster.nodes=125000 --set parallelism.dp=1000000 --set training.global_batch=2000000 \
  --checkpoint-interval "5 h" --trials 5 --max-events 100000
expect 2 "--tokens" -- "$bin" goodput "$s" --tokens -5
expect 2 "--mtbf-gpu: unknown unit .*parsecs.*expected a duration" -- "$bin" goodput "$s" --tokens 1e9 --mtbf-gpu "50000 parsecs"
expect 2 "--mtbf-node: expected a positive duration" -- "$bin" goodput "$s" --tokens 1e9 --mtbf-node "0 h"
expect 2 "--checkpoint-interval: expected a duration" -- "$bin" goodput "$s" --tokens 1e9 --checkpoint-interval sometimes
expect 2 "--checkpoint-blocking: .* is longer than the checkpoint write" -- "$bin" goodput "$s" --tokens 1e9 --checkpoint-write "10 s" --checkpoint-blocking "20 s"
expect 2 "--trials: expected 1 to 1000000" -- "$bin" goodput "$s" --tokens 1e9 --trials 0
expect 2 "--format: expected text or json" -- "$bin" goodput "$s" --tokens 1e9 --format yaml
expect 2 "/training/micro_batchx: unknown key" -- "$bin" goodput "$s" --tokens 1e9 --set training.micro_batchx=1
expect 2 "tokens is required" -- "$bin" goodput "$s"
# Bad input is one line on stderr.
lines=$("$bin" goodput "$s" --tokens 1e9 --restart "5 fortnights" 2>&1 >/dev/null | wc -l)
[ "$lines" = 1 ] || { echo "FAIL: bad --restart printed $lines lines"; fail=1; }
# JSON: the closed form at the optimum is at least as good as every row of the table, and the
# Monte Carlo's mean is within four standard errors of the closed form at the chosen interval.
"$bin" goodput "$s" --tokens 1e11 --mtbf-gpu "2000 h" --checkpoint-write "2 min" --trials 400 --format json >"$tmp/g.json" || fail=1
python3 - "$tmp/g.json" <<'PY' || fail=1
import json, sys
g = json.load(open(sys.argv[1]))
for k in ("job_mtbf_s", "optimum", "chosen", "optimal", "table", "monte_carlo", "steps", "step_time_s"):
    assert k in g, k
assert abs(g["job_mtbf_s"] - 1 / (8 / (2000 * 3600) + 1 / g["mtbf_node_s"])) < 1e-6 * g["job_mtbf_s"]
best = g["optimal"]["goodput"]
assert all(r["goodput"] <= best + 1e-12 for r in g["table"]), g["table"]
mc = g["monte_carlo"]
assert mc["finished"] == 400 and not mc["capped"]
assert abs(mc["mean_wall_s"] - g["chosen"]["expected_wall_s"]) < 4 * mc["stderr_wall_s"], mc
PY
# Same seed, same output.
a=$("$bin" goodput "$s" --tokens 1e11 --mtbf-gpu "2000 h" --trials 50 --seed 3)
b=$("$bin" goodput "$s" --tokens 1e11 --mtbf-gpu "2000 h" --trials 50 --seed 3)
[ "$a" = "$b" ] || { echo "FAIL: same seed, different output"; fail=1; }
exit $fail
