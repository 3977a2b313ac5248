#!/usr/bin/env bash
# Rewrites the golden summaries of every canonical scenario (after a deliberate model change;
# say why in the commit). Usage: tests/golden/update.sh [path/to/scaleout]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$root/build/scaleout}
for f in "$root"/scenarios/*.json "$root"/scenarios/seed/*.json "$root"/scenarios/parallel/*.json; do
  name=$(basename "$(dirname "$f")")_$(basename "$f" .json)
  "$bin" run "$f" --format json | python3 -c '
import json, sys
r = json.load(sys.stdin)
keep = {k: r[k] for k in ("fits", "step_time_s", "tokens_per_s", "mfu", "event_fingerprint", "events")}
keep["peak_bytes"] = r["memory"]["peak_bytes"]
json.dump(keep, sys.stdout, indent=1, sort_keys=True)
print()' > "$root/tests/golden/$name.json"
done
