#!/usr/bin/env python3
"""Independent PyTorch (fp32, autograd) implementation of the scaletrain
Llama model, used as the reference by test_model_torch_reference.

Usage: torch_reference.py DIR
Reads DIR/manifest.json (config, B, T, parameter names/shapes/files, token and
target files; raw little-endian float32 / int32), runs forward + backward of
the mean cross-entropy, writes DIR/grads/<name>.bin (float32) and
DIR/result.json {"loss": ...}.
"""
import json
import math
import os
import sys

import numpy
import torch
import torch.nn.functional as F


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, theta):
    # x: [B, T, H, hd]; interleaved pairs (2i, 2i+1), as Meta's Llama
    # (view_as_complex), written out with real arithmetic.
    B, T, H, hd = x.shape
    i = torch.arange(0, hd, 2, dtype=torch.float64)
    freqs = theta ** (-i / hd)
    ang = torch.outer(torch.arange(T, dtype=torch.float64), freqs)  # [T, hd/2]
    cos = ang.cos().float()[None, :, None, :]
    sin = ang.sin().float()[None, :, None, :]
    xr = x.reshape(B, T, H, hd // 2, 2)
    x0, x1 = xr[..., 0], xr[..., 1]
    out = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)
    return out.reshape(B, T, H, hd)


def forward(P, cfg, tokens, targets):
    L, d = cfg["n_layers"], cfg["d_model"]
    Hq, Hkv = cfg["n_heads"], cfg["n_kv_heads"]
    hd = d // Hq
    eps, theta = cfg["norm_eps"], cfg["rope_theta"]
    B, T = tokens.shape
    h = P["tok_embeddings.weight"][tokens]  # [B, T, d]
    mask = torch.full((T, T), float("-inf")).triu(1)
    for l in range(L):
        p = lambda n: P[f"layers.{l}.{n}.weight"]
        x = rmsnorm(h, p("attention_norm"), eps)
        q = (x @ p("attention.wq").t()).view(B, T, Hq, hd)
        k = (x @ p("attention.wk").t()).view(B, T, Hkv, hd)
        v = (x @ p("attention.wv").t()).view(B, T, Hkv, hd)
        q, k = rope(q, theta), rope(k, theta)
        rep = Hq // Hkv
        k = k.repeat_interleave(rep, dim=2)
        v = v.repeat_interleave(rep, dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, T, hd]
        s = q @ k.transpose(-1, -2) / math.sqrt(hd) + mask
        a = torch.softmax(s, dim=-1) @ v
        a = a.transpose(1, 2).reshape(B, T, Hq * hd)
        h = h + a @ p("attention.wo").t()
        x = rmsnorm(h, p("ffn_norm"), eps)
        ff = F.silu(x @ p("feed_forward.w1").t()) * (x @ p("feed_forward.w3").t())
        h = h + ff @ p("feed_forward.w2").t()
    h = rmsnorm(h, P["norm.weight"], eps)
    logits = h @ P["output.weight"].t()
    return F.cross_entropy(logits.view(B * T, -1), targets.view(-1))


def main():
    d = sys.argv[1]
    with open(os.path.join(d, "manifest.json")) as f:
        man = json.load(f)
    torch.set_num_threads(1)

    def load(name, dtype, shape):
        a = numpy.fromfile(os.path.join(d, name), dtype=dtype)
        assert a.size == math.prod(shape), f"{name}: {a.size} values, expected {shape}"
        return torch.from_numpy(a.reshape(shape).copy())

    B, T = man["B"], man["T"]
    tokens = load(man["tokens"], "<i4", [B, T]).long()
    targets = load(man["targets"], "<i4", [B, T]).long()
    P = {}
    for e in man["params"]:
        P[e["name"]] = load(e["file"], "<f4", e["shape"]).requires_grad_(True)
    loss = forward(P, man["config"], tokens, targets)
    loss.backward()
    os.makedirs(os.path.join(d, "grads"), exist_ok=True)
    for name, t in P.items():
        t.grad.detach().contiguous().numpy().astype("<f4").tofile(os.path.join(d, "grads", name + ".bin"))
    with open(os.path.join(d, "result.json"), "w") as f:
        json.dump({"loss": loss.item(), "torch": torch.__version__}, f)


if __name__ == "__main__":
    main()
