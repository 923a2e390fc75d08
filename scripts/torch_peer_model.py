#!/usr/bin/env python3
"""torch_peer_model.py: the torch half of scripts/torch_peer_step.py (the
PyTorch peer of scaletrain's training step; issue 52, docs/cuda.md): the Llama
model written from docs/model.md, its bf16 AdamW, per-block compile and
recomputation, and the timed steps. torch_peer_step.py resolves the config
first and imports this only for a config it accepted, so bad input is refused
without the seconds torch's import takes.
"""
import importlib
import inspect
import math
import os
import platform
import resource
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

# ---- the model (docs/model.md) ---------------------------------------------


def rmsnorm(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def rope(x, cos, sin):
    """Interleaved pairs (2i, 2i+1) of each head, rotated in fp32; x [B, T, H, hd]."""
    B, T, H, hd = x.shape
    xr = x.float().reshape(B, T, H, hd // 2, 2)
    x0, x1 = xr[..., 0], xr[..., 1]
    c, s = cos[:T, None, :], sin[:T, None, :]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).reshape(B, T, H, hd).to(x.dtype)


HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")


def causal_attention(q, k, v):
    """q [B, H, T, hd], k and v [B, H, T, hd]: causal softmax attention."""
    if HAVE_SDPA:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T, hd = q.shape[-2], q.shape[-1]
    s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(hd)
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return (torch.softmax(s, dim=-1) @ v.float()).to(q.dtype)


class Attention(nn.Module):
    def __init__(self, m, **kw):
        super().__init__()
        self.H, self.Hkv = m["n_heads"], m["n_kv_heads"]
        self.hd = m["d_model"] // self.H
        d = m["d_model"]
        self.wq = nn.Linear(d, self.H * self.hd, bias=False, **kw)
        self.wk = nn.Linear(d, self.Hkv * self.hd, bias=False, **kw)
        self.wv = nn.Linear(d, self.Hkv * self.hd, bias=False, **kw)
        self.wo = nn.Linear(self.H * self.hd, d, bias=False, **kw)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = rope(self.wq(x).view(B, T, self.H, self.hd), cos, sin).transpose(1, 2)
        k = rope(self.wk(x).view(B, T, self.Hkv, self.hd), cos, sin).transpose(1, 2)
        v = self.wv(x).view(B, T, self.Hkv, self.hd).transpose(1, 2)
        rep = self.H // self.Hkv  # consecutive query heads share a kv head
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        o = causal_attention(q, k, v)
        return self.wo(o.transpose(1, 2).reshape(B, T, self.H * self.hd))


class FeedForward(nn.Module):
    def __init__(self, m, **kw):
        super().__init__()
        d, f = m["d_model"], m["ffn_hidden"]
        self.w1 = nn.Linear(d, f, bias=False, **kw)  # gate
        self.w3 = nn.Linear(d, f, bias=False, **kw)  # up
        self.w2 = nn.Linear(f, d, bias=False, **kw)  # down

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Norm(nn.Module):
    def __init__(self, d, eps, **kw):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d, **kw))
        self.eps = eps

    def forward(self, x):
        return rmsnorm(x, self.weight, self.eps)


class Block(nn.Module):
    def __init__(self, m, recompute, **kw):
        super().__init__()
        self.attention_norm = Norm(m["d_model"], m["norm_eps"], **kw)
        self.attention = Attention(m, **kw)
        self.ffn_norm = Norm(m["d_model"], m["norm_eps"], **kw)
        self.feed_forward = FeedForward(m, **kw)
        self.recompute = recompute

    def body(self, h, cos, sin):
        h = h + self.attention(self.attention_norm(h), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))

    def forward(self, h, cos, sin):
        if self.recompute:  # keep the block's input only; recompute the rest in backward
            return checkpoint(self.body, h, cos, sin, use_reentrant=False)
        return self.body(h, cos, sin)


class Llama(nn.Module):
    def __init__(self, m, recompute, **kw):
        super().__init__()
        self.tok_embeddings = nn.Embedding(m["vocab_size"], m["d_model"], **kw)
        self.layers = nn.ModuleList(Block(m, recompute, **kw) for _ in range(m["n_layers"]))
        self.norm = Norm(m["d_model"], m["norm_eps"], **kw)
        self.output = nn.Linear(m["d_model"], m["vocab_size"], bias=False, **kw)
        self.runners = list(self.layers)  # what runs each block: itself or its compiled form

    def forward(self, tokens, targets, cos, sin):
        h = self.tok_embeddings(tokens)
        for run in self.runners:
            h = run(h, cos, sin)
        logits = self.output(self.norm(h))
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def rope_tables(m, T, device):
    hd = m["d_model"] // m["n_heads"]
    i = torch.arange(0, hd, 2, dtype=torch.float64)
    ang = torch.outer(torch.arange(T, dtype=torch.float64), m["rope_theta"] ** (-i / hd))
    return ang.cos().float().to(device), ang.sin().float().to(device)


