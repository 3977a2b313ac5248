#!/usr/bin/env bash
# The sweep under mpirun with 2 local ranks (rank 0 hands out points, rank 1 simulates): one merged
# results file equal, sorted by index, to a --jobs 1 run; --resume under mpirun runs only what is
# missing. Skipped when mpirun is absent or the binary was built without MPI.
set -u
bin=$1
if ! command -v mpirun >/dev/null; then echo "SKIP: mpirun not found"; exit 0; fi
if [ ! -x "$(dirname "$bin")/scaleout-mpi" ]; then echo "SKIP: no scaleout-mpi beside $bin (built without MPI)"; exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
cat >"$tmp/sweep.json" <<'JSON'
{
  "base": {"model": {"base": "gpt3-125m"}, "cluster": {"gpu": "h100-sxm"}, "training": {"seq_len": 512}},
  "grid": {"training.micro_batch": [1, 2, 4, 8], "cluster.gpu": ["a100-80g", "h100-sxm", "h200"],
           "training.recompute": ["none", "full"], "model.layers": [2, 4, 6]},
  "list": [{"training.global_batch": 8}, {"training.global_batch": 12}]
}
JSON
mpi() { mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "$bin" "$@"; }
sorted() {  # the header, then the rows by index
  python3 - "$1" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
head = [l for l in lines if l.startswith("index,")]
rows = [l for l in lines if not l.startswith("index,")]
key = lambda l: int(l.split(",")[0]) if l[0].isdigit() else int(l.split(":", 2)[1].split(",")[0])
print("\n".join(head + sorted(rows, key=key)))
PY
}
for ext in csv jsonl; do
  "$bin" sweep "$tmp/sweep.json" --out "$tmp/one.$ext" --jobs 1 --quiet || { echo "FAIL: --jobs 1 run"; fail=1; }
  out=$(mpi sweep "$tmp/sweep.json" --out "$tmp/mpi.$ext" 2>&1) || { echo "FAIL: mpirun exited $?: $out"; fail=1; }
  if [ "$(sorted "$tmp/mpi.$ext")" != "$(sorted "$tmp/one.$ext")" ]; then
    echo "FAIL: $ext: the merged MPI output differs from the --jobs 1 output sorted by index"; fail=1
  fi
  # Resume under MPI: keep the first half of the rows (and a torn line), run the rest.
  n=$(grep -c '' "$tmp/mpi.$ext")
  head -n $((n / 2)) "$tmp/mpi.$ext" >"$tmp/half.$ext"
  printf '5' >>"$tmp/half.$ext"
  mpi sweep "$tmp/sweep.json" --out "$tmp/half.$ext" --resume --quiet || { echo "FAIL: $ext: mpirun --resume"; fail=1; }
  if [ "$(sorted "$tmp/half.$ext")" != "$(sorted "$tmp/one.$ext")" ]; then
    echo "FAIL: $ext: the MPI-resumed output differs from the --jobs 1 output"; fail=1
  fi
done
# A bad sweep file stops every rank with exit code 2 and names the JSON path.
echo '{"base": "nope.json"}' >"$tmp/bad.json"
out=$(mpi sweep "$tmp/bad.json" --out "$tmp/bad.csv" 2>&1)
rc=$?
if [ $rc = 0 ] || ! grep -q "bad.json: /base: cannot open" <<<"$out"; then echo "FAIL: bad sweep under MPI: rc=$rc: $out"; fail=1; fi
[ $fail = 0 ] && echo "sweep_mpi: merged and resumed MPI outputs equal the --jobs 1 output"
exit $fail
