#!/usr/bin/env bash
# A sweep killed with SIGKILL midway and resumed has every point exactly once, equal to a clean run:
# rows are appended whole and made durable as they finish, and --resume cuts a torn last line.
set -u
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
# 4,200 small scenarios (one micro-batch each): a few seconds with one worker.
cat >"$tmp/sweep.json" <<'JSON'
{
  "base": {"model": {"base": "gpt3-125m"}, "cluster": {"gpu": "h100-sxm"},
           "training": {"seq_len": 512, "precision": "bf16-mixed"}},
  "grid": {
    "training.micro_batch": [1, 2, 3, 4, 5, 6, 7, 8],
    "training.seq_len": [128, 256, 512, 1024, 2048],
    "cluster.gpu": ["a100-40g", "a100-80g", "h100-sxm", "h200", "b200"],
    "training.recompute": ["none", "selective", "full"],
    "model.layers": [2, 4, 6, 8, 12, 13, 24]
  }
}
JSON
"$bin" sweep "$tmp/sweep.json" --out "$tmp/clean.jsonl" --jobs 2 --quiet || { echo "FAIL: clean run"; exit 1; }

for ext in jsonl csv; do
  out=$tmp/killed.$ext
  "$bin" sweep "$tmp/sweep.json" --out "$out" --jobs 1 --quiet &
  pid=$!
  # Wait for some rows, then kill it hard in the middle of its work.
  for _ in $(seq 200); do
    [ -f "$out" ] && [ "$(grep -c '' "$out")" -gt 300 ] && break
    sleep 0.02
  done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  before=$(grep -c '' "$out")
  echo "$ext: killed after $before lines"
  if [ "$before" -ge 4000 ]; then echo "FAIL: $ext: the sweep finished before the kill; make it bigger"; fail=1; fi
  # As if the kill had torn the last write.
  if [ "$ext" = jsonl ]; then printf '{"index":7,"params":{"training.micro' >>"$out"; else printf '7,1,128,a100' >>"$out"; fi
  "$bin" sweep "$tmp/sweep.json" --out "$out" --jobs 2 --resume --quiet || { echo "FAIL: $ext: resume exited $?"; fail=1; }
  # Resuming a finished sweep runs nothing and changes nothing.
  cp "$out" "$tmp/finished"
  "$bin" sweep "$tmp/sweep.json" --out "$out" --resume --quiet || { echo "FAIL: $ext: second resume"; fail=1; }
  cmp -s "$out" "$tmp/finished" || { echo "FAIL: $ext: resuming a finished sweep changed the file"; fail=1; }
  "$bin" sweep "$tmp/sweep.json" --out "$tmp/clean.$ext" --jobs 2 --quiet 2>/dev/null || true  # csv reference
  python3 - "$out" "$tmp/clean.$ext" "$ext" <<'PY' || fail=1
import csv, json, sys
got, ref, ext = sys.argv[1:4]
def rows(f):
    if ext == "jsonl":
        lines = [json.loads(l) for l in open(f)]
        return [(r["index"], json.dumps(r, sort_keys=True)) for r in lines]
    with open(f, newline="") as fh:
        r = list(csv.reader(fh))
    assert r[0][0] == "index", r[0]
    return [(int(x[0]), ",".join(x)) for x in r[1:]]
g, c = rows(got), rows(ref)
gi = [i for i, _ in g]
assert len(gi) == len(set(gi)), f"{ext}: {len(gi) - len(set(gi))} points written twice"
assert sorted(gi) == list(range(4200)), f"{ext}: points missing: {sorted(set(range(4200)) - set(gi))[:10]}"
assert sorted(g) == sorted(c), f"{ext}: resumed rows differ from a clean run"
print(f"{ext}: {len(g)} points, each once, equal to a clean run")
PY
done
exit $fail
