#!/usr/bin/env python3
"""peer_compile_paths.py: the PyTorch peer's torch.compile paths on a torch
without torch.compile (Debian's 1.13), with a stand-in: torch.compile returns
the block itself ("ok") or a callable that raises at the first step ("fail"),
and torch._dynamo is a stub whose recompile limits the peer raises. The real
compiler runs only on the GPU machine; this keeps the code around it (the
limits, the per-block wrapping, the fallback to eager that is said aloud)
from failing there first. Prints one JSON object; test_torch_peer reads it.

Usage: peer_compile_paths.py SOURCE_DIR ok|fail
"""
import json
import os
import sys
import types

sys.dont_write_bytecode = True
src, mode = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(src, "scripts"))
import torch  # noqa: E402

stub = types.ModuleType("torch._dynamo")
stub.config = types.SimpleNamespace(cache_size_limit=8, accumulated_cache_size_limit=64)
stub.resets = 0


def reset():
    stub.resets += 1


stub.reset = reset
sys.modules["torch._dynamo"] = stub
wrapped = []


def fake_compile(module, **kw):
    wrapped.append(module)
    if mode == "ok":
        return module

    def boom(*a, **k):
        raise RuntimeError("planted compiler failure")
    return boom


torch.compile = fake_compile
import torch_peer_model as peer  # noqa: E402

m = {"n_layers": 3, "d_model": 32, "n_heads": 4, "n_kv_heads": 2, "ffn_hidden": 64,
     "vocab_size": 64, "seq_len": 16, "rope_theta": 10000.0, "norm_eps": 1e-5, "init_std": 0.02}
run = {"train.act_ckpt": "full", "train.seed": 1, "train.precision": "bf16",
       "train.micro_batch": 2, "train.grad_accum": 1, "optim.lr": 1e-2,
       "optim.weight_decay": 0.1, "optim.beta1": 0.9, "optim.beta2": 0.95, "optim.eps": 1e-8,
       "optim.grad_clip": 1.0}
out = peer.measure(m, run, "cpu", 2, 1, 0.0, True, 1)
print(json.dumps({"wrapped": len(wrapped), "cache_size_limit": stub.config.cache_size_limit,
                  "accumulated_cache_size_limit": stub.config.accumulated_cache_size_limit,
                  "resets": stub.resets, "compile": out["compile"],
                  "compile_note": out["compile_note"], "losses": out["losses"]}))
