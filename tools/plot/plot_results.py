#!/usr/bin/python3
"""Plots of a `scaleout sweep` results file (.csv or .jsonl), as PNG and SVG.

Run it with Debian's python3-matplotlib (/usr/bin/python3, not a pyenv python):

    /usr/bin/python3 tools/plot/plot_results.py results.csv --out-dir plots/            # every plot that fits
    /usr/bin/python3 tools/plot/plot_results.py results.csv line --x training.micro_batch --series cluster.gpu
    /usr/bin/python3 tools/plot/plot_results.py results.csv heatmap --x training.micro_batch --y training.seq_len --metric mfu
    /usr/bin/python3 tools/plot/plot_results.py results.csv memory --where cluster.gpu=h100-sxm
    /usr/bin/python3 tools/plot/plot_results.py results.csv time --where cluster.gpu=h100-sxm
    /usr/bin/python3 tools/plot/plot_results.py results.csv pareto --cost usd_per_hour --price h100-sxm=3.0

Kinds:
  line     a metric against one swept axis (or a result field such as gpus), one line per value of
           another: scaling curves (--ideal adds linear scaling from the first point)
  heatmap  a metric over two swept axes
  memory   stacked bars of the memory at the peak, by category, one bar per point, against capacity
  time     stacked bars of where the step time goes, one bar per point
  pareto   throughput against cost (GPUs, or dollars per hour from GPU-hour prices): the front of
           points that no other beats on both
Axes not on a plot are reduced: by default each plotted cell takes the best (--reduce max) of the
points that fit, over the other axes; --where PATH=VALUE fixes an axis instead. Points that do not
fit are drawn hollow (line), hatched (heatmap) or marked (bars); error rows are left out.
"""
import argparse
import csv
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

# Illustrative on-demand prices in US dollars per GPU-hour, for the cost axis of the Pareto plot only;
# pass --price NAME=USD for the ones you pay.
DEFAULT_PRICES = {
    "v100": 0.9, "a100-40g": 1.3, "a100-80g": 1.8, "h100-pcie": 2.5, "h100-sxm": 3.0, "h200": 3.7,
    "b200": 5.5, "l40s": 1.0, "mi300x": 2.5,
}

MEMORY_CATEGORIES = ["params", "grads", "optimizer", "activations", "other"]
LABELS = {
    "tokens_per_s": "tokens/s", "step_time_s": "step time (s)", "mfu": "MFU", "model_tflops_per_gpu": "TFLOP/s per GPU",
    "memory.peak_bytes": "peak memory (GB)", "memory.required_bytes": "required memory (GB)", "gpus": "GPUs",
    "usd_per_hour": "cost (US$ per hour)",
}


def convert(v):
    """A CSV cell or JSON value as a Python value: numbers, booleans, else the string."""
    if not isinstance(v, str):
        return v
    if v == "":
        return None
    if v in ("true", "false"):
        return v == "true"
    for t in (int, float):
        try:
            return t(v)
        except ValueError:
            pass
    return v


def flatten(obj, prefix, out):
    for k, v in obj.items():
        key = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict) and v:
            flatten(v, key, out)
        else:
            out[key] = v


def load(path):
    """Rows (dicts of dotted fields, index order) and the swept paths, in the sweep's order."""
    rows, params = [], []
    if path.endswith(".jsonl"):
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                r = json.loads(line)
                row = {"index": r["index"], "error": r.get("error")}
                for k, v in r["params"].items():
                    if k not in params:
                        params.append(k)
                    row[k] = json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v
                if "result" in r:
                    flatten(r["result"], "", row)
                rows.append(row)
    elif path.endswith(".csv"):
        with open(path, newline="") as f:
            reader = csv.reader(f)
            header = next(reader)
            end = header.index("fits") if "fits" in header else len(header) - 1
            params = header[1:end]
            for cells in reader:
                if len(cells) != len(header):
                    continue  # a torn last line
                row = {h: convert(c) for h, c in zip(header, cells)}
                row["error"] = row.get("error") or None
                rows.append(row)
    else:
        sys.exit(f"{path}: expected a results file ending in .csv or .jsonl")
    rows.sort(key=lambda r: r["index"])
    return rows, params


