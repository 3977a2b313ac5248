#!/usr/bin/env bash
# Everything CI runs: set up and build (tools/setup.sh), the test suite, then the suite again under
# AddressSanitizer and UndefinedBehaviorSanitizer with a bounded libFuzzer run (tools/sanitize.sh;
# SCALEOUT_SANITIZE=0 skips that part).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh build
ctest --test-dir build --output-on-failure -j2
if [ "${SCALEOUT_SANITIZE:-1}" != 0 ]; then tools/sanitize.sh build-asan; fi
