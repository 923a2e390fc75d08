#!/usr/bin/env python3
"""torch_peer_step.py: the PyTorch peer of scaletrain's training step, run on
the same device in the same call as the trainer so that its tokens/s and MFU
stand beside ours (issue 52, "a peer in the same call"; docs/cuda.md).

The model (scripts/torch_peer_model.py, the torch half, imported once the
config is accepted) is written from docs/model.md (RMSNorm in fp32,
interleaved-pair RoPE, grouped-query causal attention, SwiGLU, untied head; no
biases) and trained the way the field's one-GPU runs of the Llama-3 8B shape train it:
  - bf16 parameters, bf16 gradients and bf16 AdamW moments (no fp32 master);
  - torch.optim.AdamW, fused where this torch has it, else foreach; weight
    decay on matrices only, as scaletrain; gradient clipping at
    optim.grad_clip (foreach where this torch has it); constant learning rate;
  - attention through torch.nn.functional.scaled_dot_product_attention
    (is_causal=True, kv heads repeated to the query heads); a torch without it
    (Debian's 1.13) computes the same causal softmax by hand and says so;
  - full activation recomputation per block (torch.utils.checkpoint,
    use_reentrant=False) for train.act_ckpt=full;
  - torch.compile per block where this torch has it (--no-compile turns it
    off; a compile error at the first step falls back to eager and is
    reported, never silently);
  - micro_batch x grad_accum micro-batches per step, the trainer's tokens/step.
The weights are drawn from the trainer's distribution (N(0, init_std^2), gains
1), not its values: this script measures speed; test_model_torch_reference
checks our model's numbers against an independent one.

The shape and the run come from a scaletrain config, resolved as the trainer
resolves it: the preset named by model.preset (configs/models/NAME.yaml, or
$SCALETRAIN_CONFIG_DIR), the file's own keys, then each --set in order
(--set model.preset=NAME replaces the model section). The keys it honours are
model.*, train.micro_batch, train.grad_accum, train.seed, train.precision
(bf16|fp32; default bf16), train.act_ckpt (full|none; default full),
optim.lr, optim.weight_decay, optim.beta1, optim.beta2, optim.eps,
optim.grad_clip, optim.state_dtype (when given, the parameters' dtype: the
peer's AdamW moments are always theirs) and runtime.device (cpu|cuda; default
cuda when visible); any other key is accepted, listed under "ignored_keys"
and has no effect, so the trainer's --set list can be passed unchanged.

It runs --warmup steps (the first compiles) then --steps timed steps on one
fixed batch (the loss falls as it memorises it), timed with CUDA events on a
GPU and the wall clock on a CPU, and prints one JSON object: tokens/s, the
median step and its spread, MFU and HFU by the trainer's formulas
(lib/metrics/flops.cpp: (6 N + 12 L d T) FLOPs per token, x 4/3 for HFU with
full recomputation) over --peak-tflops (the trainer's own peak: gpu-check.sh
passes run.json's device.peak_flops; without it MFU is null), peak memory,
the torch version, the device, whether compile and fused AdamW ran, the step
losses and the 1-minute load average before and after.

Usage: torch_peer_step.py [--config FILE.yaml] [--set section.key=value ...]
                          [--steps N] [--warmup W] [--peak-tflops P]
                          [--no-compile] [--threads K] [--params-only]
Exit: 0 ran; 2 a bad argument or key (named).
"""
import argparse
import json
import os
import sys

import yaml

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
MODEL_KEYS = {"name": str, "preset": str, "n_layers": int, "d_model": int, "n_heads": int,
              "n_kv_heads": int, "ffn_hidden": int, "vocab_size": int, "seq_len": int,
              "rope_theta": float, "norm_eps": float, "init_std": float, "init_from": str}
RUN_KEYS = {"train.micro_batch": int, "train.grad_accum": int, "train.seed": int,
            "train.precision": str, "train.act_ckpt": str, "optim.lr": float,
            "optim.weight_decay": float, "optim.beta1": float, "optim.beta2": float,
            "optim.eps": float, "optim.grad_clip": float, "optim.state_dtype": str,
            "runtime.device": str}