def label(key):
    return LABELS.get(key, key)


def scale(metric):
    return 1e-9 if metric.endswith("_bytes") else 1.0


def axis_values(rows, path):
    seen = []
    for r in rows:
        v = r.get(path)
        if v not in seen:
            seen.append(v)
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in seen):
        seen.sort()
    return seen


def compact(v):
    """3 significant digits with k/M/G/T suffixes: 12.9k, 1.08G, 0.421."""
    for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.3g}{suffix}"
    return f"{v:.3g}"


def value_text(v):
    return "-" if v is None else str(v)


def apply_where(rows, where):
    for w in where:
        if "=" not in w:
            sys.exit(f"--where {w}: expected PATH=VALUE")
        path, value = w.split("=", 1)
        rows = [r for r in rows if value_text(r.get(path)) == value]
        if not rows:
            sys.exit(f"--where {w}: no row has that value")
    return rows


def ok_rows(rows):
    return [r for r in rows if not r.get("error") and r.get("fits") is not None]


def reduce_cell(rows, metric, how):
    """The value a plot cell shows: of the points that fit if any, else of all (then marked)."""
    vals = [r[metric] for r in rows if r.get(metric) is not None]
    fit = [r[metric] for r in rows if r.get("fits") and r.get(metric) is not None]
    use = fit or vals
    if not use:
        return None, False
    if how == "max":
        v = max(use)
    elif how == "min":
        v = min(use)
    elif how == "mean":
        v = sum(use) / len(use)
    else:
        v = use[0]
    return v, bool(fit)


def others_note(rows, params, used, where):
    """What a cell reduced over: the swept axes that still vary among the rows of one cell (an
    axis zipped with a plotted one does not)."""
    used = [u for u in used if u]
    cells = {}
    for r in rows:
        cells.setdefault(tuple(value_text(r.get(u)) for u in used), []).append(r)
    rest = [p for p in params if p not in used and any(len({value_text(r.get(p)) for r in c}) > 1 for c in cells.values())]
    parts = []
    if where:
        parts.append(", ".join(where))
    if rest:
        parts.append("best over " + ", ".join(rest))
    return "; ".join(parts)


def save(fig, out_dir, name, formats):
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for ext in formats:
        p = os.path.join(out_dir, f"{name}.{ext}")
        fig.savefig(p, dpi=130, bbox_inches="tight")
        paths.append(p)
    plt.close(fig)
    print("wrote " + ", ".join(paths))


def varying_axes(rows, params):
    return [p for p in params if len(axis_values(rows, p)) > 1]


def log_scale_wanted(xs):
    nums = [x for x in xs if isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0]
    return len(nums) == len(xs) and len(nums) >= 3 and max(nums) / min(nums) >= 16


