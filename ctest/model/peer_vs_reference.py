#!/usr/bin/env python3
"""peer_vs_reference.py: the PyTorch peer's model (scripts/torch_peer_model.py)
computes the documented model: with the same fp32 weights (norm gains drawn
away from 1) and tokens, its loss and every parameter's gradient, through its
recomputed blocks, against the independent reference of
test_model_torch_reference (ctest/model/torch_reference.py). Prints one JSON
object; test_torch_peer reads it.

Usage: peer_vs_reference.py SOURCE_DIR
"""
import json
import os
import sys

sys.dont_write_bytecode = True
src = sys.argv[1]
sys.path[:0] = [os.path.join(src, "scripts"), os.path.join(src, "ctest", "model")]
import torch  # noqa: E402

import torch_peer_model as peer  # noqa: E402
import torch_reference as ref  # noqa: E402

torch.set_num_threads(1)
torch.manual_seed(5)
# tiny's proportions with a kv head shared by 2 query heads and odd sizes.
m = {"n_layers": 2, "d_model": 48, "n_heads": 4, "n_kv_heads": 2, "ffn_hidden": 80,
     "vocab_size": 97, "seq_len": 24, "rope_theta": 10000.0, "norm_eps": 1e-5, "init_std": 0.5}
run = {"train.act_ckpt": "full", "train.seed": 7}
model = peer.build(m, run, "cpu", torch.float32)
with torch.no_grad():
    for p in model.parameters():
        if p.dim() == 1:
            p.uniform_(0.5, 1.5)
g = torch.Generator().manual_seed(11)
B, T = 3, m["seq_len"]
seq = torch.randint(0, m["vocab_size"], (B, T + 1), generator=g)
tokens, targets = seq[:, :-1].contiguous(), seq[:, 1:].contiguous()
cos, sin = peer.rope_tables(m, T, "cpu")
loss = model(tokens, targets, cos, sin)
loss.backward()
P = {n: p.detach().clone().requires_grad_(True) for n, p in model.named_parameters()}
cfg = {"n_layers": m["n_layers"], "d_model": m["d_model"], "n_heads": m["n_heads"],
       "n_kv_heads": m["n_kv_heads"], "norm_eps": m["norm_eps"], "rope_theta": m["rope_theta"]}
loss_ref = ref.forward(P, cfg, tokens, targets)
loss_ref.backward()  # a name the reference does not know fails above, one it leaves unused below
worst, worst_name = 0.0, ""
for n, p in model.named_parameters():
    r = P[n].grad
    rel = float((p.grad - r).norm() / r.norm().clamp_min(1e-30))
    if rel > worst:
        worst, worst_name = rel, n
print(json.dumps({"loss": float(loss), "loss_ref": float(loss_ref),
                  "params": len(P), "grad_rel_max": worst, "grad_rel_max_at": worst_name,
                  "sdpa": peer.HAVE_SDPA, "torch": torch.__version__}))
