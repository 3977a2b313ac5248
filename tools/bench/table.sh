#!/usr/bin/env bash
# The README's speed table: every whole-step benchmark of scaleout_bench in a process of its own
# (so that its peak resident memory is its own), median of REPS repetitions; prints Markdown rows
# of wall time, events, events per second and peak memory.
#   tools/bench/table.sh [BENCH (default build/tools/bench/scaleout_bench)] [REPS (default 3)]
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
bench=${1:-$src/build/tools/bench/scaleout_bench}
reps=${2:-3}
echo "| benchmark | GPUs | wall (median of $reps) | events | events/s | peak memory |"
echo "|---|---:|---:|---:|---:|---:|"
for name in $("$bench" --benchmark_list_tests | grep -v '^BM_'); do
  "$bench" --benchmark_filter="^${name}\$" --benchmark_repetitions="$reps" --benchmark_report_aggregates_only=true \
      --benchmark_format=json 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
med = [b for b in d["benchmarks"] if b.get("aggregate_name") == "median"][0]
ms = med["real_time"] * {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[med["time_unit"]]
wall = "%.3g ms" % ms if ms < 1000 else "%.3g s" % (ms / 1e3)
print("| %s | %d | %s | %d | %.3g M | %.0f MB |" % (med["run_name"], med["gpus"], wall, med["events"],
      med["events/s"] / 1e6, med["peak_MB"]))'
done