def build(m, run, device, dtype):
    """The model on `device` (no memory on 'meta'), weights drawn there."""
    kw = {"device": "meta", "dtype": dtype}
    model = Llama(m, run["train.act_ckpt"] == "full", **kw)
    if device == "meta":
        return model
    model = model.to_empty(device=device)
    g = torch.Generator(device=device).manual_seed(run["train.seed"])
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.fill_(1.0)
            else:
                p.normal_(0.0, m["init_std"], generator=g)
    return model


# ---- the step ----------------------------------------------------------------


def make_optimizer(model, run):
    """AdamW, fused where this torch and device take it, else foreach."""
    groups = [{"params": [p for p in model.parameters() if p.dim() >= 2],
               "weight_decay": run["optim.weight_decay"]},
              {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0}]
    hp = {"lr": run["optim.lr"], "betas": (run["optim.beta1"], run["optim.beta2"]),
          "eps": run["optim.eps"]}
    why = ""
    if "fused" in inspect.signature(torch.optim.AdamW).parameters:
        try:
            return torch.optim.AdamW(groups, fused=True, **hp), True, ""
        except (RuntimeError, ValueError) as e:  # a device or dtype fused does not take
            why = f"fused AdamW refused here ({str(e).splitlines()[0][:160]}); "
    else:
        why = f"torch {torch.__version__} has no fused AdamW; "
    return torch.optim.AdamW(groups, foreach=True, **hp), False, why + "foreach"


def compile_blocks(model, want):
    """torch.compile on each block; (whether compiled, a note)."""
    if not want:
        return False, "off (--no-compile)"
    if not hasattr(torch, "compile"):
        return False, f"torch {torch.__version__} has no torch.compile: blocks run eagerly"
    # The blocks share one compiled graph (same code, parameters as inputs);
    # should a torch key entries by block instead, its recompile limit must
    # not send the later blocks back to eager.
    cfg = importlib.import_module("torch._dynamo").config
    for name in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                 "accumulated_recompile_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, max(getattr(cfg, name), 4 * len(model.layers) + 8))
    model.runners = [torch.compile(b) for b in model.layers]
    return True, "per block"


def clip(params, max_norm):
    if max_norm <= 0:
        return
    kw = {"foreach": True} if "foreach" in inspect.signature(
        torch.nn.utils.clip_grad_norm_).parameters else {}
    torch.nn.utils.clip_grad_norm_(params, max_norm, **kw)


def train_step(model, opt, params, batch, cos, sin, run, seen):
    ga = run["train.grad_accum"]
    total = None
    for tokens, targets in batch:
        loss = model(tokens, targets, cos, sin) / ga
        loss.backward()
        total = loss.detach() if total is None else total + loss.detach()
    seen.setdefault("grad_dtype", str(params[0].grad.dtype).replace("torch.", ""))
    clip(params, run["optim.grad_clip"])
    opt.step()
    opt.zero_grad(set_to_none=True)  # the next step's first backward writes, no memset
    return total


def gib(b):
    return b / 2**30


def device_name(device):
    if device == "cuda":
        return torch.cuda.get_device_name()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def count_params(m, run):
    """The parameter count of the model built on the meta device (no memory)."""
    dtype = torch.bfloat16 if run["train.precision"] == "bf16" else torch.float32
    return sum(p.numel() for p in build(m, run, "meta", dtype).parameters())


