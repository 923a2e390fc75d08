#!/usr/bin/env python3
"""Report of scripts/bench-cpu.sh: reads the run folders and PyTorch results
it left in OUT (SHAPE-PRECISION-CONFIG-ROUND) and prints, per shape and
precision, the median over rounds of each round's tokens/s ratio to PyTorch
(1 core: 1 thread each; 2 cores: the best of each side's two ways), bf16
against scaletrain's own fp32 step, model FLOP/s as a share of the GEMM rate
measured at start in the run's precision, what the GEMMs ran on, and the
step's breakdown from scaletrain's telemetry.

Usage: bench_cpu_report.py OUT ROUNDS
"""
import json
import os
import statistics
import sys

out, rounds = sys.argv[1], int(sys.argv[2])
med = statistics.median


def scaletrain(name):
    r = json.load(open(f"{out}/{name}/run.json"))
    rec = [json.loads(l) for l in open(f"{out}/{name}/telemetry/rank_00000.jsonl")]
    steps = [s for s in rec if s.get("type") == "step"][2:]
    step_s = med(s["step_s"] for s in steps)
    m, t = r["model"], r["config"]["train"]
    tokens = t["micro_batch"] * t["grad_accum"] * m["seq_len"] * r["world_size"]
    parts = {}
    for s in steps:
        for k, v in (s.get("kernel_s") or {}).items():
            parts.setdefault(k, []).append(v)
        parts.setdefault("communication", []).append(s["comm_exposed_s"])
        parts.setdefault("data", []).append(s["data_s"])
    parts = {k: med(v) for k, v in parts.items()}
    return {"tok_s": tokens / step_s, "step_s": step_s, "run": r, "parts": parts,
            "peak": r["device"]["peak_flops"], "peak_source": r["device"]["peak_source"],
            "compute": r["versions"].get("compute", "")}


def torch(name):
    j = json.load(open(f"{out}/{name}.json"))
    return {"tok_s": j["tokens_per_step"] / j["step_s"], "step_s": j["step_s"], "json": j}


def model_flops_per_token(r):
    m = r["model"]
    N, L, d, T = m["n_params"], m["n_layers"], m["d_model"], m["seq_len"]
    return 3 * (2 * N + 4 * L * d * T)  # MPT/llm-foundry model FLOPs per token


def one_round(shape, prec, i):
    st = {c: scaletrain(f"{shape}-{prec}-{c}-{i}") for c in ("st1", "st2r", "st2t")}
    pt = {c: torch(f"{shape}-{prec}-{c}-{i}") for c in ("pt1", "pt2t", "pt2pa", "pt2pb")}
    pt["pt2p"] = {"tok_s": pt["pt2pa"]["tok_s"] + pt["pt2pb"]["tok_s"]}
    st2 = max(st["st2r"]["tok_s"], st["st2t"]["tok_s"])
    pt2 = max(pt["pt2t"]["tok_s"], pt["pt2p"]["tok_s"])
    return {"st": st, "pt": pt, "st2": st2, "pt2": pt2,
            "r1": st["st1"]["tok_s"] / pt["pt1"]["tok_s"], "r2": st2 / pt2}


def spread(xs):
    return f"{med(xs):5.2f} (rounds: {', '.join(f'{x:.2f}' for x in xs)})"


for shape in ("default", "d384"):
    precs = [p for p in ("fp32", "bf16") if os.path.exists(f"{out}/{shape}-{p}-st1-1")]
    if not precs:
        continue
    R = {p: [one_round(shape, p, i) for i in range(1, rounds + 1)] for p in precs}
    r = R[precs[0]][0]["st"]["st1"]["run"]
    m = r["model"]
    fpt = model_flops_per_token(r)
    print(f"\n## {shape}: {m['n_params']/1e6:.2f}M params, {m['n_layers']} layers, "
          f"d={m['d_model']}, vocab {m['vocab_size']}, seq {m['seq_len']}, micro-batch "
          f"{r['config']['train']['micro_batch']} per rank; {rounds} interleaved rounds")
    for p in precs:
        rs = R[p]
        st1 = rs[-1]["st"]["st1"]
        print(f"\n### {p}\ncompute: {st1['compute']}")
        peak = med(x["st"]["st1"]["peak"] for x in rs)
        tg = med(x["pt"]["pt1"]["json"]["torch_gemm_flops"] for x in rs)
        print(f"GEMM rate (768^3, 1 thread, measured at start, median): {peak/1e9:.1f} GFLOP/s "
              f"({st1['peak_source']}); PyTorch torch.mm in {p}: {tg/1e9:.1f} GFLOP/s\n")
        print("| configuration | tok/s (median) | GFLOP/s per core | of the GEMM rate |")
        print("|---|---|---|---|")
        rows = [("scaletrain, 1 rank x 1 thread", [x["st"]["st1"]["tok_s"] for x in rs], 1),
                ("PyTorch 1 thread", [x["pt"]["pt1"]["tok_s"] for x in rs], 1),
                ("scaletrain, 2 ranks x 1 thread", [x["st"]["st2r"]["tok_s"] for x in rs], 2),
                ("scaletrain, 1 rank x 2 threads", [x["st"]["st2t"]["tok_s"] for x in rs], 2),
                ("PyTorch 2 threads", [x["pt"]["pt2t"]["tok_s"] for x in rs], 2),
                ("PyTorch 2 processes x 1 thread", [x["pt"]["pt2p"]["tok_s"] for x in rs], 2)]
        for name, toks, cores in rows:
            tok = med(toks)
            gf = tok * fpt / cores / 1e9
            print(f"| {name} | {tok:8.0f} | {gf:6.1f} | {100*gf*1e9/peak:5.1f}% |")
        print(f"\nscaletrain / PyTorch {p}, median of per-round ratios:")
        print(f"- 1 core (1 thread each): {spread([x['r1'] for x in rs])}")
        print(f"- 2 cores (best of each side's two ways): {spread([x['r2'] for x in rs])}")
        print(f"\nscaletrain 1 rank x 1 thread, step {st1['step_s']*1e3:.0f} ms (last round):")
        parts = dict(st1["parts"])
        known = sum(parts.values())
        parts["other (loop, copies, host work)"] = max(0.0, st1["step_s"] - known)
        print("| part | ms | share |\n|---|---|---|")
        for k, v in sorted(parts.items(), key=lambda kv: -kv[1]):
            print(f"| {k} | {v*1e3:7.1f} | {100*v/st1['step_s']:5.1f}% |")
    if len(precs) == 2:
        f, b = R["fp32"], R["bf16"]
        own1 = [b[i]["st"]["st1"]["tok_s"] / f[i]["st"]["st1"]["tok_s"] for i in range(rounds)]
        own2 = [b[i]["st2"] / f[i]["st2"] for i in range(rounds)]
        pto = [b[i]["pt"]["pt1"]["tok_s"] / f[i]["pt"]["pt1"]["tok_s"] for i in range(rounds)]
        print(f"\n### bf16 step / fp32 step, same round\n- scaletrain 1 core: {spread(own1)}")
        print(f"- scaletrain 2 cores (best way each): {spread(own2)}")
        print(f"- PyTorch 1 thread (autocast / fp32): {spread(pto)}")
