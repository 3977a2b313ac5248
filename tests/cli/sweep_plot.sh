#!/usr/bin/env bash
# tools/plot/plot_results.py draws every kind of plot, as PNG and SVG, from both results formats.
# Skipped when Debian's python3-matplotlib is not installed.
set -u
bin=$1
src=$2
py=/usr/bin/python3
if ! "$py" -c "import matplotlib" 2>/dev/null; then echo "SKIP: $py has no matplotlib (apt-get install python3-matplotlib)"; exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
cat >"$tmp/s.json" <<'JSON'
{
  "base": {"model": {"base": "gpt3-125m"}, "cluster": {"gpu": "h100-sxm"}, "training": {"seq_len": 512}},
  "grid": {"cluster.gpu": ["a100-40g", "h100-sxm", "l40s"], "training.micro_batch": [1, 4, 16, 64],
           "training.recompute": ["none", "full"]},
  "list": [{"training.seq_len": 512}, {"training.seq_len": 2048}, {"training.seq_len": 2048, "training.micro_batch.x": 1}]
}
JSON
for ext in csv jsonl; do
  "$bin" sweep "$tmp/s.json" --out "$tmp/r.$ext" --quiet || { echo "FAIL: sweep"; exit 1; }
  "$py" "$src/tools/plot/plot_results.py" "$tmp/r.$ext" --out-dir "$tmp/plots-$ext" >"$tmp/log" 2>&1 || { echo "FAIL: $ext: $(cat "$tmp/log")"; fail=1; }
  "$py" "$src/tools/plot/plot_results.py" "$tmp/r.$ext" line --x training.micro_batch --series cluster.gpu --ideal \
    --where training.recompute=full --metric mfu --out-dir "$tmp/plots-$ext" >>"$tmp/log" 2>&1 || { echo "FAIL: $ext line: $(cat "$tmp/log")"; fail=1; }
  for kind in line heatmap memory time pareto; do
    for f in png svg; do
      ls "$tmp/plots-$ext"/r-$kind*.$f >/dev/null 2>&1 || { echo "FAIL: $ext: no $kind .$f: $(cat "$tmp/log")"; fail=1; }
    done
  done
  # A PNG is a PNG and has some size.
  for f in "$tmp/plots-$ext"/*.png; do
    head -c 8 "$f" | grep -q PNG && [ "$(stat -c %s "$f")" -gt 10000 ] || { echo "FAIL: $f is not a plot"; fail=1; }
  done
done
# Bad options fail with a message.
"$py" "$src/tools/plot/plot_results.py" "$tmp/r.csv" --metric no_such --out-dir "$tmp/x" >/dev/null 2>&1 && { echo "FAIL: an unknown metric was accepted"; fail=1; }
[ $fail = 0 ] && echo "sweep_plot: every kind of plot drawn from csv and jsonl"
exit $fail
