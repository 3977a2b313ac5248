#!/usr/bin/env bash
# `scaleout calibrate check`: a profile's error on measurements it was not fitted to. Measurements
# made of the profile's own predictions give zero error on every row; the day-2 H200 GEMMs give
# the figures the calibration README reports; bad input exits 2 naming the file.
set -u
bin=$1
src=$2
source "$(dirname "$0")/lib/expect.sh"
export SCALEOUT_DATA=$src
day2=$src/hardware/calibration/measurements/h200-gemm-2026-12-03/measurements.json
profile=$src/hardware/profiles/h200.json
expect 0 "GEMM bf16 +248 rows: median error +[0-9.]+%" -- "$bin" calibrate check "$day2" --profile "$profile" --residuals "$tmp/r.csv"
# The profile's own predictions, written back as measurements: nothing to get wrong.
python3 - "$day2" "$tmp/r.csv" "$tmp/own.json" <<'PY' || fail=1
import csv, json, sys
d = json.load(open(sys.argv[1]))
pred = {}
for r in csv.DictReader(open(sys.argv[2])):
    pred[(r["dtype"], int(r["m"]), int(r["n"]), int(r["k"]))] = float(r["predicted_s"])
assert len(pred) > 300, len(pred)
rows = []
for m in d["measurements"]:
    if m.get("kind") == "gemm" and m.get("time_s"):
        m = dict(m)
        m["time_s"] = pred[(m["dtype"], m["m"], m["n"], m["k"])]
        rows.append(m)
d["measurements"] = rows
json.dump(d, open(sys.argv[3], "w"))
PY
out=$("$bin" calibrate check "$tmp/own.json" --profile "$profile" 2>&1)
grep -q "GEMM  *363 rows: median error   0.0%, worst   0.0%" <<<"$out" || { echo "FAIL: own predictions: $out"; fail=1; }
expect 2 "nope.json" -- "$bin" calibrate check "$tmp/nope.json" --profile "$profile"
echo '{"schema": "scaleout-measurements/1", "gpu": {"name": "NVIDIA H200"}, "measurements": [{"kind": "gemm", "dtype": "bf16", "m": 1, "n": 1, "k": 1, "time_s": -1}]}' > "$tmp/bad.json"
expect 2 "bad.json: /measurements/0/time_s" -- "$bin" calibrate check "$tmp/bad.json" --profile "$profile"
expect 2 "README.md" -- "$bin" calibrate check "$day2" --profile "$src/README.md"
exit $fail
