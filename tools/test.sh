#!/usr/bin/env bash
# Everything CI runs: set up and build (tools/setup.sh), the test suite, then the suite again under
# AddressSanitizer and UndefinedBehaviorSanitizer with a bounded libFuzzer run (tools/sanitize.sh;
# SCALEOUT_SANITIZE=0 skips that part).
set -euo pipefail
cd "$(dirname "$0")/.."
# A fresh test build compiles the CUDA harness for Hopper only (the device's H200): the test machine
# has no GPU and each architecture is another device compile (a plain setup builds Ampere's too).
fresh_args=""
[ -f build/CMakeCache.txt ] || fresh_args="-DCMAKE_CUDA_ARCHITECTURES=90"
SCALEOUT_CMAKE_ARGS="${SCALEOUT_CMAKE_ARGS:-$fresh_args}" tools/setup.sh build
ctest --test-dir build --output-on-failure -j2
if [ "${SCALEOUT_SANITIZE:-1}" != 0 ]; then tools/sanitize.sh build-asan; fi
