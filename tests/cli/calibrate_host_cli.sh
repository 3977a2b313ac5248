#!/usr/bin/env bash
# `scaleout calibrate host`: from the single-GPU steps' calibration rows, the shipped H200 profile's
# host costs come back unchanged and the foreach optimizer's efficiency comes back per states'
# dtype, bf16 below fp32 below a plain stream; `validate single-gpu` reports the optimizer phase
# apart, and the refitted profile predicts it on the held-out rows within the README's figures.
set -u
bin=$1
src=$2
source "$(dirname "$0")/lib/expect.sh"
export SCALEOUT_DATA=$src
steps=$src/validation/single_gpu/results/steps.jsonl
day2=$src/validation/single_gpu/results-2026-12-04/steps.jsonl
profile=$src/hardware/profiles/h200.json
expect 0 "host_opt_tensor=10 multi_tensor_efficiency.fp32=0.78 multi_tensor_efficiency.bf16=0.655" -- \
  "$bin" calibrate host "$steps" --profile "$profile" -o "$tmp/p.json" --host-only
python3 - "$profile" "$tmp/p.json" <<'PY' || fail=1
import json, sys
shipped, fitted = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
for k in ("host_fwd_kernel", "host_bwd_kernel", "host_opt_tensor"):
    assert fitted[k] == shipped[k], (k, fitted[k], shipped[k])
mt = fitted["multi_tensor_efficiency"]
assert mt == shipped["multi_tensor_efficiency"], mt
assert mt["bf16"] < mt["fp32"] < fitted["memory_efficiency"], mt
PY
# The optimizer phase on the second day's steps (nothing was fitted on them).
expect 0 "of which the optimizer step alone .*: \|error\| median 0\.[0-9]%" -- \
  "$bin" validate single-gpu "$day2" --profile "$tmp/p.json"
# A profile whose multi_tensor_efficiency names no dtype is refused with its path.
python3 -c "import json,sys; p=json.load(open(sys.argv[1])); p['multi_tensor_efficiency']={'bf61': 0.5}; json.dump(p, open(sys.argv[2],'w'))" \
  "$profile" "$tmp/bad.json"
expect 2 "bad.json: /multi_tensor_efficiency/bf61: unknown key" -- "$bin" validate single-gpu "$steps" --profile "$tmp/bad.json"
exit $fail
