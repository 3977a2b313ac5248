#!/usr/bin/env bash
# Installs the Debian bookworm packages scaleout builds with, then configures and builds it.
# Usage: tools/setup.sh [BUILD_DIR]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(build-essential cmake libboost-graph-dev libeigen3-dev nlohmann-json3-dev libcli11-dev catch2
      libopenmpi-dev openmpi-bin python3 python3-matplotlib python3-numpy)
tools/apt-install.sh "${pkgs[@]}"
build=${1:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j2
