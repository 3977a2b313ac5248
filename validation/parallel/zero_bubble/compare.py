#!/usr/bin/env python3
"""Predicts the zero-bubble paper's runs (published.json) with scaleout and prints them beside the
published throughput: 1F1B against Megatron's 1F1B, ZB-H1 against ZB-1p (equal bubble rates in all
12 settings, Table 5). Nothing here is fitted to these rows.

Usage: validation/parallel/zero_bubble/compare.py [path/to/scaleout] > REPORT.md
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "..", "build", "scaleout")


def scenario(run, schedule):
    p, L = run["gpus"], run["layers"]
    k = (L + 2) // p  # first and last stages hold one fewer layer (the paper's Sec. 5.1)
    split = [k - 1] + [k] * (p - 2) + [k - 1]
    assert sum(split) == L, run
    h = run["hidden"]
    return {
        "name": f"zb-{run['model']}-m{run['micro_batches']}-{schedule}",
        # GPT-3-like (the paper): GPT-2 BPE vocabulary padded by Megatron to a multiple of 128.
        "model": {"arch": "gpt", "layers": L, "hidden": h, "heads": run["heads"], "ffn": 4 * h, "vocab": 50304,
                  "tied_embeddings": True, "max_positions": run["seq"]},
        # 8 A100 SXM 80GB a node (32 GPUs in 4 nodes); RoCE at 200 Gb/s a GPU (the paper gives no speed).
        "cluster": {"gpu": "a100-80g", "nodes": max(1, p // 8), "gpus_per_node": min(8, p), "nic_bandwidth": "200 Gb/s"},
        # Megatron-LM's defaults in 2023 (the repository's scripts pass --fp16; no flash attention or
        # recompute is named by the paper; dropout 0.1).
        "training": {"seq_len": run["seq"], "micro_batch": run["micro_batch"],
                     "global_batch": run["micro_batch"] * run["micro_batches"], "precision": "megatron-fp16",
                     "optimizer": "adamw", "recompute": "none", "attention": "naive", "dropout": 0.1},
        # Megatron's p2p (batch_isend_irecv, wait, torch.cuda.synchronize) holds the stream.
        "parallelism": {"dp": 1, "tp": 1, "pp": p, "pp_schedule": schedule, "layers_per_stage": split,
                        "pipeline_p2p": "blocking"},
    }


def simulate(sc):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(sc, f)
        path = f.name
    try:
        out = subprocess.run([BIN, "run", path, "--format", "json"], check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(path)
    return json.loads(out)


def main():
    data = json.load(open(os.path.join(HERE, "published.json")))
    print("| model | GPUs | m | schedule | published samples/GPU/s | predicted | error | peak memory (paper / simulated) |")
    print("|---|---:|---:|---|---:|---:|---:|---:|")
    errs = {"1F1B": [], "ZB-1p": []}
    gains = []
    for run in data["runs"]:
        pred = {}
        for pub_name, sched, bub_key in (("1F1B", "1f1b", "1F1B"), ("ZB-1p", "zb-h1", "ZB-H1")):
            r = simulate(scenario(run, sched))
            sps = run["micro_batch"] * run["micro_batches"] / r["step_time_s"] / run["gpus"]
            pub = run["samples_per_gpu_s"][pub_name]
            err = (sps - pub) / pub
            errs[pub_name].append(abs(err))
            pred[pub_name] = sps
            print(f"| {run['model']} | {run['gpus']} | {run['micro_batches']} | {pub_name if pub_name == '1F1B' else 'ZB-1p / ZB-H1'} | "
                  f"{pub:.2f} | {sps:.2f} | {100 * err:+.1f}% | "
                  f"{run['memory_gb'][pub_name]} / {r['memory']['peak_bytes'] / 1e9:.0f} GB |")
        gains.append((run, pred["ZB-1p"] / pred["1F1B"] - 1, run["samples_per_gpu_s"]["ZB-1p"] / run["samples_per_gpu_s"]["1F1B"] - 1))
    print()
    for k, v in errs.items():
        print(f"{k}: throughput |error| median {100 * statistics.median(v):.1f} %, worst {100 * max(v):.1f} % over {len(v)} runs")
    print()
    print("| model | m | ZB gain over 1F1B, published | predicted |")
    print("|---|---:|---:|---:|")
    for run, g_pred, g_pub in gains:
        print(f"| {run['model']} | {run['micro_batches']} | {100 * g_pub:+.1f}% | {100 * g_pred:+.1f}% |")
    d = [abs(gp - gb) for _, gp, gb in gains]
    print(f"\nGain |predicted - published|: median {100 * statistics.median(d):.1f} points, worst {100 * max(d):.1f} points")


if __name__ == "__main__":
    main()
