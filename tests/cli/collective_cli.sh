#!/usr/bin/env bash
# `scaleout collective` and `scaleout validate network`: an nccl-tests-like table, JSON with the
# documented keys, and exit code 2 with the file and JSON path for bad input.
set -u
bin=$1
src=$2
source "$(dirname "$0")/lib/expect.sh"
export SCALEOUT_DATA=$src
expect 0 "busbw" -- "$bin" collective --cluster dgx-a100 --op allreduce --sizes 8B:1MiB
expect 0 "ring +Simple" -- "$bin" collective --cluster dgx-h100 --op all_gather --ranks 0-7 --sizes 1GiB
expect 0 '"busbw_gbps"' -- "$bin" collective --cluster dgx-h100-2n --op allreduce --sizes 1MiB,1GiB --format json
expect 0 "halving_doubling" -- "$bin" collective --cluster dgx-a100 --ranks 0,1,2,3,4,5 --algo halving_doubling --sizes 1MiB
expect 0 "rows within target" -- "$bin" validate network "$src/validation/network/published.json"
expect 2 "unknown cluster \"dgx-z\"" -- "$bin" collective --cluster dgx-z
expect 2 "rank 99 is not in the cluster" -- "$bin" collective --cluster dgx-a100 --ranks 0,99
expect 2 "--ranks" -- "$bin" collective --cluster dgx-a100 --ranks 0-x
expect 2 "unknown algorithm" -- "$bin" collective --cluster dgx-a100 --algo spiral
expect 2 "nvls needs" -- "$bin" collective --cluster dgx-a100 --algo nvls
expect 2 "--sizes" -- "$bin" collective --cluster dgx-a100 --sizes 8X
expect 2 "unknown collective" -- "$bin" collective --cluster dgx-a100 --op gossip
echo '{"base": "dgx-a100", "nodes": 2, "nic_speed": "200 Gb/s"}' >"$tmp/bad.json"
expect 2 "bad.json: /nic_speed: unknown key" -- "$bin" collective --cluster "$tmp/bad.json"
echo '{"base": "dgx-a100", "nodes": 2, "nics_per_node": 0}' >"$tmp/island.json"
expect 2 "island.json: /nics_per_node: the cluster is not connected" -- "$bin" collective --cluster "$tmp/island.json"
# The JSON is an array of objects with the contract's keys.
"$bin" collective --cluster dgx-a100 --sizes 8B,1GiB --format json >"$tmp/r.json" || fail=1
python3 - "$tmp/r.json" <<'PY' || fail=1
import json, sys
rows = json.load(open(sys.argv[1]))
assert isinstance(rows, list) and len(rows) == 2, rows
for r in rows:
    for k in ("size_bytes", "time_s", "algbw_gbps", "busbw_gbps"):
        assert k in r, (k, r)
assert rows[1]["busbw_gbps"] > 200, rows
PY
exit $fail
