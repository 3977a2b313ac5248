#!/usr/bin/env python3
"""Cross-check of the harness's attention numbers through PyTorch's SDPA.

Times torch.nn.functional.scaled_dot_product_attention (forward, and backward
through autograd) with the cuDNN and the FlashAttention backends forced, on a
few of the harness's configurations (bf16, [batch, heads, seq, head_dim]), and
appends the results to the harness's JSON as "attention" entries with impl
"torch_cudnn" / "torch_flash". Optional: run_on_device.sh calls it when PyTorch
is there; the harness does not need it.

Same conventions as the harness: CUDA events, 2 warm-ups, median of up to 10
repetitions, random inputs, FLOPs 4*b*h*s^2*d forward, 2.5x that backward,
half of it when causal. --sustain-ms N runs each kernel for N ms first, so the
clock settles to what the GPU holds under a steady load (as the harness's
--sustain-ms does), and the SM clock and power are sampled through NVML
(ctypes, when libnvidia-ml is there) while the repetitions run.
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import threading
import time

SUSTAIN_S = 0.0


class ClockSampler:
    """SM clock (median, MHz) and board power (mean, W) every 2 ms through NVML, if it loads."""
    _nvml = None

    @classmethod
    def nvml(cls):
        if cls._nvml is None:
            cls._nvml = False
            try:
                lib = ctypes.CDLL("libnvidia-ml.so.1")
                if lib.nvmlInit_v2() == 0:
                    handle = ctypes.c_void_p()
                    if lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) == 0:
                        cls._nvml = (lib, handle)
            except OSError:
                pass
        return cls._nvml

    def __init__(self):
        self.mhz, self.watts, self.running = [], [], True
        self.thread = None
        if self.nvml():
            self.thread = threading.Thread(target=self.loop, daemon=True)
            self.thread.start()

    def loop(self):
        lib, handle = self.nvml()
        mhz, mw = ctypes.c_uint(), ctypes.c_uint()
        while self.running:
            if lib.nvmlDeviceGetClockInfo(handle, 1, ctypes.byref(mhz)) == 0 and \
                    lib.nvmlDeviceGetPowerUsage(handle, ctypes.byref(mw)) == 0:
                self.mhz.append(mhz.value)
                self.watts.append(mw.value * 1e-3)
            time.sleep(0.002)

    def stop(self):
        self.running = False
        if self.thread:
            self.thread.join()
        if not self.mhz:
            return {}
        return {"sm_clock_mhz": statistics.median(self.mhz), "power_w": statistics.fmean(self.watts),
                "clock_samples": len(self.mhz)}

CONFIGS = [  # (batch, heads, seq, head_dim), priority order
    (2, 32, 4096, 128),
    (1, 64, 16384, 128),
    (4, 16, 2048, 64),
    (1, 32, 8192, 128),
    (8, 16, 512, 64),
]


def flops(b, h, s, d, causal, backward):
    f = 4.0 * b * h * s * s * d
    if causal:
        f *= 0.5
    if backward:
        f *= 2.5
    return f


def time_cuda(torch, fn, max_reps=10, max_s=0.5):
    """Median and min seconds of fn() by CUDA events, after 2 warm-ups."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    est = start.elapsed_time(stop) * 1e-3
    reps = max(3, min(max_reps, int(max_s / max(est, 1e-6))))
    extra = {}
    if SUSTAIN_S > 0:  # run until the clock has settled under a steady load
        sustained = 0.0
        while sustained < SUSTAIN_S:
            n = max(1, int(0.02 / max(est, 1e-6)))
            start.record()
            for _ in range(n):
                fn()
            stop.record()
            stop.synchronize()
            sustained += start.elapsed_time(stop) * 1e-3
        extra["sustained_s"] = sustained
    sampler = ClockSampler()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3)
    extra.update(sampler.stop())
    return statistics.median(times), min(times), reps, extra