def plot_line(rows, params, a, stem):
    varying = varying_axes(rows, params)
    x = a.x or next((p for p in varying if all(isinstance(v, (int, float)) for v in axis_values(rows, p))),
                    varying[0] if varying else None)
    if x is None:
        print("line: no swept axis with more than one value; skipped")
        return
    series = a.series or next((p for p in varying if p != x and len(axis_values(rows, p)) <= 12), None)
    xs = axis_values(rows, x)
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in xs)
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    groups = axis_values(rows, series) if series else [None]
    k = scale(a.metric)
    first_points = []
    for g in groups:
        sub = [r for r in rows if series is None or r.get(series) == g]
        px, py, hollow = [], [], []
        for i, xv in enumerate(xs):
            v, fits = reduce_cell([r for r in sub if r.get(x) == xv], a.metric, a.reduce)
            if v is None:
                continue
            px.append(xv if numeric else i)
            py.append(v * k)
            hollow.append(not fits)
        if not px:
            continue
        line, = ax.plot(px, py, "-o", label=value_text(g) if series else None)
        first_points.append((px[0], py[0]))
        hx = [p for p, h in zip(px, hollow) if h]
        hy = [q for q, h in zip(py, hollow) if h]
        if hx:
            ax.plot(hx, hy, "o", markerfacecolor="white", markeredgecolor=line.get_color(), zorder=3)
    if a.ideal and numeric and first_points:
        x0, y0 = min(first_points)
        ax.plot(xs, [y0 * v / x0 for v in xs], "--", color="gray", lw=1, label="linear from the first point")
    if numeric and log_scale_wanted(xs):
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs)
        ax.set_xticklabels([value_text(v) for v in xs])
    elif not numeric:
        ax.set_xticks(range(len(xs)))
        ax.set_xticklabels([value_text(v) for v in xs], rotation=30 if len(xs) > 6 else 0)
    ax.set_xlabel(label(x))
    ax.set_ylabel(label(a.metric))
    ax.grid(alpha=0.3)
    note = others_note(rows, params, [x, series], a.where)
    ax.set_title(f"{label(a.metric)} vs {label(x)}" + (f"\n({note}; hollow: does not fit)" if note else "\n(hollow: does not fit)"),
                 fontsize=10)
    if series or a.ideal:
        ax.legend(title=series, fontsize=8, title_fontsize=8)
    save(fig, a.out_dir, f"{stem}-line-{a.metric}-vs-{x}", a.formats)


def plot_heatmap(rows, params, a, stem):
    varying = varying_axes(rows, params)
    x = a.x or (varying[0] if varying else None)
    y = a.y or next((p for p in varying if p != x), None)
    if x is None or y is None:
        print("heatmap: needs two swept axes with more than one value; skipped")
        return
    xs, ys = axis_values(rows, x), axis_values(rows, y)
    k = scale(a.metric)
    grid, fits = [], []
    for yv in ys:
        grow, frow = [], []
        for xv in xs:
            v, f = reduce_cell([r for r in rows if r.get(x) == xv and r.get(y) == yv], a.metric, a.reduce)
            grow.append(float("nan") if v is None else v * k)
            frow.append(f)
        grid.append(grow)
        fits.append(frow)
    longest = max(len(value_text(v)) for v in xs)
    fig, ax = plt.subplots(figsize=(2.0 + max(0.9, 0.09 * longest) * len(xs), 1.4 + 0.55 * len(ys)))
    im = ax.imshow(grid, cmap="viridis", aspect="auto", origin="lower")
    fig.colorbar(im, ax=ax, label=label(a.metric))
    finite = [v for row in grid for v in row if not math.isnan(v)]
    mid = (max(finite) + min(finite)) / 2 if finite else 0
    for i, yv in enumerate(ys):
        for j, xv in enumerate(xs):
            v = grid[i][j]
            if math.isnan(v):
                ax.text(j, i, "error", ha="center", va="center", fontsize=7, color="red")
                continue
            if not fits[i][j]:
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///", edgecolor="white", lw=0))
            ax.text(j, i, compact(v) + ("" if fits[i][j] else "\nOOM"), ha="center", va="center", fontsize=7,
                    color="black" if v > mid else "white")
    ax.set_xticks(range(len(xs)))
    ax.set_xticklabels([value_text(v) for v in xs], rotation=30 if len(xs) > 6 else 0)
    ax.set_yticks(range(len(ys)))
    ax.set_yticklabels([value_text(v) for v in ys])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    note = others_note(rows, params, [x, y], a.where)
    ax.set_title(f"{label(a.metric)}" + (f"\n({note})" if note else "") + "\nhatched: does not fit", fontsize=9)
    save(fig, a.out_dir, f"{stem}-heatmap-{a.metric}-{x}-{y}", a.formats)


def point_label(r, params, varying):
    return ", ".join(value_text(r.get(p)) for p in params if p in varying) or str(r["index"])


