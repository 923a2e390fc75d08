#!/usr/bin/env python3
"""An independent Hugging Face Llama in PyTorch (fp32), for test_convert.

Written from Hugging Face's LlamaForCausalLM conventions, not from
scaletrain's code: rotate-half RoPE (cos/sin of cat(freqs, freqs)),
repeat_kv grouped-query attention, RMSNorm, SwiGLU (gate/up/down), untied or
tied head. Safetensors files are read and written here from the format's
specification (8-byte little-endian header length, JSON header, raw
little-endian tensors); no safetensors package is needed. The tokens are
scaletrain's synthetic samples, reproduced from docs/data.md.

  hf_llama_torch.py loss DIR SEED FIRST COUNT SEQ
      loads the folder DIR (config.json, model.safetensors or the index and
      its shards) and prints {"loss": L} over samples FIRST..FIRST+COUNT-1
  hf_llama_torch.py write DIR SEED FIRST COUNT SEQ CONFIG_JSON DTYPE SHARDS
      draws a model (torch.manual_seed(SEED)), writes it to DIR as a Hugging
      Face folder (DTYPE F32 or BF16, in SHARDS files with the index), and
      prints its loss as above
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch

M = (1 << 64) - 1


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & M
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return state, z ^ (z >> 31)


def mix(seed, i):
    return splitmix64(((seed * 0x632BE59BD9B4E019) & M) ^ ((i + 0x9E3779B97F4A7C15) & M))[1]


def synthetic_sample(seed, i, seq, vocab):
    state = mix(seed, i)
    out = []
    for _ in range(seq + 1):
        state, z = splitmix64(state)
        out.append(z % vocab)
    return out


# ---- safetensors, from the specification ----------------------------------
def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        buf = raw[base + b:base + end]
        if e["dtype"] == "F32":
            a = np.frombuffer(buf, dtype="<f4").astype(np.float32)
        elif e["dtype"] == "BF16":
            u = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
            a = u.view(np.float32)
        else:
            raise ValueError(f"{path}: {name}: dtype {e['dtype']} not handled by this test")
        out[name] = torch.from_numpy(a.reshape(e["shape"]).copy())
    return out


def write_safetensors(path, tensors, dtype):
    header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors:
        a = t.detach().numpy().astype(np.float32)
        if dtype == "F32":
            blob = a.astype("<f4").tobytes()
        else:  # BF16: round to nearest even
            u = a.view(np.uint32).astype(np.uint64)
            u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
            blob = u.astype("<u2").tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [at, at + len(blob)]}
        blobs.append(blob)
        at += len(blob)
    h = json.dumps(header).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def bf16_round(t):
    a = t.detach().numpy().astype(np.float32)
    u = a.view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return torch.from_numpy(u.astype(np.uint32).view(np.float32).copy())


# ---- the model ----------------------------------------------------------------
def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rms_norm(x, w, eps):
    var = x.pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(var + eps) * w


def forward_loss(cfg, W, tokens, targets):
    d, H = cfg["hidden_size"], cfg["num_attention_heads"]
    Hkv, L = cfg["num_key_value_heads"], cfg["num_hidden_layers"]
    hd, eps, theta = d // H, cfg["rms_norm_eps"], cfg["rope_theta"]
    B, T = tokens.shape
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().float(), emb.sin().float()
    h = W["model.embed_tokens.weight"][tokens]
    mask = torch.full((T, T), float("-inf")).triu(1)
    for l in range(L):
        p = f"model.layers.{l}."
        a = rms_norm(h, W[p + "input_layernorm.weight"], eps)
        q = (a @ W[p + "self_attn.q_proj.weight"].T).view(B, T, H, hd).transpose(1, 2)
        k = (a @ W[p + "self_attn.k_proj.weight"].T).view(B, T, Hkv, hd).transpose(1, 2)
        v = (a @ W[p + "self_attn.v_proj.weight"].T).view(B, T, Hkv, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // Hkv, dim=1)  # repeat_kv
        v = v.repeat_interleave(H // Hkv, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(hd) + mask
        o = torch.softmax(s, dim=-1) @ v
        o = o.transpose(1, 2).reshape(B, T, H * hd)
        h = h + o @ W[p + "self_attn.o_proj.weight"].T
        a = rms_norm(h, W[p + "post_attention_layernorm.weight"], eps)
        g = a @ W[p + "mlp.gate_proj.weight"].T
        u = a @ W[p + "mlp.up_proj.weight"].T
        h = h + (torch.nn.functional.silu(g) * u) @ W[p + "mlp.down_proj.weight"].T
    h = rms_norm(h, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else W["lm_head.weight"]
    logits = (h @ head.T).double()
    return torch.nn.functional.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1)).item()


def batch(seed, first, count, seq, vocab):
    s = [synthetic_sample(seed, i, seq, vocab) for i in range(first, first + count)]
    x = torch.tensor(s, dtype=torch.int64)
    return x[:, :-1], x[:, 1:]


def load_folder(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    idx = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) \
        else ["model.safetensors"]
    W = {}
    for f in files:
        W.update(read_safetensors(os.path.join(d, f)))
    return cfg, W


def draw(cfg, seed):
    torch.manual_seed(seed)
    d, H, Hkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, F, V = d // H, cfg["intermediate_size"], cfg["vocab_size"]
    W, names = {}, []

    def add(n, *shape, gain=False):
        W[n] = (1.0 + 0.1 * torch.randn(*shape)) if gain else 0.1 * torch.randn(*shape)
        names.append(n)

    add("model.embed_tokens.weight", V, d)
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        add(p + "input_layernorm.weight", d, gain=True)
        add(p + "self_attn.q_proj.weight", H * hd, d)
        add(p + "self_attn.k_proj.weight", Hkv * hd, d)
        add(p + "self_attn.v_proj.weight", Hkv * hd, d)
        add(p + "self_attn.o_proj.weight", d, H * hd)
        add(p + "post_attention_layernorm.weight", d, gain=True)
        add(p + "mlp.gate_proj.weight", F, d)
        add(p + "mlp.up_proj.weight", F, d)
        add(p + "mlp.down_proj.weight", d, F)
    add("model.norm.weight", d, gain=True)
    if not cfg.get("tie_word_embeddings"):
        add("lm_head.weight", V, d)
    return W, names


def write_folder(d, cfg, W, names, dtype, shards):
    os.makedirs(d, exist_ok=True)
    per = (len(names) + shards - 1) // shards
    wm = {}
    for s in range(shards):
        part = names[s * per:(s + 1) * per]
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors" if shards > 1 else "model.safetensors"
        write_safetensors(os.path.join(d, fname), [(n, W[n]) for n in part], dtype)
        wm.update({n: fname for n in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, f)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)


def main():
    mode, d = sys.argv[1], sys.argv[2]
    seed, first, count, seq = (int(a) for a in sys.argv[3:7])
    torch.set_num_threads(1)
    if mode == "loss":
        cfg, W = load_folder(d)
    elif mode == "write":
        cfg = json.loads(sys.argv[7])
        dtype, shards = sys.argv[8], int(sys.argv[9])
        W, names = draw(cfg, seed)
        if dtype == "BF16":  # the model the folder holds
            W = {n: bf16_round(t) for n, t in W.items()}
        write_folder(d, cfg, W, names, dtype, shards)
    else:
        raise SystemExit(f"unknown mode {mode}")
    x, y = batch(seed, first, count, seq, cfg["vocab_size"])
    with torch.no_grad():
        loss = forward_loss(cfg, W, x, y)
    print(json.dumps({"loss": loss}))


if __name__ == "__main__":
    main()
