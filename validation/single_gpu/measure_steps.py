#!/usr/bin/env python3
"""Measure real single-GPU training steps (step time, phase times, memory).

Run once on a machine with one CUDA GPU (written for an NVIDIA H200, torch 2.x):

    python3 measure_steps.py --out DIR [--only SUBSTR] [--deadline-s 420] [--list]

Writes DIR/steps.jsonl (one JSON object per config, appended and flushed after
every config) and DIR/env.json (GPU, driver, torch/CUDA versions, memory).
See README.md next to this file for the exact model definition.

The model code below is deliberately plain PyTorch (no transformers, no
downloads) because the simulator models exactly this structure.
"""

import argparse
import datetime
import functools
import gc
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
import traceback

T0 = time.monotonic()

# ---------------------------------------------------------------------------
# Model shapes.
#   arch    layers hidden heads kv_heads ffn    vocab
# ---------------------------------------------------------------------------
MODELS = {
    "gpt2-124m":  ("gpt",   12,  768, 12, 12,  3072,  50257),
    "gpt2-355m":  ("gpt",   24, 1024, 16, 16,  4096,  50257),
    "gpt2-1.5b":  ("gpt",   48, 1600, 25, 25,  6400,  50257),
    "gpt-2.7b":   ("gpt",   32, 2560, 32, 32, 10240,  50257),
    "llama-1b":   ("llama", 16, 2048, 32,  8,  8192, 128256),
    "llama-3b":   ("llama", 28, 3072, 24,  8,  8192, 128256),
    "llama2-7b":  ("llama", 32, 4096, 32, 32, 11008,  32000),
    "llama3-8b":  ("llama", 32, 4096, 32,  8, 14336, 128256),
    "llama2-13b": ("llama", 40, 5120, 40, 40, 13824,  32000),
}

# ---------------------------------------------------------------------------
# Configs, ordered (roughly) from cheap to expensive; intended OOM cases last.
# expect: "" = should fit, "near-limit" = author's rough estimate is within
# ~10-20 GiB of the 140 GiB device, "oom" = designed to run out of memory.
# These expectations are hand estimates, not measurements.
#
#   model         seq   mb  precision     recompute    attention optimizer expect
# ---------------------------------------------------------------------------
CONFIGS = [
    ("gpt2-124m",    512,  4, "bf16-mixed", "none",      "flash", "adamw", ""),
    ("gpt2-124m",   1024,  8, "bf16-mixed", "none",      "flash", "adamw", ""),
    ("gpt2-124m",   1024,  8, "bf16-mixed", "none",      "naive", "adamw", ""),
    ("gpt2-124m",   1024,  8, "bf16",       "none",      "flash", "adamw", ""),
    ("gpt2-124m",   1024,  8, "bf16-mixed", "none",      "flash", "sgd",   ""),
    ("gpt2-124m",   1024,  8, "bf16-mixed", "selective", "naive", "adamw", ""),
    ("gpt2-124m",   1024, 16, "bf16-mixed", "full",      "flash", "adamw", ""),
    ("gpt2-124m",   2048,  8, "bf16-mixed", "none",      "naive", "adamw", ""),
    ("gpt2-124m",   1024, 16, "bf16-mixed", "none",      "flash", "adamw", ""),
    ("gpt2-124m",  32768,  1, "bf16-mixed", "none",      "flash", "adamw", ""),
    ("gpt2-355m",   1024,  8, "bf16-mixed", "none",      "flash", "adamw", ""),
    ("gpt2-355m",   1024,  8, "bf16-mixed", "none",      "naive", "adamw", ""),
    ("gpt2-355m",   1024, 16, "bf16",       "none",      "flash", "adamw", ""),
    ("gpt2-355m",   2048,  4, "bf16-mixed", "full",      "flash", "adamw", ""),
    ("gpt2-355m",   2048,  8, "bf16-mixed", "selective", "naive", "adamw", ""),
    ("gpt2-1.5b",   1024,  4, "bf16-mixed", "none",      "flash", "adamw", ""),
    ("gpt2-1.5b",   1024,  8, "bf16",       "none",      "flash", "adamw", ""),
    ("gpt2-1.5b",   1024,  8, "bf16-mixed", "selective", "naive", "adamw", ""),
    ("gpt2-1.5b",   2048,  8, "bf16-mixed", "full",      "flash", "adamw", ""),
    ("gpt-2.7b",    2048,  4, "bf16-mixed", "none",      "flash", "adamw", ""),
    ("gpt-2.7b",    2048,  4, "bf16-mixed", "none",      "flash", "sgd",   ""),
    ("gpt-2.7b",    2048,  8, "bf16-mixed", "full",      "flash", "adamw", ""),
    ("gpt-2.7b",    4096,  2, "bf16-mixed", "selective", "naive", "adamw", ""),
    ("llama-1b",     512, 16, "bf16-mixed", "none",      "flash", "adamw", ""),
    ("llama-1b",    2048,  4, "bf16-mixed", "none",      "flash", "adamw", ""),
    ("llama-1b",    2048,  2, "bf16-mixed", "none",      "naive", "adamw", ""),
    ("llama-1b",    2048,  8, "bf16",       "none",      "flash", "adamw", ""),
    ("llama-1b",    2048,  4, "bf16",       "none",      "flash", "sgd",   ""),
    ("llama-1b",    4096,  4, "bf16-mixed", "selective", "flash", "adamw", ""),
    ("llama-1b",    4096,  2, "bf16-mixed", "full",      "naive", "adamw", ""),
    ("llama-1b",    8192,  2, "bf16-mixed", "full",      "flash", "adamw", ""),
    ("llama-1b",   16384,  1, "bf16-mixed", "full",      "flash", "adamw", ""),
    ("llama-3b",    2048,  4, "bf16-mixed", "none",      "flash", "adamw", ""),
    ("llama-3b",    2048,  1, "bf16-mixed", "none",      "naive", "adamw", ""),
    ("llama-3b",    2048,  8, "bf16",       "selective", "flash", "adamw", ""),
    ("llama-3b",    4096,  4, "bf16-mixed", "full",      "flash", "adamw", ""),
    ("llama2-7b",   2048,  1, "bf16-mixed", "full",      "flash", "adamw", "near-limit"),
    ("llama2-7b",   2048,  4, "bf16",       "none",      "flash", "adamw", ""),
    ("llama2-7b",   4096,  1, "bf16",       "selective", "naive", "adamw", ""),
    ("llama2-7b",   4096,  4, "bf16",       "full",      "flash", "adamw", ""),
    ("llama3-8b",   2048,  2, "bf16",       "none",      "flash", "adamw", ""),
    ("llama3-8b",   4096,  1, "bf16",       "selective", "flash", "adamw", ""),
    ("llama3-8b",   8192,  1, "bf16",       "full",      "flash", "adamw", ""),
    ("llama2-13b",  2048,  1, "bf16",       "full",      "flash", "adamw", "near-limit"),
    # --- designed to run out of memory on a 141 GB device ---
    ("llama2-7b",   4096,  2, "bf16",       "none",      "naive", "adamw", "oom"),
    ("llama3-8b",   2048,  1, "bf16-mixed", "full",      "flash", "adamw", "oom"),
    ("llama3-8b",   8192,  8, "bf16-mixed", "none",      "flash", "adamw", "oom"),
    ("llama2-13b",  2048,  1, "bf16-mixed", "full",      "flash", "adamw", "oom"),
]