def plot_bars(rows, params, a, stem, kind):
    rows = [r for r in rows if not r.get("error")]
    if not rows:
        print(f"{kind}: no row without an error; skipped")
        return
    varying = varying_axes(rows, params)
    if len(rows) > a.max_points:
        print(f"{kind}: {len(rows)} points, plotting the first {a.max_points} by index (narrow with --where)")
        rows = rows[: a.max_points]
    if kind == "memory":
        cats = [c for c in MEMORY_CATEGORIES if any(f"memory.breakdown_bytes.{c}" in r for r in rows)]
        keys = [f"memory.breakdown_bytes.{c}" for c in cats]
        k, unit = 1e9, "GB"
    else:
        keys = sorted({key for r in rows for key in r if key.startswith("time_breakdown_s.")})
        keys = [kk for kk in keys if any((r.get(kk) or 0) > 0 for r in rows)]
        cats = [kk.split(".", 1)[1] for kk in keys]
        k, unit = 1.0, "s"
    fig, ax = plt.subplots(figsize=(max(6.0, 0.38 * len(rows) + 2), 5))
    xs = list(range(len(rows)))
    bottom = [0.0] * len(rows)
    colors = plt.get_cmap("tab10").colors
    for c, key, color in zip(cats, keys, colors):
        vals = [(r.get(key) or 0) / k for r in rows]
        ax.bar(xs, vals, bottom=bottom, label=c, color=color, width=0.8)
        bottom = [b + v for b, v in zip(bottom, vals)]
    if kind == "memory":
        caps = [(r.get("memory.capacity_bytes") or 0) / k for r in rows]
        ax.scatter(xs, caps, marker="_", s=300, color="black", zorder=3, label="capacity")
        req = [(r.get("memory.required_bytes") or 0) / k for r in rows]
        ax.scatter(xs, req, marker="v", s=18, color="dimgray", zorder=3, label="required (+context, fragmentation)")
        for x, r, b in zip(xs, rows, bottom):
            if r.get("fits") is False:
                ax.text(x, max(b, req[x]) * 1.01, "OOM", ha="center", va="bottom", fontsize=6, color="red", rotation=90)
        ax.set_ylabel(f"memory at the peak ({unit})")
        title = "memory at the peak, by category"
    else:
        ax.set_ylabel(f"step time ({unit})")
        title = "where the step time goes"
    ax.set_xticks(xs)
    ax.set_xticklabels([point_label(r, params, varying) for r in rows], rotation=60, ha="right", fontsize=7)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(axis="y", alpha=0.3)
    ax.set_title(title + (f" ({', '.join(a.where)})" if a.where else "") +
                 (f"\npoints: {', '.join(p for p in params if p in varying)}" if varying else ""), fontsize=9)
    save(fig, a.out_dir, f"{stem}-{kind}", a.formats)


def pareto_front(points):
    """Points (cost, value, row) that no other point beats: cheaper-or-equal and faster."""
    front, best = [], -math.inf
    for c, v, r in sorted(points, key=lambda p: (p[0], -p[1])):
        if v > best:
            front.append((c, v, r))
            best = v
    return front


