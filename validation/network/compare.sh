#!/usr/bin/env bash
# Prints the published nccl-tests rows of published.json beside scaleout's prediction, with the
# error and whether it meets the target (10 % bus bandwidth, 25 % latency).
# Usage: validation/network/compare.sh [path/to/scaleout]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../../build/scaleout}
exec "$bin" validate network "$here/published.json"