LR = 1e-4
WEIGHT_DECAY = 0.1
SGD_MOMENTUM = 0.9
NORM_EPS = 1e-5
ROPE_THETA = 10000.0
INIT_STD = 0.02
WARMUP_STEPS = 2
MAX_TIMED_STEPS = 5
MIN_TIMED_STEPS = 3
TARGET_TIMED_S = 15.0       # steps longer than 2 s get fewer timed steps
DEADLINE_MARGIN_S = 10.0    # reserved at the end for writing files and exit


def config_id(model, seq, mb, precision, recompute, attention, optimizer):
    cid = f"{model}_s{seq}_b{mb}_{precision.replace('-', '')}_{recompute}_{attention}"
    if optimizer != "adamw":
        cid += f"_{optimizer}"
    return cid


def build_config_list():
    out = []
    for i, row in enumerate(CONFIGS):
        model, seq, mb, precision, recompute, attention, optimizer, expect = row
        arch, layers, hidden, heads, kv_heads, ffn, vocab = MODELS[model]
        assert precision in ("bf16-mixed", "bf16"), row
        assert recompute in ("none", "selective", "full"), row
        assert attention in ("flash", "naive"), row
        assert optimizer in ("adamw", "sgd"), row
        assert hidden % heads == 0 and heads % kv_heads == 0, row
        assert attention != "naive" or seq <= 4096, row
        out.append({
            "index": i,
            "id": config_id(model, seq, mb, precision, recompute, attention, optimizer),
            "model": model,
            "arch": arch,
            "layers": layers,
            "hidden": hidden,
            "heads": heads,
            "kv_heads": kv_heads,
            "ffn": ffn,
            "vocab": vocab,
            "tied_embeddings": arch == "gpt",
            "seq_len": seq,
            "micro_batch": mb,
            "precision": precision,
            "recompute": recompute,
            "attention": attention,
            "optimizer": optimizer,
            "split": "calibration" if i % 4 == 0 else "validation",
            "expect": expect or None,
        })
    ids = [c["id"] for c in out]
    assert len(ids) == len(set(ids)), "duplicate config ids"
    return out


# ---------------------------------------------------------------------------
# Rough, torch-free estimates (used only for --list and deadline budgeting).
# ---------------------------------------------------------------------------
def analytic_params(c):
    h, L, H, KV, f, V = c["hidden"], c["layers"], c["heads"], c["kv_heads"], c["ffn"], c["vocab"]
    hd = h // H
    if c["arch"] == "gpt":
        per = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * f + f) + (f * h + h)
        return V * h + c["seq_len"] * h + L * per + 2 * h
    per = 2 * h + h * H * hd + 2 * h * KV * hd + H * hd * h + 3 * h * f
    return 2 * V * h + L * per + h


