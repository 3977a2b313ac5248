#!/usr/bin/env bash
# `scaleout calibrate fit` on a scaleout-links file: the synthetic file (timed by the simulator with
# truth-profile.json) gives back the truth's figures in the profile's "links", `scaleout collective`
# uses them, and a malformed file exits 2 naming the file and the JSON path.
set -u
bin=$1
src=$2
source "$(dirname "$0")/lib/expect.sh"
export SCALEOUT_DATA=$src
syn=$src/hardware/calibration/measurements/synthetic-links-h200x8
expect 0 "held out >= 64 MiB" -- "$bin" calibrate fit "$syn/links.json" -o "$tmp/p.json" --residuals "$tmp/r.csv"
python3 - "$tmp/p.json" "$syn/truth-profile.json" "$tmp/r.csv" <<'PY' || fail=1
import json, sys
got = json.load(open(sys.argv[1]))["links"]
truth = json.load(open(sys.argv[2]))["links"]
def near(a, b, rel, what):
    assert abs(a - b) <= rel * abs(b), (what, a, b)
near(got["nvlink"]["efficiency"], truth["nvlink"]["efficiency"], 0.02, "nvlink efficiency")
near(got["nvlink"]["step_latency_us"], truth["nvlink"]["step_latency_us"], 0.2, "nvlink step latency")
for algo in ("ring", "tree"):
    near(got[algo]["bus_efficiency"], truth[algo]["bus_efficiency"], 0.02, algo + " bus efficiency")
    near(got[algo]["step_latency_us"], truth[algo]["step_latency_us"], 0.25, algo + " step latency")
assert got["fit"]["held_out_large"] > 0 and got["fit"]["held_out_large_busbw_median_rel_error"] < 0.02, got["fit"]
assert "pcie" not in got, got
lines = open(sys.argv[3]).read().splitlines()
assert lines[0].startswith("op,ranks,algorithm,bytes,held_out"), lines[0]
assert len(lines) > 300, len(lines)
PY
expect 0 "links calibrated: NVIDIA H200 x8" -- "$bin" collective --cluster dgx-h200 --profile "$tmp/p.json" --sizes 1GiB
# The kernel fit and the links fit into one profile.
expect 0 "links fit" -- "$bin" calibrate fit "$src/hardware/calibration/measurements/h200-2026-12-02/measurements.json" \
  --links "$syn/links.json" -o "$tmp/both.json"
python3 -c "import json,sys; p=json.load(open(sys.argv[1])); assert 'gemm_efficiency' in p and 'nvlink' in p['links']" \
  "$tmp/both.json" || fail=1
# Malformed files: the file and the JSON path.
python3 - "$syn/links.json" "$tmp" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["collectives"][3]["time_s"] = -1
json.dump(d, open(sys.argv[2] + "/negative.json", "w"))
d = json.load(open(sys.argv[1]))
d["p2p"][0]["colour"] = "blue"
json.dump(d, open(sys.argv[2] + "/key.json", "w"))
PY
expect 2 "negative.json: /collectives/3/time_s: expected a number in" -- "$bin" calibrate fit "$tmp/negative.json" -o "$tmp/x.json"
expect 2 "key.json: /p2p/0/colour: unknown key" -- "$bin" calibrate fit "$tmp/key.json" -o "$tmp/x.json"
expect 2 "the cluster's GPU is \"a100-80g\" but the links were measured on h200" -- \
  "$bin" calibrate fit "$syn/links.json" -o "$tmp/x.json" --cluster dgx-a100
exit $fail
