#!/usr/bin/env python3
"""Report of scripts/bench-cpu.sh: reads the run folders and PyTorch results
it left in OUT and prints, per shape, tokens/s of every configuration as
ratios to PyTorch, the model FLOP/s as a share of the sgemm rate measured in
the same run, the ZeRO 3 / ZeRO 0 step-time ratio at dp 2, and the step's
breakdown from scaletrain's telemetry.

Usage: bench_cpu_report.py OUT
"""
import json
import os
import statistics
import sys

out = sys.argv[1]


def scaletrain(name):
    r = json.load(open(f"{out}/{name}/run.json"))
    rec = [json.loads(l) for l in open(f"{out}/{name}/telemetry/rank_00000.jsonl")]
    steps = [s for s in rec if s.get("type") == "step"][2:]
    step_s = statistics.median(s["step_s"] for s in steps)
    m, t = r["model"], r["config"]["train"]
    tokens = t["micro_batch"] * t["grad_accum"] * m["seq_len"] * r["world_size"]
    parts = {}
    for s in steps:
        for k, v in (s.get("kernel_s") or {}).items():
            parts.setdefault(k, []).append(v)
        parts.setdefault("communication", []).append(s["comm_exposed_s"])
        parts.setdefault("data", []).append(s["data_s"])
    parts = {k: statistics.median(v) for k, v in parts.items()}
    return {"tok_s": tokens / step_s, "step_s": step_s, "run": r, "parts": parts,
            "ranks": r["world_size"], "peak": r["device"]["peak_flops"],
            "compute": r["versions"].get("compute", "")}


def torch(name):
    j = json.load(open(f"{out}/{name}.json"))
    return {"tok_s": j["tokens_per_step"] / j["step_s"], "step_s": j["step_s"], "json": j}


def model_flops_per_token(r):
    m = r["model"]
    N, L, d, T = m["n_params"], m["n_layers"], m["d_model"], m["seq_len"]
    return 3 * (2 * N + 4 * L * d * T)  # MPT/llm-foundry model FLOPs per token


for shape in ("default", "d384"):
    if not os.path.exists(f"{out}/{shape}-st1"):
        continue
    st1, st2r, st2t = (scaletrain(f"{shape}-{n}") for n in ("st1", "st2r", "st2t"))
    pt1, pt2t = torch(f"{shape}-pt1"), torch(f"{shape}-pt2t")
    pa, pb = torch(f"{shape}-pt2p_a"), torch(f"{shape}-pt2p_b")
    pt2p = {"tok_s": pa["tok_s"] + pb["tok_s"]}
    pt2 = max(pt2t["tok_s"], pt2p["tok_s"])
    r = st1["run"]
    m = r["model"]
    fpt = model_flops_per_token(r)
    sgemm1 = st1["peak"]  # 1 thread, alone
    print(f"\n## {shape}: {m['n_params']/1e6:.2f}M params, {m['n_layers']} layers, d={m['d_model']}, "
          f"vocab {m['vocab_size']}, seq {m['seq_len']}, micro-batch "
          f"{r['config']['train']['micro_batch']} per rank, fp32")
    print(f"compute: {st1['compute']}")
    print(f"sgemm rate (768^3, 1 thread, measured at start): {sgemm1/1e9:.1f} GFLOP/s; "
          f"torch.mm: {pt1['json']['torch_sgemm_flops']/1e9:.1f} GFLOP/s\n")
    print("| configuration | tok/s | vs PyTorch (same cores) | GFLOP/s per core | of sgemm |")
    print("|---|---|---|---|---|")
    rows = [("scaletrain, 1 rank x 1 thread", st1["tok_s"], pt1["tok_s"], 1),
            ("PyTorch 1 thread", pt1["tok_s"], pt1["tok_s"], 1),
            ("scaletrain, 2 ranks x 1 thread", st2r["tok_s"], pt2, 2),
            ("scaletrain, 1 rank x 2 threads", st2t["tok_s"], pt2, 2),
            ("PyTorch 2 threads", pt2t["tok_s"], pt2, 2),
            ("PyTorch 2 processes x 1 thread", pt2p["tok_s"], pt2, 2)]
    for name, tok, ref, cores in rows:
        gf = tok * fpt / cores / 1e9
        print(f"| {name} | {tok:8.0f} | {tok/ref:5.2f} | {gf:6.1f} | {100*gf*1e9/sgemm1:5.1f}% |")
    print(f"\nscaling on 2 cores: 2 ranks / 1 rank {st2r['tok_s']/st1['tok_s']:.2f}; "
          f"2 threads / 1 thread {st2t['tok_s']/st1['tok_s']:.2f}")
    z3 = scaletrain(f"{shape}-st2z3")
    print(f"ZeRO 3 dp 2 / ZeRO 0 dp 2 step time (2 ranks x 1 thread): "
          f"{z3['step_s']*1e3:.0f} / {st2r['step_s']*1e3:.0f} ms = "
          f"{z3['step_s']/st2r['step_s']:.3f}")
    print(f"\nscaletrain 1 rank x 1 thread, step {st1['step_s']*1e3:.0f} ms:")
    parts = dict(st1["parts"])
    known = sum(parts.values())
    parts["other (loop, copies, host work)"] = max(0.0, st1["step_s"] - known)
    print("| part | ms | share |\n|---|---|---|")
    for k, v in sorted(parts.items(), key=lambda kv: -kv[1]):
        print(f"| {k} | {v*1e3:7.1f} | {100*v/st1['step_s']:5.1f}% |")