def estimate_step_s(c):
    h, L, H, KV, f, V = c["hidden"], c["layers"], c["heads"], c["kv_heads"], c["ffn"], c["vocab"]
    s, b = c["seq_len"], c["micro_batch"]
    hd = h // H
    T = s * b
    if c["arch"] == "gpt":
        mm = L * (4 * h * h + 2 * h * f) + h * V
    else:
        mm = L * (2 * h * H * hd + 2 * h * KV * hd + 3 * h * f) + h * V
    full = c["recompute"] == "full"
    flash = c["attention"] == "flash"
    eff_mm = 250e12 + 350e12 * min(1.0, h / 4096.0)
    t = 2.0 * mm * T * (4 if full else 3) / eff_mm
    attn_fwd = 4.0 * b * s * s * H * hd * L * (0.5 if flash else 1.0)
    t += attn_fwd * (3 + (1 if c["recompute"] != "none" else 0)) / (300e12 if flash else 150e12)
    mixed = c["precision"] == "bf16-mixed"
    t += L * T * h * 60 * 3 * (1.5 if mixed else 1.0) * (1.33 if full else 1.0) / 3.0e12
    if not flash:
        t += b * H * s * s * L * 30 * (1.33 if c["recompute"] != "none" else 1.0) / 3.0e12
    t += T * V * 30 / 3.0e12
    P = analytic_params(c)
    if c["optimizer"] == "adamw":
        t += P * (64 if mixed else 32) / 3.0e12
    else:
        t += P * (28 if mixed else 14) / 3.0e12
    if mixed:
        t += P * 6 * (2 if full else 1) / 3.0e12
    t += 0.004 + L * 0.0012
    return t


