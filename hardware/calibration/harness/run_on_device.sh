#!/usr/bin/env bash
# Builds scaleout-harness on the GPU machine, runs it, and leaves the results in
# $OUT (measurements.json, run.log, build.log, device.txt: 4 files).
#
#   OUT=/path HARNESS_BUDGET_S=200 ./hardware/calibration/harness/run_on_device.sh [harness args, e.g. --quick]
#
# Environment knobs (defaults in brackets):
#   OUT                  output folder [<this folder>/out]
#   HARNESS_BUDGET_S     wall-clock budget of the harness itself [200]
#   HARNESS_TORCH        1: afterwards, cross-check attention through PyTorch SDPA
#                        (cuDNN and flash backends) and merge it into the JSON [1]
#   HARNESS_TORCH_BUDGET_S  budget of that cross-check, PyTorch start-up included [45]
#   HARNESS_SUSTAIN_MS   run each kernel this long before timing it (the clock under a
#                        steady load, not a short burst's boost), harness and PyTorch [0]
#   HARNESS_BUILD_DIR    CMake build folder [/tmp/scaleout-harness-build]
#   HARNESS_JOBS         parallel build jobs [16]
# Total wall time is about: build (~30 s with 16 jobs) + HARNESS_BUDGET_S +
# HARNESS_TORCH_BUDGET_S + a few seconds.
set -u -o pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${OUT:-$HERE/out}"
BUDGET="${HARNESS_BUDGET_S:-200}"
TORCH="${HARNESS_TORCH:-1}"
TORCH_BUDGET="${HARNESS_TORCH_BUDGET_S:-45}"
SUSTAIN_MS="${HARNESS_SUSTAIN_MS:-0}"
BUILD="${HARNESS_BUILD_DIR:-/tmp/scaleout-harness-build}"
JOBS="${HARNESS_JOBS:-16}"
mkdir -p "$OUT"
T0=$(date +%s)

# What the numbers were taken on (cheap; read-only queries).
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(hostname)"
  nvidia-smi 2>&1 || true
  nvidia-smi -q -d CLOCK,POWER,PERFORMANCE 2>&1 | head -120 || true
  nvcc --version 2>&1 || true
  cmake --version 2>&1 | head -1 || true
} > "$OUT/device.txt" 2>&1

# cuDNN: the toolkit's copy, else the nvidia-cudnn Python wheel (it ships headers
# and libraries). The harness dlopens libcudnn at run time, so the attention
# phase reports an error instead of failing the run when neither is there.
CUDNN_DIR=""
if [ ! -f /usr/local/cuda/include/cudnn_graph.h ] || ! ls /usr/local/cuda/lib64/libcudnn.so* >/dev/null 2>&1; then
  CUDNN_DIR=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null || true)
fi
CMAKE_ARGS=(-DCMAKE_BUILD_TYPE=Release)
LIBS="/usr/local/cuda/lib64"
if [ -n "$CUDNN_DIR" ] && [ -d "$CUDNN_DIR" ]; then
  echo "cuDNN from the Python wheel: $CUDNN_DIR" | tee -a "$OUT/device.txt"
  CMAKE_ARGS+=(-DCUDNN_ROOT="$CUDNN_DIR")
  LIBS="$LIBS:$CUDNN_DIR/lib"
fi

echo "== building scaleout-harness (log: build.log)"
if ! { cmake -S "$HERE" -B "$BUILD" "${CMAKE_ARGS[@]}" && cmake --build "$BUILD" -j "$JOBS"; } > "$OUT/build.log" 2>&1; then
  echo "BUILD FAILED after $(( $(date +%s) - T0 )) s; last lines of build.log:"
  tail -40 "$OUT/build.log"
  exit 1
fi
T_BUILD=$(( $(date +%s) - T0 ))
echo "built in ${T_BUILD} s"

export LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "== running the harness, budget ${BUDGET} s (log: run.log)"
"$BUILD/scaleout-harness" --out "$OUT/measurements.json" --budget-s "$BUDGET" --sustain-ms "$SUSTAIN_MS" "$@" 2>&1 | tee "$OUT/run.log"
RC=${PIPESTATUS[0]}
T_RUN=$(( $(date +%s) - T0 - T_BUILD ))

if [ "$TORCH" = "1" ] && [ -f "$OUT/measurements.json" ]; then
  echo "== PyTorch SDPA cross-check, budget ${TORCH_BUDGET} s"
  QUICK=""
  for a in "$@"; do [ "$a" = "--quick" ] && QUICK="--quick"; done
  # The script stops starting configurations at the budget; timeout is the backstop.
  timeout -k 5 $(( TORCH_BUDGET + 30 )) python3 "$HERE/torch_attention.py" --merge "$OUT/measurements.json" \
    --budget-s "$(( TORCH_BUDGET > 15 ? TORCH_BUDGET - 15 : 5 ))" --sustain-ms "$SUSTAIN_MS" $QUICK 2>&1 | tee -a "$OUT/run.log" || true
fi

echo "== summary (build ${T_BUILD} s, harness ${T_RUN} s, total $(( $(date +%s) - T0 )) s, harness exit ${RC})"
"$BUILD/scaleout-harness" --summarize "$OUT/measurements.json"
exit "$RC"
