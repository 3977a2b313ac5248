#!/usr/bin/env bash
# The test suite under AddressSanitizer and UndefinedBehaviorSanitizer (clang), then libFuzzer
# over the scenario, sweep, cluster and unit parsers for a bounded time, starting from the
# committed corpus (tests/fuzz/corpus). Any sanitizer report, crash, leak, hang (10 s per input)
# or runaway allocation (2 GB) fails it.
# Usage: tools/sanitize.sh [BUILD_DIR]   (default: build-asan; FUZZ_SECONDS, default 60)
set -euo pipefail
cd "$(dirname "$0")/.."
tools/apt-install.sh clang libclang-rt-14-dev ninja-build  # (ninja: it may run without setup.sh)
build=${1:-build-asan}
# -O1: sanitizers want some optimisation for speed, and it keeps the 2-core build short.
gen=()
[ -f "$build/CMakeCache.txt" ] || gen=(-G Ninja)
cmake -S . -B "$build" "${gen[@]}" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
  -DSCALEOUT_SANITIZE=ON -DSCALEOUT_FUZZ=ON -DSCALEOUT_BUILD_HARNESS=OFF \
  -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON >/dev/null  # (the benchmarks are timed in the plain build, never run by CTest)
cmake --build "$build" -j2
export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The slow end-to-end scripts (plan searches, kill-and-resume sweeps, plots) run in the plain suite;
# under the sanitizers (about 9x slower) the rest covers the same code.
ctest --test-dir "$build" --output-on-failure -j2 -E sweep_mpi -LE slow
# Open MPI's plugins (dlopen'ed, so unnamed in leak reports) keep allocations to the end.
ASAN_OPTIONS=abort_on_error=1:detect_leaks=0 ctest --test-dir "$build" --output-on-failure -R sweep_mpi
corpus="$build/fuzz-corpus"
mkdir -p "$corpus"
"$build/tests/scaleout_fuzz" -max_total_time="${FUZZ_SECONDS:-60}" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
  -print_final_stats=1 "$corpus" tests/fuzz/corpus