def planned_timed_steps(step_s):
    if step_s <= 2.0:
        return MAX_TIMED_STEPS
    return max(MIN_TIMED_STEPS, min(MAX_TIMED_STEPS, int(TARGET_TIMED_S // step_s)))


def estimate_config_s(c, max_timed=MAX_TIMED_STEPS):
    P = analytic_params(c)
    build = 1.0 + P * 4 / 50e9 + (P * 6 / 50e9 if c["precision"] == "bf16" else 0.0)
    if c["expect"] == "oom":
        return build + 3.0      # fails in the first warm-up step
    st = estimate_step_s(c)
    n = min(max_timed, planned_timed_steps(st))
    return build + 1.5 + st * (WARMUP_STEPS + n) + 0.5


# ---------------------------------------------------------------------------
# Deadline
# ---------------------------------------------------------------------------
class DeadlineExceeded(Exception):
    pass


def _alarm_handler(signum, frame):
    raise DeadlineExceeded("hard deadline reached (SIGALRM)")


def arm_alarm(hard_deadline):
    try:
        secs = max(0.05, hard_deadline - time.monotonic())
        signal.setitimer(signal.ITIMER_REAL, secs)
    except Exception:
        pass


def disarm_alarm():
    try:
        signal.setitimer(signal.ITIMER_REAL, 0)
    except Exception:
        pass


# ---------------------------------------------------------------------------
# Output helpers
# ---------------------------------------------------------------------------
def append_jsonl(path, obj):
    with open(path, "a") as fh:
        fh.write(json.dumps(obj, sort_keys=False) + "\n")
        fh.flush()
        try:
            os.fsync(fh.fileno())
        except OSError:
            pass


def write_json_atomic(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(obj, fh, indent=2, sort_keys=False)
        fh.write("\n")
        fh.flush()
        try:
            os.fsync(fh.fileno())
        except OSError:
            pass
    os.replace(tmp, path)


def run_nvidia_smi():
    q = "name,driver_version,clocks.sm,clocks.max.sm,memory.total"
    try:
        p = subprocess.run(
            ["nvidia-smi", f"--query-gpu={q}", "--format=csv"],
            capture_output=True, text=True, timeout=30)
        res = {"returncode": p.returncode, "stdout": p.stdout.strip(), "stderr": p.stderr.strip()[:500]}
        lines = [ln for ln in p.stdout.strip().splitlines() if ln.strip()]
        if p.returncode == 0 and len(lines) >= 2:
            keys = [k.strip() for k in lines[0].split(",")]
            res["gpus"] = [dict(zip(keys, [v.strip() for v in ln.split(",")])) for ln in lines[1:]]
        return res
    except Exception as e:  # nvidia-smi missing, timeout, ...
        return {"error": repr(e)}


def fmt_gib(x):
    return "   -   " if x is None else f"{x / 2**30:7.2f}"


def fmt_ms(x):
    return "    -   " if x is None else f"{x * 1e3:8.1f}"


# ---------------------------------------------------------------------------
# Model definition (needs torch; defined lazily so --list works without it)
# ---------------------------------------------------------------------------
def define_model(torch):
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint
    from torch.nn.attention import sdpa_kernel, SDPBackend

    class Aux:
        """Shared per-model tensors. A plain object, not an nn.Module, so that
        model.to(torch.bfloat16) leaves the fp32 cos/sin and the bool mask alone."""

        def __init__(self, cfg):
            s = cfg["seq_len"]
            self.attention = cfg["attention"]
            self.recompute = cfg["recompute"]
            self.cos = self.sin = None
            self.mask = None
            if cfg["arch"] == "llama":
                hd = cfg["hidden"] // cfg["heads"]
                inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
                t = torch.arange(s, dtype=torch.float32)
                freqs = torch.outer(t, inv_freq)
                emb = torch.cat((freqs, freqs), dim=-1)          # (s, hd), fp32
                self.cos = emb.cos()
                self.sin = emb.sin()
            if cfg["attention"] == "naive":
                # True above the diagonal = positions that must not be attended.
                self.mask = torch.ones(s, s, dtype=torch.bool).triu(1)

    def attention_core(q, k, v, mask, kind):
        """q, k, v: (b, heads, s, hd). Returns (b, heads, s, hd)."""
        if kind == "flash":
            # The context is inside the function so a checkpoint recompute
            # (which runs in backward) is also forced onto flash.
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        # naive: materialises the (b, heads, s, s) scores; autograd keeps the
        # fp32 softmax output and its bf16 copy (probs) for backward.
        scores = (q @ k.transpose(-2, -1)) * (q.size(-1) ** -0.5)
        scores.masked_fill_(mask, float("-inf"))
        probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
        return probs @ v

    def run_attention_core(q, k, v, aux):
        if aux.recompute == "selective":
            return checkpoint(attention_core, q, k, v, aux.mask, aux.attention, use_reentrant=False)
        return attention_core(q, k, v, aux.mask, aux.attention)

    class GPTBlock(nn.Module):
        def __init__(self, h, heads, ffn, aux):
            super().__init__()
            self.heads = heads
            self.aux = aux
            self.ln1 = nn.LayerNorm(h, eps=NORM_EPS)
            self.qkv = nn.Linear(h, 3 * h)
            self.proj = nn.Linear(h, h)
            self.ln2 = nn.LayerNorm(h, eps=NORM_EPS)
            self.fc1 = nn.Linear(h, ffn)
            self.fc2 = nn.Linear(ffn, h)

        def forward(self, x):
            b, s, h = x.shape
            hd = h // self.heads
            q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
            q = q.view(b, s, self.heads, hd).transpose(1, 2)
            k = k.view(b, s, self.heads, hd).transpose(1, 2)
            v = v.view(b, s, self.heads, hd).transpose(1, 2)
            y = run_attention_core(q, k, v, self.aux)
            y = y.transpose(1, 2).reshape(b, s, h)
            x = x + self.proj(y)
            x = x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))
            return x

    class RMSNorm(nn.Module):
        def __init__(self, h, eps=NORM_EPS):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(h))
            self.eps = eps

        def forward(self, x):
            xf = x.float()
            xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
            return self.weight * xf.to(x.dtype)

    def rotate_half(x):
        half = x.shape[-1] // 2
        x1 = x[..., :half]
        x2 = x[..., half:]
        return torch.cat((-x2, x1), dim=-1)

    class LlamaBlock(nn.Module):
        def __init__(self, h, heads, kv_heads, ffn, aux):
            super().__init__()
            self.heads = heads
            self.kv_heads = kv_heads
            self.hd = h // heads
            self.aux = aux
            self.input_layernorm = RMSNorm(h)
            self.q_proj = nn.Linear(h, heads * self.hd, bias=False)
            self.k_proj = nn.Linear(h, kv_heads * self.hd, bias=False)
            self.v_proj = nn.Linear(h, kv_heads * self.hd, bias=False)
            self.o_proj = nn.Linear(heads * self.hd, h, bias=False)
            self.post_attention_layernorm = RMSNorm(h)
            self.gate_proj = nn.Linear(h, ffn, bias=False)
            self.up_proj = nn.Linear(h, ffn, bias=False)
            self.down_proj = nn.Linear(ffn, h, bias=False)

        def forward(self, x):
            b, s, _ = x.shape
            a = self.input_layernorm(x)
            q = self.q_proj(a).view(b, s, self.heads, self.hd).transpose(1, 2)
            k = self.k_proj(a).view(b, s, self.kv_heads, self.hd).transpose(1, 2)
            v = self.v_proj(a).view(b, s, self.kv_heads, self.hd).transpose(1, 2)
            cos = self.aux.cos.to(q.dtype)
            sin = self.aux.sin.to(q.dtype)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            if self.kv_heads < self.heads:
                rep = self.heads // self.kv_heads
                k = k.repeat_interleave(rep, dim=1)     # materialised, as HF repeat_kv
                v = v.repeat_interleave(rep, dim=1)
            y = run_attention_core(q, k, v, self.aux)
            y = y.transpose(1, 2).reshape(b, s, self.heads * self.hd)
            x = x + self.o_proj(y)
            m = self.post_attention_layernorm(x)
            x = x + self.down_proj(F.silu(self.gate_proj(m)) * self.up_proj(m))
            return x

    def run_blocks(blocks, x, recompute):
        for blk in blocks:
            if recompute == "full":
                x = checkpoint(blk, x, use_reentrant=False)
            else:
                x = blk(x)
        return x

    class GPT(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            h, V = cfg["hidden"], cfg["vocab"]
            self.aux = Aux(cfg)
            self.recompute = cfg["recompute"]
            self.wte = nn.Embedding(V, h)
            self.wpe = nn.Embedding(cfg["seq_len"], h)
            self.blocks = nn.ModuleList(
                [GPTBlock(h, cfg["heads"], cfg["ffn"], self.aux) for _ in range(cfg["layers"])])
            self.ln_f = nn.LayerNorm(h, eps=NORM_EPS)
            self.lm_head = nn.Linear(h, V, bias=False)
            self.lm_head.weight = self.wte.weight     # tied

        def forward(self, idx, targets):
            s = idx.shape[1]
            pos = torch.arange(s, device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            x = run_blocks(self.blocks, x, self.recompute)
            x = self.ln_f(x)
            logits = self.lm_head(x)
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    class Llama(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            h, V = cfg["hidden"], cfg["vocab"]
            self.aux = Aux(cfg)
            self.recompute = cfg["recompute"]
            self.embed_tokens = nn.Embedding(V, h)
            self.blocks = nn.ModuleList(
                [LlamaBlock(h, cfg["heads"], cfg["kv_heads"], cfg["ffn"], self.aux)
                 for _ in range(cfg["layers"])])
            self.norm = RMSNorm(h)
            self.lm_head = nn.Linear(h, V, bias=False)   # untied

        def forward(self, idx, targets):
            x = self.embed_tokens(idx)
            x = run_blocks(self.blocks, x, self.recompute)
            x = self.norm(x)
            logits = self.lm_head(x)
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    def init_weights(model):
        with torch.no_grad():
            for mod in model.modules():
                if isinstance(mod, (nn.Linear, nn.Embedding)):
                    mod.weight.normal_(0.0, INIT_STD)
                    if getattr(mod, "bias", None) is not None:
                        mod.bias.zero_()
                elif isinstance(mod, nn.LayerNorm):
                    mod.weight.fill_(1.0)
                    mod.bias.zero_()
                elif isinstance(mod, RMSNorm):
                    mod.weight.fill_(1.0)

    def build(cfg):
        with torch.device("cuda"):
            model = GPT(cfg) if cfg["arch"] == "gpt" else Llama(cfg)
        init_weights(model)
        if cfg["precision"] == "bf16":
            model = model.to(torch.bfloat16)
            # drop the cached fp32 construction blocks so they cannot fragment
            # the allocator for the measured steps
            gc.collect()
            torch.cuda.empty_cache()
        return model

    return build


# ---------------------------------------------------------------------------
# Optimizer implementation probe: wrap the functional implementations so we
# can see which one torch's default choice actually calls.
# ---------------------------------------------------------------------------
_OPT_IMPL = {"last": None}


def install_optimizer_probes():
    import importlib
    specs = (
        ("torch.optim.adam", ("_single_tensor_adam", "_multi_tensor_adam", "_fused_adam")),
        ("torch.optim.adamw", ("_single_tensor_adamw", "_multi_tensor_adamw", "_fused_adamw")),
        ("torch.optim.sgd", ("_single_tensor_sgd", "_multi_tensor_sgd", "_fused_sgd")),
    )
    installed = []
    for modname, names in specs:
        try:
            mod = importlib.import_module(modname)
        except Exception:
            continue
        for name in names:
            fn = getattr(mod, name, None)
            if fn is None or not callable(fn) or getattr(fn, "_measure_probe", False):
                continue

            def make(fn=fn, label=name):
                @functools.wraps(fn)
                def wrapper(*a, **k):
                    _OPT_IMPL["last"] = label
                    return fn(*a, **k)
                wrapper._measure_probe = True
                return wrapper
            try:
                setattr(mod, name, make())
                installed.append(f"{modname}.{name}")
            except Exception:
                pass
    return installed


def default_impl_guess(torch, params):
    try:
        from torch.optim.optimizer import _default_to_fused_or_foreach
        fused, foreach = _default_to_fused_or_foreach(params, False, False)
        return "fused" if fused else ("foreach" if foreach else "single_tensor")
    except Exception as e:
        return f"unknown ({type(e).__name__})"


# ---------------------------------------------------------------------------
# Measurement
# ---------------------------------------------------------------------------
RESULT_KEYS_NULL = [
    "params", "oom_phase", "step_time_s", "fwd_s", "bwd_s", "opt_s",
    "peak_allocated_bytes", "persistent_allocated_bytes", "peak_reserved_bytes", "error",
]


def base_row(cfg, run_id):
    row = {k: cfg[k] for k in (
        "id", "arch", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab",
        "tied_embeddings", "seq_len", "micro_batch", "precision", "recompute",
        "attention", "optimizer")}
    row.update({k: None for k in RESULT_KEYS_NULL})
    row["oom"] = False
    row["step_times_s"] = []
    row.update({
        "split": cfg["split"],
        "index": cfg["index"],
        "model": cfg["model"],
        "expect": cfg["expect"],
        "skipped": False,
        "run_id": run_id,
        "params_analytic": analytic_params(cfg),
        "optimizer_impl": None,
        "optimizer_impl_default_guess": None,
        "n_timed_steps": 0,
        "n_timed_planned": None,
        "deadline_truncated": False,
        "warmup_step_times_s": [],
        "warmup_peak_allocated_bytes": None,
        "allocated_after_zero_grad_bytes": None,
        "peak_fwd_allocated_bytes": None,
        "peak_bwd_allocated_bytes": None,
        "peak_opt_allocated_bytes": None,
        "fwd_times_s": [], "bwd_times_s": [], "opt_times_s": [],
        "cpu_step_times_s": [],
        "tokens_per_s": None,
        "loss": None,
        "allocated_at_start_bytes": None,
        "build_s": None,
        "config_wall_s": None,
        "est_step_s": round(estimate_step_s(cfg), 4),
    })
    return row


def is_oom(torch, e):
    types = tuple(t for t in (getattr(torch, "OutOfMemoryError", None),
                              getattr(torch.cuda, "OutOfMemoryError", None)) if t is not None)
    if types and isinstance(e, types):
        return True
    msg = str(e).lower()
    return ("out of memory" in msg) or ("cublas_status_alloc_failed" in msg)


def run_one(torch, build, cfg, row, st, phase, hard_deadline, max_timed):
    """Fills row in place; big objects are kept in st so the caller can free them."""
    cuda = torch.cuda
    row["allocated_at_start_bytes"] = cuda.memory_allocated()

    phase[0] = "build"
    tb = time.monotonic()
    torch.manual_seed(1234 + cfg["index"])
    st["model"] = build(cfg)
    model = st["model"]
    row["params"] = sum(p.numel() for p in model.parameters())
    params = list(model.parameters())
    phase[0] = "optimizer_init"
    if cfg["optimizer"] == "adamw":
        st["opt"] = torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)
    else:
        st["opt"] = torch.optim.SGD(params, lr=LR, momentum=SGD_MOMENTUM)
    opt = st["opt"]
    del params
    row["optimizer_impl_default_guess"] = default_impl_guess(torch, list(model.parameters()))
    phase[0] = "inputs"
    b, s, V = cfg["micro_batch"], cfg["seq_len"], cfg["vocab"]
    st["idx"] = torch.randint(0, V, (b, s), device="cuda")
    st["tgt"] = torch.randint(0, V, (b, s), device="cuda")
    idx, tgt = st["idx"], st["tgt"]
    cuda.synchronize()
    row["build_s"] = round(time.monotonic() - tb, 3)

    mixed = cfg["precision"] == "bf16-mixed"

    def step(label, record):
        ev = [cuda.Event(enable_timing=True) for _ in range(4)]
        pk = {}
        c0 = time.perf_counter()
        phase[0] = f"{label}:forward"
        ev[0].record()
        opt.zero_grad(set_to_none=True)
        if record:
            pk["after_zero_grad"] = cuda.memory_allocated()
        if mixed:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(idx, tgt)
        else:
            loss = model(idx, tgt)
        ev[1].record()
        pk["fwd"] = cuda.max_memory_allocated()
        pk["fwd_r"] = cuda.max_memory_reserved()
        cuda.reset_peak_memory_stats()
        phase[0] = f"{label}:backward"
        loss.backward()
        ev[2].record()
        pk["bwd"] = cuda.max_memory_allocated()
        pk["bwd_r"] = cuda.max_memory_reserved()
        cuda.reset_peak_memory_stats()
        phase[0] = f"{label}:optimizer"
        opt.step()
        ev[3].record()
        pk["opt"] = cuda.max_memory_allocated()
        pk["opt_r"] = cuda.max_memory_reserved()
        cuda.reset_peak_memory_stats()
        phase[0] = f"{label}:sync"
        cuda.synchronize()
        cpu = time.perf_counter() - c0
        t = [ev[i].elapsed_time(ev[i + 1]) / 1e3 for i in range(3)]
        st["loss"] = loss
        return ev[0].elapsed_time(ev[3]) / 1e3, t, pk, cpu

    # ---- warm-up (step 1 creates the optimizer state lazily) ----
    _OPT_IMPL["last"] = None
    cuda.reset_peak_memory_stats()
    warm_peak = 0
    last_warm = None
    for w in range(WARMUP_STEPS):
        if w > 0 and last_warm is not None and time.monotonic() + last_warm * 1.2 > hard_deadline:
            raise DeadlineExceeded("deadline before warm-up step %d" % (w + 1))
        total, _, pk, _ = step(f"warmup{w + 1}", False)
        warm_peak = max(warm_peak, pk["fwd"], pk["bwd"], pk["opt"])
        row["warmup_step_times_s"].append(round(total, 6))
        last_warm = total
    row["warmup_peak_allocated_bytes"] = warm_peak
    row["optimizer_impl"] = _OPT_IMPL["last"]

    # ---- timed steps ----
    n_plan = min(max_timed, planned_timed_steps(last_warm))
    row["n_timed_planned"] = n_plan
    cuda.reset_peak_memory_stats()
    peak_a = peak_r = 0
    pf = pb = po = 0
    for i in range(n_plan):
        if time.monotonic() + last_warm * 1.25 + 1.0 > hard_deadline:
            row["deadline_truncated"] = True
            break
        if i == 0:
            row["persistent_allocated_bytes"] = cuda.memory_allocated()
        total, (tf, tbw, to), pk, cpu = step(f"timed{i + 1}", i == 0)
        if i == 0:
            row["allocated_after_zero_grad_bytes"] = pk["after_zero_grad"]
        row["step_times_s"].append(round(total, 6))
        row["fwd_times_s"].append(round(tf, 6))
        row["bwd_times_s"].append(round(tbw, 6))
        row["opt_times_s"].append(round(to, 6))
        row["cpu_step_times_s"].append(round(cpu, 6))
        pf, pb, po = max(pf, pk["fwd"]), max(pb, pk["bwd"]), max(po, pk["opt"])
        peak_a = max(peak_a, pf, pb, po)
        peak_r = max(peak_r, pk["fwd_r"], pk["bwd_r"], pk["opt_r"])
        last_warm = total
        row["_peaks"] = (peak_a, peak_r, pf, pb, po)

    if not row["step_times_s"]:
        raise DeadlineExceeded("no time left for timed steps")
    finalize_timed(row)
    phase[0] = "loss_item"
    try:
        lv = float(st["loss"].item())
        row["loss"] = lv if math.isfinite(lv) else str(lv)
    except Exception:
        pass
    phase[0] = "done"


def finalize_timed(row):
    """Medians and peaks from whatever timed steps finished (also after a
    deadline or error in a later timed step)."""
    n = len(row["step_times_s"])
    row["n_timed_steps"] = n
    peaks = row.pop("_peaks", None)
    if n == 0:
        return
    b, s = row["micro_batch"], row["seq_len"]
    row["step_time_s"] = statistics.median(row["step_times_s"])
    row["fwd_s"] = statistics.median(row["fwd_times_s"])
    row["bwd_s"] = statistics.median(row["bwd_times_s"])
    row["opt_s"] = statistics.median(row["opt_times_s"])
    row["tokens_per_s"] = round(b * s / row["step_time_s"], 1)
    if peaks is None:
        return
    peak_a, peak_r, pf, pb, po = peaks
    row["peak_allocated_bytes"] = peak_a
    row["peak_reserved_bytes"] = peak_r
    row["peak_fwd_allocated_bytes"] = pf
    row["peak_bwd_allocated_bytes"] = pb
    row["peak_opt_allocated_bytes"] = po


def free_all(torch, st):
    st.clear()
    gc.collect()
    try:
        torch.cuda.synchronize()
    except Exception:
        pass
    try:
        torch.cuda.empty_cache()
    except Exception:
        pass


def print_line(k, n, row, elapsed):
    if row.get("skipped"):
        status = "SKIP"
    elif row["oom"]:
        status = f"OOM@{row['oom_phase']}"
    elif row["error"]:
        status = "ERR"
    else:
        status = "ok" + ("(trunc)" if row.get("deadline_truncated") else "")
    tag = "cal" if row["split"] == "calibration" else "val"
    print(f"[{k:2d}/{n} {elapsed:5.0f}s] {row['id']:<48s} {status:<22s} "
          f"step{fmt_ms(row['step_time_s'])} ms  f{fmt_ms(row['fwd_s'])} b{fmt_ms(row['bwd_s'])} "
          f"o{fmt_ms(row['opt_s'])}  peak {fmt_gib(row['peak_allocated_bytes'])} GiB  "
          f"pers {fmt_gib(row['persistent_allocated_bytes'])} GiB  {tag}", flush=True)
    if row["error"] and not row["oom"] and not row.get("skipped"):
        print(f"      error: {row['error'][:300]}", flush=True)


def collect_env(torch, args, run_id, installed_probes):
    env = {
        "run_id": run_id,
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "hostname": platform.node(),
        "python": sys.version,
        "platform": platform.platform(),
        "argv": sys.argv,
        "deadline_s": args.deadline_s,
        "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "nvidia_smi": run_nvidia_smi(),
        "optimizer_probes_installed": installed_probes,
    }
    try:
        env["torch_version"] = torch.__version__
        env["torch_cuda_version"] = torch.version.cuda
        env["cudnn_version"] = torch.backends.cudnn.version()
        env["cuda_available"] = torch.cuda.is_available()
    except Exception as e:
        env["torch_error"] = repr(e)
    try:
        props = torch.cuda.get_device_properties(0)
        env["gpu_name"] = props.name
        env["total_memory_bytes"] = props.total_memory
        env["compute_capability"] = f"{props.major}.{props.minor}"
        env["multi_processor_count"] = props.multi_processor_count
        for attr in ("L2_cache_size", "max_threads_per_multi_processor", "uuid"):
            if hasattr(props, attr):
                env[attr] = str(getattr(props, attr)) if attr == "uuid" else getattr(props, attr)
        free, total = torch.cuda.mem_get_info()
        env["mem_get_info_free_bytes"] = free
        env["mem_get_info_total_bytes"] = total
    except Exception as e:
        env["device_error"] = repr(e)
    try:
        env["flash_sdp_enabled"] = torch.backends.cuda.flash_sdp_enabled()
        env["mem_efficient_sdp_enabled"] = torch.backends.cuda.mem_efficient_sdp_enabled()
        env["cudnn_sdp_enabled"] = torch.backends.cuda.cudnn_sdp_enabled()
        env["matmul_allow_tf32"] = torch.backends.cuda.matmul.allow_tf32
        env["matmul_allow_bf16_reduced_precision_reduction"] = (
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction)
    except Exception as e:
        env["backend_flags_error"] = repr(e)
    return env


def list_configs(cfgs):
    total = 0.0
    print(f"{'#':>3} {'split':<11} {'id':<48} {'params':>8} {'est step':>9} {'est cfg':>8}  expect")
    for c in cfgs:
        e = estimate_config_s(c)
        total += e
        print(f"{c['index']:3d} {c['split']:<11} {c['id']:<48} {analytic_params(c) / 1e9:7.2f}B "
              f"{estimate_step_s(c):8.3f}s {e:7.1f}s  {c['expect'] or ''}")
    print(f"{len(cfgs)} configs, rough estimated total {total:.0f} s "
          f"(+ ~10-20 s for torch import and CUDA init)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="output directory (steps.jsonl, env.json)")
    ap.add_argument("--only", default=None, help="run only configs whose id contains SUBSTR")
    ap.add_argument("--deadline-s", type=float, default=420.0,
                    help="wall-clock budget for the whole run, from process start")
    ap.add_argument("--list", action="store_true", help="print the config table and exit")
    args = ap.parse_args()

    cfgs = build_config_list()
    if args.only:
        cfgs = [c for c in cfgs if args.only in c["id"]]
    if args.list:
        list_configs(cfgs)
        return 0
    if not args.out:
        ap.error("--out DIR is required (unless --list)")
    if not cfgs:
        print(f"no config id contains {args.only!r}", file=sys.stderr)
        return 1

    os.makedirs(args.out, exist_ok=True)
    steps_path = os.path.join(args.out, "steps.jsonl")
    env_path = os.path.join(args.out, "env.json")
    run_id = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    hard_deadline = T0 + args.deadline_s - DEADLINE_MARGIN_S
    if os.path.exists(steps_path):
        print(f"note: {steps_path} exists; appending (rows carry run_id={run_id})", flush=True)

    import torch  # noqa: E402  (imported late so --list works without torch)

    if not torch.cuda.is_available():
        write_json_atomic(env_path, {"run_id": run_id, "error": "CUDA not available",
                                     "torch_version": getattr(torch, "__version__", None),
                                     "nvidia_smi": run_nvidia_smi()})
        print("CUDA not available", file=sys.stderr)
        return 2

    torch.cuda.init()
    torch.zeros(1, device="cuda")     # create the context now, not inside the first config
    installed = []
    try:
        installed = install_optimizer_probes()
    except Exception:
        pass
    env = collect_env(torch, args, run_id, installed)
    env["startup_s"] = round(time.monotonic() - T0, 2)
    write_json_atomic(env_path, env)
    print(f"{env.get('gpu_name')}  torch {env.get('torch_version')}  cuda {env.get('torch_cuda_version')}  "
          f"total {fmt_gib(env.get('total_memory_bytes'))} GiB  startup {env['startup_s']} s  "
          f"{len(cfgs)} configs -> {steps_path}", flush=True)

    try:
        build = define_model(torch)
    except Exception as e:
        env["define_model_error"] = repr(e)
        write_json_atomic(env_path, env)
        print(f"model definition failed: {e!r}", file=sys.stderr)
        return 3

    signal.signal(signal.SIGALRM, _alarm_handler)
    counts = {"ok": 0, "oom": 0, "error": 0, "skipped": 0}
    n = len(cfgs)
    for k, cfg in enumerate(cfgs, 1):
        row = base_row(cfg, run_id)
        now = time.monotonic()
        rest = cfgs[k:]
        # Budget: the cheap designed-OOM configs at the end are kept; if the
        # remaining estimate does not fit, fall back to MIN_TIMED_STEPS.
        reserve = sum(estimate_config_s(c) for c in rest if c["expect"] == "oom")
        need_all = estimate_config_s(cfg) + sum(estimate_config_s(c) for c in rest)
        max_timed = MAX_TIMED_STEPS if now + need_all <= hard_deadline else MIN_TIMED_STEPS
        est = estimate_config_s(cfg, max_timed)
        row["budget_tight"] = max_timed < MAX_TIMED_STEPS
        if now + est + (0.0 if cfg["expect"] == "oom" else reserve) > hard_deadline:
            row["skipped"] = True
            row["error"] = (f"skipped: deadline (remaining {hard_deadline - now:.1f} s, "
                            f"estimated {est:.1f} s, reserved {reserve:.1f} s for OOM configs)")
            counts["skipped"] += 1
            append_jsonl(steps_path, row)
            print_line(k, n, row, now - T0)
            continue

        st = {}
        phase = ["start"]
        t_cfg = time.monotonic()
        try:
            try:
                arm_alarm(hard_deadline)
                run_one(torch, build, cfg, row, st, phase, hard_deadline, max_timed)
            finally:
                disarm_alarm()
        except KeyboardInterrupt:
            row["error"] = f"interrupted in phase {phase[0]}"
            free_all(torch, st)
            append_jsonl(steps_path, row)
            raise
        except BaseException as e:  # noqa: BLE001 - every config must be recorded
            disarm_alarm()
            if is_oom(torch, e):
                row["oom"] = True
                row["oom_phase"] = phase[0]
                row["error"] = f"{type(e).__name__}: {str(e)[:400]}"
            elif isinstance(e, DeadlineExceeded):
                row["error"] = f"deadline: {e} (phase {phase[0]})"
            else:
                row["error"] = (f"{type(e).__name__} in phase {phase[0]}: {str(e)[:400]} | "
                                + traceback.format_exc(limit=3)[-600:])
            del e
            try:
                finalize_timed(row)   # keep any timed steps that did finish
            except Exception:
                pass
        row.pop("_peaks", None)
        try:
            row["config_wall_s"] = round(time.monotonic() - t_cfg, 3)
            free_all(torch, st)
            row["allocated_after_free_bytes"] = torch.cuda.memory_allocated()
        except BaseException as e:  # noqa: BLE001
            row["cleanup_error"] = repr(e)
        if row["oom"]:
            counts["oom"] += 1
        elif row["error"]:
            counts["error"] += 1
        else:
            counts["ok"] += 1
        append_jsonl(steps_path, row)
        print_line(k, n, row, time.monotonic() - T0)

    env["finished_utc"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
    env["total_wall_s"] = round(time.monotonic() - T0, 2)
    env["counts"] = counts
    env["nvidia_smi_end"] = run_nvidia_smi()
    try:
        write_json_atomic(env_path, env)
    except Exception as e:
        print(f"could not rewrite env.json: {e!r}", file=sys.stderr)
    print(f"done in {env['total_wall_s']} s: {counts}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
