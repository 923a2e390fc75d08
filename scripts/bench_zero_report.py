#!/usr/bin/env python3
"""Report of scripts/bench-cpu.sh's ZeRO mode (BENCH=zero): reads the run
folders it left in OUT (z0-R, z3-R and, with BEFORE, before-R for round R)
and, with ONE_RANK=1, z0r1-R and z3r1-R (1 rank) and prints each run's steady-state step time (rank 0's median step_s after
the first two steps) with the load before it, the per-round ratios ZeRO 3 /
ZeRO 0 and ZeRO 0 / before (step time: above 1 is slower), their medians,
and the median step's breakdown (kernel_s, exposed communication and the
rest) per configuration. Where the runs record it (cpu_s), the same ratios
in CPU seconds per step, which a busy machine disturbs much less than wall
time.

Usage: bench_zero_report.py OUT ROUNDS
"""
import json
import os
import statistics
import sys

out, rounds = sys.argv[1], int(sys.argv[2])
med = statistics.median


def run(name):
    rec = [json.loads(l) for l in open(f"{out}/{name}/telemetry/rank_00000.jsonl")]
    steps = [s for s in rec if s.get("type") == "step"][2:]
    if not steps:
        sys.exit(f"{out}/{name}: fewer than 3 steps; give STEPS >= 3")
    parts = {}
    for s in steps:
        for k, v in (s.get("kernel_s") or {}).items():
            parts.setdefault(k, []).append(v)
        parts.setdefault("exposed communication", []).append(s["comm_exposed_s"])
    step_s = med(s["step_s"] for s in steps)
    # CPU seconds of rank 0's process per step (binaries from before it was recorded: None)
    cpu_s = med(s["cpu_s"] for s in steps) if "cpu_s" in steps[0] else None
    parts = {k: med(v) for k, v in parts.items()}
    parts["other (loop, copies, host work)"] = max(0.0, step_s - sum(parts.values()))
    load = open(f"{out}/{name}.load").read().split()[1]
    return {"step_s": step_s, "cpu_s": cpu_s, "parts": parts, "load": load}


configs = [c for c in ("z0", "z3", "before", "z0r1", "z3r1") if os.path.exists(f"{out}/{c}-1")]
R = [{c: run(f"{c}-{i}") for c in configs} for i in range(1, rounds + 1)]
r = json.load(open(f"{out}/z0-1/run.json"))
m, t = r["model"], r["config"]["train"]
print(f"\n## ZeRO at dp 2: {m['n_params']/1e6:.2f}M params, {m['n_layers']} layers, "
      f"d={m['d_model']}, seq {m['seq_len']}, micro-batch {t['micro_batch']} per rank, "
      f"{t['precision']}, 2 ranks x 1 thread (z*r1: 1 rank); {rounds} interleaved rounds\n")
print("| round | " + " | ".join(f"{c} step ms (load)" for c in configs) + " |")
print("|---" * (len(configs) + 1) + "|")
for i, x in enumerate(R, 1):
    cells = " | ".join(f"{x[c]['step_s']*1e3:7.0f} ({x[c]['load']})" for c in configs)
    print(f"| {i} | {cells} |")


def spread(name, xs, target=None):
    print(f"- {name}: median {med(xs):.3f} (rounds: {', '.join(f'{v:.3f}' for v in xs)})"
          + (f"; target <= {target}" if target else ""))


def cpu_ratio(name, a, b):  # CPU time per step: work (and spinning) however loaded the machine
    if all(x[a]["cpu_s"] and x[b]["cpu_s"] for x in R):
        spread(name + ", CPU seconds per step", [x[a]["cpu_s"] / x[b]["cpu_s"] for x in R])


print("\nstep-time ratios, same round:")
spread("ZeRO 3 / ZeRO 0", [x["z3"]["step_s"] / x["z0"]["step_s"] for x in R], 1.15)
cpu_ratio("ZeRO 3 / ZeRO 0", "z3", "z0")
if "z3r1" in configs:
    spread("ZeRO 3 / ZeRO 0 at 1 rank", [x["z3r1"]["step_s"] / x["z0r1"]["step_s"] for x in R])
    cpu_ratio("ZeRO 3 / ZeRO 0 at 1 rank", "z3r1", "z0r1")
if "before" in configs:
    spread("ZeRO 0 / before", [x["z0"]["step_s"] / x["before"]["step_s"] for x in R], 1.05)
    cpu_ratio("ZeRO 0 / before", "z0", "before")
for c in configs:
    parts = {k: med(x[c]["parts"].get(k, 0.0) for x in R) for k in R[0][c]["parts"]}
    cpu = [x[c]["cpu_s"] for x in R if x[c]["cpu_s"]]
    print(f"\n{c}: median step breakdown over rounds (ms)"
          + (f"; rank 0 CPU {med(cpu)*1e3:.0f} ms per step" if cpu else ""))
    print("| part | ms |\n|---|---|")
    for k, v in sorted(parts.items(), key=lambda kv: -kv[1]):
        print(f"| {k} | {v*1e3:7.1f} |")
