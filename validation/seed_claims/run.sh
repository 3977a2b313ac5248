#!/usr/bin/env bash
# Runs every seed-article cluster claim and prints the article's figure beside the simulator's.
# Usage: validation/seed_claims/run.sh [path/to/scaleout]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../../build/scaleout}
echo "| scenario | article says | fits (article / scaleout) | scaleout: speed-up vs 1 GPU | efficiency | step | exposed comm | peak memory |"
echo "|---|---|---|---:|---:|---:|---:|---:|"
for f in "$here"/*.json; do
  "$bin" run "$f" --format json | python3 "$here/table.py"
done