# The trainer's defaults (lib/config/config.hpp) for the run keys, except
# precision and recomputation: the peer's are the field's one-GPU run's.
RUN_DEFAULTS = {"train.micro_batch": 4, "train.grad_accum": 1, "train.seed": 1234,
                "train.precision": "bf16", "train.act_ckpt": "full", "optim.lr": 3e-4,
                "optim.weight_decay": 0.1, "optim.beta1": 0.9, "optim.beta2": 0.95,
                "optim.eps": 1e-8, "optim.grad_clip": 1.0, "optim.state_dtype": "",
                "runtime.device": ""}


class BadInput(Exception):
    pass


# ---- the config, resolved as the trainer resolves it ----------------------

def preset_dir():
    return os.environ.get("SCALETRAIN_CONFIG_DIR") or os.path.join(REPO, "configs", "models")


def read_yaml(path):
    try:
        with open(path) as f:
            doc = yaml.safe_load(f) or {}
    except OSError as e:
        raise BadInput(f"{path}: {e.strerror}")
    except yaml.YAMLError as e:
        raise BadInput(f"{path}: not YAML ({e})")
    if not isinstance(doc, dict):
        raise BadInput(f"{path}: expected a mapping of sections")
    return doc


def preset_model(name):
    path = os.path.join(preset_dir(), name + ".yaml")
    if not os.path.exists(path):
        have = sorted(f[:-5] for f in os.listdir(preset_dir()) if f.endswith(".yaml"))
        raise BadInput(f"model.preset: unknown preset '{name}' (no {path}; presets: "
                       f"{', '.join(have)})")
    return dict(read_yaml(path).get("model") or {})


def typed(key, kind, value):
    try:
        if kind is int and isinstance(value, float) and not value.is_integer():
            raise ValueError
        return kind(value)
    except (TypeError, ValueError):
        raise BadInput(f"{key}: '{value}' is not {'an integer' if kind is int else 'a ' + kind.__name__}")


