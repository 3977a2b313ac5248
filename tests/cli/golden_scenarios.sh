#!/usr/bin/env bash
# Golden scenarios: every canonical scenario against its checked-in summary (relative tolerance
# 1e-9: the simulation is deterministic) and its event fingerprint, so a silent change in
# behaviour shows. Also runs each twice and requires byte-identical JSON and traces.
set -u
bin=$1
root=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
for g in "$root"/tests/golden/*.json; do
  name=$(basename "$g" .json)
  dir=${name%%_*}
  file=${name#*_}
  if [ "$dir" = "scenarios" ]; then f="$root/scenarios/$file.json"; else f="$root/scenarios/$dir/$file.json"; fi
  if ! "$bin" run "$f" --format json >"$tmp/a.json" 2>"$tmp/err"; then
    echo "FAIL: $f: $(cat "$tmp/err")"; fail=1; continue
  fi
  python3 - "$g" "$tmp/a.json" "$f" <<'PY' || fail=1
import json, sys
want = json.load(open(sys.argv[1])); r = json.load(open(sys.argv[2]))
got = {k: r[k] for k in ("fits", "step_time_s", "tokens_per_s", "mfu", "event_fingerprint", "events")}
got["peak_bytes"] = r["memory"]["peak_bytes"]
bad = []
for k, v in want.items():
    g = got[k]
    if isinstance(v, float):
        if abs(g - v) > 1e-9 * max(abs(v), 1e-30): bad.append(f"{k}: {g} != {v}")
    elif g != v:
        bad.append(f"{k}: {g} != {v}")
if bad:
    print(f"FAIL: {sys.argv[3]}: " + "; ".join(bad) + " (tests/golden/update.sh after a deliberate change)")
    sys.exit(1)
PY
done
# Determinism: two runs, byte for byte, JSON and trace.
s=$root/scenarios/parallel/llama3-8b-8xh100.json
"$bin" run "$s" --format json --trace "$tmp/t1.json" >"$tmp/r1.json" && "$bin" run "$s" --format json --trace "$tmp/t2.json" >"$tmp/r2.json" || fail=1
cmp -s "$tmp/r1.json" "$tmp/r2.json" || { echo "FAIL: JSON differs between runs"; fail=1; }
cmp -s "$tmp/t1.json" "$tmp/t2.json" || { echo "FAIL: trace differs between runs"; fail=1; }
exit $fail
