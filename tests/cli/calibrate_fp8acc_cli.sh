#!/usr/bin/env bash
# `scaleout calibrate fp8-accumulate`: from the harness's fp8_acc pairs measured on an H100, the
# shipped profiles' gemm_fp8_split_accumulate comes back, held-out pairs within the README's
# figures; `calibrate check` reports the pairs' ratio error; a file without pairs is refused.
set -u
bin=$1
src=$2
source "$(dirname "$0")/lib/expect.sh"
export SCALEOUT_DATA=$src
m=$src/hardware/calibration/measurements/h100-fp8acc-2026-12-07/measurements.json
profile=$src/hardware/profiles/h100-sxm.json
expect 0 "fitted gemm_fp8_split_accumulate = 1\.084 on 39 pairs; held out 12: ratio error median 2\.8%" -- \
  "$bin" calibrate fp8-accumulate "$m" --profile "$profile" -o "$tmp/p.json"
python3 - "$profile" "$tmp/p.json" <<'PY' || fail=1
import json, sys
shipped, fitted = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert fitted["gemm_fp8_split_accumulate"] == shipped["gemm_fp8_split_accumulate"] == 1.084, fitted["gemm_fp8_split_accumulate"]
for k in shipped:
    if k not in ("gemm_fp8_split_accumulate", "source"):
        assert fitted[k] == shipped[k], k
PY
expect 0 "FP8 split/fast +51 rows: median error +[0-9.]+%" -- "$bin" calibrate check "$m" --profile "$tmp/p.json"
# Harness rows of another phase only: nothing to fit, said with the file and the path.
python3 -c "import json,sys; j=json.load(open(sys.argv[1])); j['measurements']=[r for r in j['measurements'] if r['kind']!='gemm_fp8acc']; json.dump(j, open(sys.argv[2],'w'))" \
  "$m" "$tmp/none.json"
expect 2 "none.json: /measurements: expected the fp8_acc phase's rows" -- \
  "$bin" calibrate fp8-accumulate "$tmp/none.json" --profile "$profile" -o "$tmp/q.json"
exit $fail