def resolve(config, sets):
    """The model shape, the honoured run keys and the ignored ones."""
    # The struct defaults are the `default` preset's values (configs/models/default.yaml).
    model = preset_model("default")
    model.update({"init_std": 0.02, "name": "default"})
    run, ignored = dict(RUN_DEFAULTS), []
    doc = read_yaml(config) if config else {}
    fm = dict(doc.get("model") or {})
    if fm.get("preset"):
        model.update(preset_model(str(fm["preset"])))
    model.update({k: v for k, v in fm.items() if k != "preset"})
    for sec, body in doc.items():
        if sec == "model":
            continue
        for k, v in (body or {}).items():
            key = f"{sec}.{k}"
            (run.__setitem__(key, v) if key in RUN_KEYS else ignored.append(key))
    # --set model.preset=NAME replaces the model section first; the other keys
    # apply after it, in order (lib/config/load.cpp).
    sets = sorted(sets, key=lambda s: not s.startswith("model.preset="))
    for s in sets:
        key, eq, value = s.partition("=")
        if not eq or "." not in key:
            raise BadInput(f"--set '{s}': expected section.key=value")
        sec, k = key.split(".", 1)
        if sec == "model":
            if k not in MODEL_KEYS:
                raise BadInput(f"{key}: unknown key (model keys: {', '.join(MODEL_KEYS)})")
            if k == "preset":
                model = {**preset_model("default"), "init_std": 0.02, **preset_model(value)}
            else:
                model[k] = yaml.safe_load(value)
        elif key in RUN_KEYS:
            run[key] = yaml.safe_load(value)
        else:
            ignored.append(key)
    for k in list(model):
        if k not in MODEL_KEYS:
            raise BadInput(f"model.{k}: unknown key (model keys: {', '.join(MODEL_KEYS)})")
        model[k] = typed("model." + k, MODEL_KEYS[k], model[k])
    for k in run:
        if run[k] != "":
            run[k] = typed(k, RUN_KEYS[k], run[k])
    sizes = {"model." + k: v for k, v in model.items() if MODEL_KEYS[k] is not str}
    sizes.update({k: run[k] for k in ("train.micro_batch", "train.grad_accum")})
    for key, v in sizes.items():
        if not v > 0:
            raise BadInput(f"{key}: {v} (must be > 0)")
    if model.get("init_from"):
        raise BadInput("model.init_from: the peer draws its weights; it does not load a folder")
    if model["d_model"] % model["n_heads"] or (model["d_model"] // model["n_heads"]) % 2:
        raise BadInput("model.d_model / model.n_heads must be an even whole head dimension")
    if model["n_heads"] % model["n_kv_heads"]:
        raise BadInput("model.n_heads must be a multiple of model.n_kv_heads")
    if run["train.precision"] == "auto":
        run["train.precision"] = "bf16"
    if run["train.precision"] not in ("bf16", "fp32"):
        raise BadInput(f"train.precision: '{run['train.precision']}' (the peer runs bf16 or fp32)")
    if run["train.act_ckpt"] not in ("full", "none"):
        raise BadInput(f"train.act_ckpt: '{run['train.act_ckpt']}' (the peer recomputes "
                       "full blocks or nothing: full or none)")
    state = run["train.precision"]  # AdamW's moments take their parameter's dtype
    if run["optim.state_dtype"] not in ("", state):
        raise BadInput(f"optim.state_dtype: '{run['optim.state_dtype']}' (the peer keeps its "
                       f"AdamW state in the parameters' dtype: {state} with train.precision="
                       f"{state}; it has no fp32 master copy)")
    if run["runtime.device"] not in ("", "cpu", "cuda"):
        raise BadInput(f"runtime.device: '{run['runtime.device']}' (cpu or cuda)")
    return model, run, sorted(set(ignored))


def main():
    load_before = os.getloadavg()[0]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=os.path.join(REPO, "configs", "models", "llama-8b.yaml"),
                    help="scaletrain config YAML (default: the llama-8b preset)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument("--steps", type=int, default=5, help="timed steps (default 5)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first (default 2)")
    ap.add_argument("--peak-tflops", type=float, default=0.0,
                    help="the device's dense peak the trainer reports MFU against")
    ap.add_argument("--no-compile", action="store_true", help="no torch.compile")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (default: torch's)")
    ap.add_argument("--params-only", action="store_true",
                    help="build on the meta device, print the shape and parameter count, exit")
    a = ap.parse_args()
    try:
        if a.steps < 1 or a.warmup < 0:
            raise BadInput("--steps must be >= 1 and --warmup >= 0")
        if a.peak_tflops < 0:
            raise BadInput("--peak-tflops must be >= 0")
        m, run, ignored = resolve(a.config, a.set)
    except BadInput as e:
        print(f"torch_peer_step: {e}", file=sys.stderr)
        sys.exit(2)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.dont_write_bytecode = True  # no __pycache__ in the checkout
    import torch_peer_model as peer  # torch: only for a config that was accepted

    if a.params_only:
        print(json.dumps({"model": m, "n_params": peer.count_params(m, run),
                          "ignored_keys": ignored}))
        return
    device = run["runtime.device"] or ("cuda" if peer.torch.cuda.is_available() else "cpu")
    if device == "cuda" and not peer.torch.cuda.is_available():
        print("torch_peer_step: runtime.device: cuda, but this torch sees no GPU", file=sys.stderr)
        sys.exit(2)
    out = {"peer": "scripts/torch_peer_step.py", "model": m}
    out.update(peer.measure(m, run, device, a.steps, a.warmup, a.peak_tflops,
                            not a.no_compile, a.threads))
    out.update({"load1_before": load_before, "cores": os.cpu_count(), "ignored_keys": ignored})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
