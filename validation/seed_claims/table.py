"""Formats one `scaleout run --format json` result with its claim as a markdown row."""
import json
import sys

r = json.load(sys.stdin)
c = r.get("claim", {})
fa = {True: "fits", False: "does not fit"}.get(c.get("fits"), "-")
fs = "fits" if r["fits"] else "DOES NOT FIT"
sp = r.get("speedup_vs_one_gpu", 0.0)
ef = r.get("scaling_efficiency", 0.0)
tb = r["time_breakdown_s"]
print("| %s | %s | %s / %s | %.2fx | %.0f%% | %.2f s | %.2f s | %.1f GB |" % (
    r["scenario"], c.get("figure", "-"), fa, fs, sp, 100 * ef, r["step_time_s"], tb["exposed_comm"],
    r["memory"]["peak_bytes"] / 1e9))
