#!/usr/bin/env python3
"""PyTorch peer for the CPU benchmark (scripts/bench-cpu.sh): one training
step (forward, backward, torch.optim.AdamW) of the identical Llama model and
batch that scaletrain trains, using the independent implementation of the
reference test (ctest/model/torch_reference.py), plus torch's own GEMM rate
in the step's precision. --bf16 runs the forward and backward under
torch.autocast("cpu", dtype=torch.bfloat16) (fp32 parameters and AdamW, the
matrix products in bf16 through oneDNN): PyTorch's mixed precision, the
peer of scaletrain's train.precision=bf16. Prints one JSON object.

Usage: bench_torch_step.py --layers L --d D --heads H --kv KV --ffn F --vocab V
                           --seq T --batch B [--steps N] [--threads K] [--bf16]
"""
import contextlib
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "ctest", "model"))
from torch_reference import forward  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    for k in ("layers", "d", "heads", "kv", "ffn", "vocab", "seq", "batch"):
        ap.add_argument("--" + k, type=int, required=True)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--bf16", action="store_true", help="torch.autocast to bfloat16")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    hd = a.d // a.heads
    shapes = {"tok_embeddings.weight": (a.vocab, a.d), "norm.weight": (a.d,),
              "output.weight": (a.vocab, a.d)}
    for l in range(a.layers):
        p = f"layers.{l}."
        shapes[p + "attention_norm.weight"] = (a.d,)
        shapes[p + "ffn_norm.weight"] = (a.d,)
        shapes[p + "attention.wq.weight"] = (a.heads * hd, a.d)
        shapes[p + "attention.wk.weight"] = (a.kv * hd, a.d)
        shapes[p + "attention.wv.weight"] = (a.kv * hd, a.d)
        shapes[p + "attention.wo.weight"] = (a.d, a.heads * hd)
        shapes[p + "feed_forward.w1.weight"] = (a.ffn, a.d)
        shapes[p + "feed_forward.w3.weight"] = (a.ffn, a.d)
        shapes[p + "feed_forward.w2.weight"] = (a.d, a.ffn)
    P = {}
    for n, s in shapes.items():
        t = torch.ones(s) if len(s) == 1 else torch.randn(s) * 0.02
        P[n] = t.requires_grad_(True)
    opt = torch.optim.AdamW(P.values(), lr=1e-4, weight_decay=0.1)
    cfg = {"n_layers": a.layers, "d_model": a.d, "n_heads": a.heads, "n_kv_heads": a.kv,
           "norm_eps": 1e-5, "rope_theta": 10000.0}
    tokens = torch.randint(0, a.vocab, (a.batch, a.seq))
    targets = torch.randint(0, a.vocab, (a.batch, a.seq))
    def autocast():
        if a.bf16:
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    times = []
    for i in range(a.steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        with autocast():
            loss = forward(P, cfg, tokens, targets)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if i > 0:  # the first step warms up allocators and threads
            times.append(dt)
    n = 768
    dtype = torch.bfloat16 if a.bf16 else torch.float32
    x, y = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    torch.mm(x, y)  # warm-up (oneDNN builds its kernel)
    best = 0.0
    for _ in range(8):
        t0 = time.perf_counter()
        torch.mm(x, y)
        best = max(best, 2 * n**3 / (time.perf_counter() - t0))
    n_params = sum(math.prod(s) for s in shapes.values())
    print(json.dumps({"torch": torch.__version__, "threads": a.threads,
                      "precision": "bf16 autocast" if a.bf16 else "fp32",
                      "step_s": statistics.median(times), "steps": len(times),
                      "tokens_per_step": a.batch * a.seq, "n_params": n_params,
                      "torch_gemm_flops": best}))


if __name__ == "__main__":
    main()
