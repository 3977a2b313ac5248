#!/usr/bin/env python3
"""Writes links.json: a SYNTHETIC scaleout-links file for 8 H200 on one NVSwitch node, timed by the
simulator itself (`scaleout collective` with truth-profile.json's link figures) plus 1 % noise, and
cudaMemcpyPeer rows on a line of known latency and bandwidth. Not a measurement: it exists so that
the link fit can be tested end to end (tests/cli/links_cli.sh checks that the fit recovers
truth-profile.json's figures).

    python3 make_synthetic.py path/to/scaleout
"""
import json
import os
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = sys.argv[1]
TRUTH = os.path.join(HERE, "truth-profile.json")
rng = random.Random(6)
FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
          "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n,
          "broadcast": lambda n: 1, "send_recv": lambda n: 1}


def simulate(op, n, algo):
    out = subprocess.run([BIN, "collective", "--cluster", "dgx-h200", "--profile", TRUTH, "--op", op,
                          "--ranks", f"0-{n - 1}", "--algo", algo, "--sizes", "8B:8GiB", "--factor", "4",
                          "--format", "json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def timing(t, size, factor):
    return {"time_s": t, "min_s": t * 0.99, "max_s": t * 1.01, "reps": 5, "inner": 1,
            "algbw_gbps": size / t / 1e9, "busbw_gbps": size / t / 1e9 * factor}


rows = []
for n in (8, 2, 4):
    for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv"):
        if op == "all_reduce":  # NVLS off, as measured: NCCL picks the faster of ring and tree
            ring, tree = simulate(op, n, "ring"), simulate(op, n, "tree")
            sims = {"auto": [min(a, b, key=lambda r: r["time_s"]) for a, b in zip(ring, tree)], "ring": ring,
                    "tree": tree}
        else:
            sims = {"auto": simulate(op, n, "auto")}
        for algo, sim in sims.items():
            for r in sim:
                t = r["time_s"] * (1 + rng.uniform(-0.01, 0.01))
                row = {"op": op, "ranks": list(range(n)), "algorithm": algo, "bytes": int(r["size_bytes"])}
                row.update(timing(t, r["size_bytes"], FACTOR[op](n)))
                rows.append(row)

# cudaMemcpyPeer over NVLink: 8 us + bytes / 370 GB/s; the local copy 4 us + bytes / 1.5 TB/s.
p2p = []
for src in range(8):
    for dst in range(8):
        size = 8
        while size <= 256 << 20:
            lat, bw = (4e-6, 1.5e12) if src == dst else (8e-6, 370e9)
            t = (lat + size / bw) * (1 + rng.uniform(-0.01, 0.01))
            row = {"src": src, "dst": dst, "link": "local" if src == dst else "nvlink", "peer_access": True,
                   "method": "memcpy", "bytes": size}
            row.update(timing(t, size, 1))
            p2p.append(row)
            size *= 16

topo = "\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\n" + "".join(
    f"GPU{i}\t" + "\t".join("X" if i == j else "NV18" for j in range(8)) + "\n" for i in range(8))
doc = {
    "schema": "scaleout-links/1", "kind": "links", "harness": "SYNTHETIC (make_synthetic.py), not a measurement",
    "args": "", "date": "2026-12-03T00:00:00Z", "host": "synthetic", "budget_s": 0, "quick": False,
    "gpu": {"name": "NVIDIA H200", "count": 8, "memory_bytes": 150754820096, "names": ["NVIDIA H200"] * 8,
            "pci_bus_ids": []},
    "driver": "synthetic", "cuda_driver_api": 0, "cuda_runtime": 0, "nccl_version": "synthetic",
    "env": {"NCCL_NVLS_ENABLE": "0"},
    "topology": {"nvidia_smi_topo_m": topo, "link_classes": [["local" if i == j else "nvlink" for j in range(8)]
                                                             for i in range(8)]},
    "elapsed_s": 0, "complete": True,
    "notes": ["SYNTHETIC: timed by scaleout collective with truth-profile.json, 1 % noise"],
    "p2p": p2p, "collectives": rows,
}
with open(os.path.join(HERE, "links.json"), "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
print(f"wrote {len(p2p)} p2p and {len(rows)} collective rows")
