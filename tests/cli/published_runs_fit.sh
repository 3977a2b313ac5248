#!/usr/bin/env bash
# Runs that really happened must be predicted to fit: every published H100 run of
# validation/h100 (NVIDIA's DGX Cloud benchmarks, NeMo AutoModel) ran on 80 GB GPUs, and
# validation/torchtitan's on 96 GB ones.
set -u
bin=$1
root=$2
source "$(dirname "$0")/lib/expect.sh"
n=0
for f in "$root"/validation/h100/scenarios/*.json "$root"/validation/torchtitan/scenarios/*.json; do
  n=$((n + 1))
  "$bin" run "$f" --format json >"$tmp/r.json" 2>"$tmp/err" || { echo "FAIL: $f: $(cat "$tmp/err")"; fail=1; continue; }
  python3 - "$f" "$tmp/r.json" <<'PY' || fail=1
import json, sys
r = json.load(open(sys.argv[2]))
if not r["fits"]:
    print("FAIL: %s ran on its GPUs but is predicted not to fit: needs %.1f GB of %.1f" % (
        sys.argv[1], r["memory"]["required_bytes"] / 1e9, r["memory"]["capacity_bytes"] / 1e9))
    sys.exit(1)
PY
done
[ "$n" -ge 19 ] || { echo "FAIL: expected the 19 published runs, found $n"; fail=1; }
exit $fail
