#!/usr/bin/env bash
# Installs the Debian bookworm packages scaleout builds with, then configures and builds it.
# Usage: tools/setup.sh [BUILD_DIR]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(build-essential cmake libboost-graph-dev libeigen3-dev nlohmann-json3-dev libcli11-dev catch2
      libopenmpi-dev openmpi-bin python3 python3-matplotlib python3-numpy ninja-build)
tools/apt-install.sh "${pkgs[@]}"
build=${1:-build}
# Ninja for a fresh build folder (it compiles any target's files while others link, where make
# waits for each library in turn); a folder configured before keeps its generator.
gen=()
[ -f "$build/CMakeCache.txt" ] || gen=(-G Ninja)
# SCALEOUT_CMAKE_ARGS: extra configure options (tools/test.sh builds the harness for one GPU).
cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release ${SCALEOUT_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j2