def measure(m, run, device, steps, warmup, peak_tflops, want_compile, threads):
    """Build, warm up, time `steps` steps; the JSON fields of the measurement."""
    dtype = torch.bfloat16 if run["train.precision"] == "bf16" else torch.float32
    L, d, T = m["n_layers"], m["d_model"], m["seq_len"]
    B, ga = run["train.micro_batch"], run["train.grad_accum"]
    if threads > 0:
        torch.set_num_threads(threads)
    torch.manual_seed(run["train.seed"])
    model = build(m, run, device, dtype)
    params = list(model.parameters())
    n_params = sum(p.numel() for p in params)
    opt, fused, opt_note = make_optimizer(model, run)
    compiled, compile_note = compile_blocks(model, want_compile)
    cos, sin = rope_tables(m, T, device)
    # One fixed batch of ga micro-batches: T+1 tokens per sample, inputs the
    # first T, targets the last T (docs/model.md, Loss).
    g = torch.Generator(device="cpu").manual_seed(run["train.seed"] + 1)
    seqs = torch.randint(0, m["vocab_size"], (ga, B, T + 1), generator=g).to(device)
    batch = [(seqs[i, :, :-1], seqs[i, :, 1:]) for i in range(ga)]
    seen = {}

    def step():
        return train_step(model, opt, params, batch, cos, sin, run, seen)

    cuda = device == "cuda"
    losses, times = [], []
    t_start = time.perf_counter()
    for i in range(warmup):
        try:
            losses.append(step())
        except Exception as e:  # noqa: BLE001: a compile failure falls back, said aloud
            if not compiled or i > 0 or "out of memory" in str(e).lower():
                raise
            first = str(e).splitlines()[0][:300] if str(e) else ""
            compile_note = f"failed at the first step, blocks ran eagerly: {type(e).__name__}: {first}"
            compiled = False
            model.runners = list(model.layers)
            importlib.import_module("torch._dynamo").reset()
            opt.zero_grad(set_to_none=True)
            losses.append(step())
        if cuda:
            torch.cuda.synchronize()
    warmup_s = time.perf_counter() - t_start
    if cuda:
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(steps)]
        for s, e in ev:  # back to back, no host synchronisation inside
            s.record()
            losses.append(step())
            e.record()
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) / 1e3 for s, e in ev]
    else:
        for _ in range(steps):
            t0 = time.perf_counter()
            losses.append(step())
            times.append(time.perf_counter() - t0)
    load_after = os.getloadavg()[0]
    losses = [float(x) for x in losses]
    med = statistics.median(times)
    tokens = B * ga * T
    tok_s = tokens / med
    # lib/metrics/flops.cpp: MPT's 3 x (2 N T + 4 L d T^2) per sequence = 6 N + 12 L d T per token.
    fpt = 6.0 * n_params + 12.0 * L * d * T
    hw = 4.0 / 3.0 if run["train.act_ckpt"] == "full" else 1.0  # the recomputed forward
    peak = peak_tflops * 1e12
    state = opt.state[params[0]]
    out = {
        "torch": torch.__version__, "python": platform.python_version(), "device": device,
        "device_name": device_name(device), "n_params": n_params, "micro_batch": B,
        "grad_accum": ga, "seq_len": T, "tokens_per_step": tokens,
        "precision": run["train.precision"],
        "param_dtype": str(params[0].dtype).replace("torch.", ""),
        "grad_dtype": seen.get("grad_dtype"),
        "optimizer_state_dtype": str(state["exp_avg"].dtype).replace("torch.", ""),
        "optimizer": "AdamW " + ("fused" if fused else "foreach"), "fused": fused,
        "optimizer_note": opt_note, "compile": compiled, "compile_note": compile_note,
        "sdpa": HAVE_SDPA, "act_ckpt": run["train.act_ckpt"],
        "threads": torch.get_num_threads(), "warmup_steps": warmup, "warmup_s": warmup_s,
        "steps": steps, "timer": "cuda events" if cuda else "wall clock",
        "step_s_median": med, "step_s_min": min(times), "step_s_max": max(times),
        "step_s_spread_pct": 100.0 * (max(times) - min(times)) / med, "step_s": times,
        "tokens_per_s": tok_s, "flops_per_token": fpt, "peak_tflops": peak_tflops or None,
        "mfu_pct": 100.0 * tok_s * fpt / peak if peak else None,
        "hfu_pct": 100.0 * tok_s * fpt * hw / peak if peak else None,
        "losses": losses, "loss_first": losses[0], "loss_last": losses[-1],
        "loss_finite": all(math.isfinite(x) for x in losses), "load1_after": load_after,
    }
    if cuda:
        out["peak_memory_gib"] = gib(torch.cuda.max_memory_allocated())
        out["peak_memory_kind"] = "torch.cuda.max_memory_allocated"
        out["peak_reserved_gib"] = gib(torch.cuda.max_memory_reserved())
        out["sdpa_backends_enabled"] = {
            n: getattr(torch.backends.cuda, n + "_sdp_enabled")()
            for n in ("flash", "mem_efficient", "cudnn", "math")
            if hasattr(torch.backends.cuda, n + "_sdp_enabled")}
    else:
        out["peak_memory_gib"] = gib(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
        out["peak_memory_kind"] = "process max RSS"
    return out