def measure(budget_s, quick):
    entries = []
    t0 = time.time()
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except Exception as e:  # no torch, or too old
        return [{"kind": "attention", "impl": "torch", "time_s": None, "error": f"import: {e}"[:300]}], None
    if not torch.cuda.is_available():
        return [{"kind": "attention", "impl": "torch", "time_s": None, "error": "torch sees no GPU"}], torch.__version__
    backends = [("torch_cudnn", SDPBackend.CUDNN_ATTENTION), ("torch_flash", SDPBackend.FLASH_ATTENTION)]
    configs = CONFIGS[:2] if quick else CONFIGS
    for causal in (True, False):
        for (b, h, s, d) in configs:
            for name, backend in backends:
                base = {"kind": "attention", "causal": causal, "batch": b, "heads": h, "seq": s, "head_dim": d,
                        "dtype": "bf16", "impl": name, "layout": "bhsd", "torch_version": torch.__version__}
                if time.time() - t0 > budget_s:
                    print(f"[torch] budget spent, skipping {name} b{b} h{h} s{s} d{d}", file=sys.stderr)
                    continue
                try:
                    q, k, v = (torch.rand(b, h, s, d, device="cuda", dtype=torch.bfloat16) * 2 - 1 for _ in range(3))
                    for t in (q, k, v):
                        t.requires_grad_(True)
                    grad = torch.rand(b, h, s, d, device="cuda", dtype=torch.bfloat16) * 2 - 1
                    with sdpa_kernel([backend]):
                        def fwd():
                            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                        med, mn, reps, extra = time_cuda(torch, lambda: fwd())
                        entries.append(dict(base, **extra, **{"pass": "fwd", "time_s": med, "min_s": mn, "iters": reps,
                                                     "flops": flops(b, h, s, d, causal, False),
                                                     "tflops": flops(b, h, s, d, causal, False) / med / 1e12}))
                        out = fwd()

                        def bwd():
                            torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)

                        med, mn, reps, extra = time_cuda(torch, bwd)
                        entries.append(dict(base, **extra, **{"pass": "bwd", "time_s": med, "min_s": mn, "iters": reps,
                                                     "flops": flops(b, h, s, d, causal, True),
                                                     "tflops": flops(b, h, s, d, causal, True) / med / 1e12}))
                        del out
                    print(f"[torch] {name} {'causal' if causal else 'full'} b{b} h{h} s{s} d{d}: "
                          f"fwd {entries[-2]['tflops']:.1f} bwd {entries[-1]['tflops']:.1f} TFLOP/s", file=sys.stderr)
                except Exception as e:
                    msg = f"{type(e).__name__}: {e}".replace("\n", " ")[:300]
                    entries.append(dict(base, **{"pass": "fwd", "time_s": None, "error": msg}))
                    print(f"[torch] {name} b{b} h{h} s{s} d{d}: {msg}", file=sys.stderr)
                finally:
                    q = k = v = grad = None
                    torch.cuda.empty_cache()
    return entries, torch.__version__


def merge(path, entries, torch_version, elapsed):
    """Appends entries to the harness file, keeping its one-entry-per-line layout."""
    with open(path) as f:
        doc = json.load(f)
    doc.setdefault("measurements", []).extend(entries)
    doc["torch_crosscheck"] = {"torch_version": torch_version, "entries": len(entries), "elapsed_s": elapsed}
    compact = dict(separators=(",", ":"))
    lines = []
    for key, value in doc.items():
        if key != "measurements":
            lines.append(json.dumps(key) + ":" + json.dumps(value, **compact))
    body = "{" + ",\n".join(lines) + ',\n"measurements":[\n'
    body += ",\n".join(json.dumps(m, **compact) for m in doc["measurements"]) + "\n]}\n"
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(body)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--merge", required=True, help="harness output (measurements.json) to append to")
    ap.add_argument("--budget-s", type=float, default=40.0, help="no new configuration starts after this")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sustain-ms", type=float, default=0.0,
                    help="run each kernel this long before timing it (the clock under a steady load)")
    args = ap.parse_args()
    global SUSTAIN_S
    SUSTAIN_S = max(0.0, args.sustain_ms) * 1e-3
    t0 = time.time()
    entries, version = measure(args.budget_s, args.quick)
    merge(args.merge, entries, version, time.time() - t0)
    print(f"[torch] {len(entries)} entries merged into {args.merge} in {time.time() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
