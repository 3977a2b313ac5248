#!/usr/bin/env bash
# Builds scaleout-links on the GPU machine, runs it over every visible GPU, and leaves the results
# in $OUT: links.json (the measurements), topo.txt (nvidia-smi topo -m), device.txt, run.log,
# build.log, and fit.txt + profile-links.json when the scaleout CLI can be built there too.
#
#   OUT=/path LINKS_BUDGET_S=300 ./hardware/calibration/harness/run_links_on_device.sh [scaleout-links args, e.g. --quick]
#
# Environment knobs (defaults in brackets):
#   OUT               output folder [<this folder>/out-links]
#   LINKS_BUDGET_S    wall-clock budget of the measurements [300]
#   LINKS_BUILD_DIR   CMake build folder of the harness [/tmp/scaleout-links-build]
#   LINKS_JOBS        parallel build jobs [all cores]
#   LINKS_FIT         1: also build the scaleout CLI and fit the measurements (CPU only, ~2 min
#                     with 16 cores) [0]
# Total wall time: build (~40 s) + LINKS_BUDGET_S + NCCL teardown; a `timeout` at budget + 90 s
# is the backstop for a hung NCCL call (the harness's own watchdog fires at budget + 60 s, and the
# JSON it rewrote after every series is kept).
set -u -o pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
OUT="${OUT:-$HERE/out-links}"
BUDGET="${LINKS_BUDGET_S:-300}"
BUILD="${LINKS_BUILD_DIR:-/tmp/scaleout-links-build}"
JOBS="${LINKS_JOBS:-$(nproc)}"
FIT="${LINKS_FIT:-0}"
mkdir -p "$OUT"
T0=$(date +%s)

nvidia-smi topo -m > "$OUT/topo.txt" 2>&1 || true
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(hostname)"
  nvidia-smi 2>&1 || true
  nvidia-smi topo -m 2>&1 || true
  nvidia-smi nvlink --status 2>&1 | head -200 || true
  nvcc --version 2>&1 || true
  cmake --version 2>&1 | head -1 || true
} > "$OUT/device.txt" 2>&1

echo "== building scaleout-links (log: build.log)"
if ! { cmake -S "$HERE" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release && cmake --build "$BUILD" -j "$JOBS" --target scaleout-links; } > "$OUT/build.log" 2>&1; then
  echo "BUILD FAILED after $(( $(date +%s) - T0 )) s; last lines of build.log:"
  tail -40 "$OUT/build.log"
  exit 1
fi
T_BUILD=$(( $(date +%s) - T0 ))
echo "built in ${T_BUILD} s"

export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "== running scaleout-links, budget ${BUDGET} s (log: run.log)"
timeout -k 10 $(( BUDGET + 90 )) "$BUILD/scaleout-links" --out "$OUT/links.json" --budget-s "$BUDGET" \
  --topo-file "$OUT/topo.txt" "$@" 2>&1 | tee "$OUT/run.log"
RC=${PIPESTATUS[0]}
T_RUN=$(( $(date +%s) - T0 - T_BUILD ))

if [ "$FIT" = "1" ] && [ -f "$OUT/links.json" ]; then
  echo "== fitting (log: fit.txt)"
  { cmake -S "$ROOT" -B /tmp/scaleout-cli-build -DCMAKE_BUILD_TYPE=Release -DSCALEOUT_BUILD_TESTS=OFF \
      -DSCALEOUT_BUILD_HARNESS=OFF && cmake --build /tmp/scaleout-cli-build -j "$JOBS" --target scaleout \
    && /tmp/scaleout-cli-build/scaleout calibrate fit "$OUT/links.json" -o "$OUT/profile-links.json" \
         --residuals "$OUT/links-residuals.csv"; } > "$OUT/fit.txt" 2>&1 || echo "fit failed (see fit.txt)"
  tail -20 "$OUT/fit.txt"
fi

echo "== done (build ${T_BUILD} s, measurements ${T_RUN} s, total $(( $(date +%s) - T0 )) s, exit ${RC})"
exit "$RC"