def plot_pareto(rows, params, a, stem):
    prices = dict(DEFAULT_PRICES)
    for p in a.price:
        name, _, usd = p.partition("=")
        try:
            prices[name] = float(usd)
        except ValueError:
            sys.exit(f"--price {p}: expected NAME=USD, e.g. h100-sxm=3.0")
    cost = a.cost
    if cost == "auto":
        cost = "gpus" if len({r.get("gpus") for r in ok_rows(rows)}) > 1 else "usd_per_hour"
    pts = []
    for r in rows:
        if r.get("error") or not r.get("fits") or r.get(a.metric) is None:
            continue
        if cost == "usd_per_hour":
            gpu = r.get("cluster.gpu") or a.gpu
            if gpu not in prices:
                sys.exit(f"pareto: no price for GPU {gpu!r}; pass --price {gpu}=USD (or --gpu NAME when cluster.gpu is not swept)")
            c = prices[gpu] * (r.get("gpus") or 1)
        else:
            c = r.get(cost)
        if c is None:
            continue
        pts.append((c, r[a.metric] * scale(a.metric), r))
    if not pts:
        print("pareto: no point that fits; skipped")
        return
    varying = varying_axes(rows, params)
    front = pareto_front(pts)
    fig, ax = plt.subplots(figsize=(7.5, 5))
    ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=14, color="lightgray", label="points that fit")
    ax.plot([p[0] for p in front], [p[1] for p in front], "-o", color="tab:red", label="Pareto front", zorder=3)
    for c, v, r in front[: a.max_labels]:
        ax.annotate(point_label(r, params, varying), (c, v), textcoords="offset points", xytext=(4, 4), fontsize=6)
    if log_scale_wanted(sorted({p[0] for p in pts})):
        ax.set_xscale("log", base=2)
    ax.set_xlabel(label(cost))
    ax.set_ylabel(label(a.metric))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"{label(a.metric)} against {label(cost)}: the best for the money" +
                 ("\n(illustrative GPU-hour prices; set yours with --price NAME=USD)" if cost == "usd_per_hour" else ""),
                 fontsize=9)
    save(fig, a.out_dir, f"{stem}-pareto-{a.metric}-vs-{cost}", a.formats)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", help="results.csv or results.jsonl from `scaleout sweep`")
    p.add_argument("kind", nargs="?", default="all", choices=["all", "line", "heatmap", "memory", "time", "pareto"])
    p.add_argument("--metric", default="tokens_per_s", help="result field to plot (dotted), default tokens_per_s")
    p.add_argument("--x", help="swept path on the x axis")
    p.add_argument("--y", help="second swept path (heatmap)")
    p.add_argument("--series", help="swept path giving one line per value (line)")
    p.add_argument("--ideal", action="store_true", help="line: draw linear scaling from the first point")
    p.add_argument("--where", action="append", default=[], help="PATH=VALUE: keep only these rows (repeatable)")
    p.add_argument("--reduce", default="max", choices=["max", "min", "mean", "first"],
                   help="how a cell reduces the axes not plotted (default max: the best that fits)")
    p.add_argument("--cost", default="auto", help="pareto x axis: gpus, usd_per_hour, or any result field (default: "
                   "gpus when the GPU count varies, else usd_per_hour)")
    p.add_argument("--price", action="append", default=[], help="NAME=USD per GPU-hour (repeatable)")
    p.add_argument("--gpu", default="h100-sxm", help="GPU priced when cluster.gpu is not swept")
    p.add_argument("--max-points", type=int, default=48, help="bars at most (memory, time)")
    p.add_argument("--max-labels", type=int, default=12, help="labels on the Pareto front at most")
    p.add_argument("--out-dir", default=".", help="folder for the plots")
    p.add_argument("--formats", default="png,svg", help="comma-separated: png,svg,pdf")
    a = p.parse_args()
    a.formats = [f for f in a.formats.split(",") if f]
    rows, params = load(a.results)
    if not rows:
        sys.exit(f"{a.results}: no rows")
    rows = apply_where(rows, a.where)
    if not ok_rows(rows):
        print(f"{a.results}: every row is an error, nothing to plot; first: {rows[0].get('error')}")
        return
    if a.metric not in rows[next(i for i, r in enumerate(rows) if not r.get('error'))]:
        sys.exit(f"--metric {a.metric}: not a result field (try tokens_per_s, mfu, step_time_s, memory.peak_bytes)")
    stem = os.path.splitext(os.path.basename(a.results))[0]
    kinds = ["line", "heatmap", "memory", "time", "pareto"] if a.kind == "all" else [a.kind]
    for k in kinds:
        if k == "line":
            plot_line(rows, params, a, stem)
        elif k == "heatmap":
            plot_heatmap(rows, params, a, stem)
        elif k in ("memory", "time"):
            plot_bars(rows, params, a, stem, k)
        else:
            plot_pareto(rows, params, a, stem)


if __name__ == "__main__":
    main()
