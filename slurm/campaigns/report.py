#!/usr/bin/env python3
"""report.py: writes a campaign folder's README.md from what is in it.

Reads runs/*/run.json, runs/*/analysis/summary.json (scaletrain-analyze run),
analysis/campaign.json (scaletrain-analyze campaign, when it accepted the
runs as one series) and invocation.txt (the driver's command and sbatch
lines). The README opens with date, commit, hardware, model, steps and the
steady-state window, then the driver invocation, a per-run table, the plots
and where the raw telemetry and analysis outputs are. Standard library only.

usage: report.py CAMPAIGN_DIR
"""
import glob
import json
import os
import socket
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def fmt(x, digits=3):
    if x is None:
        return "n/a"
    if isinstance(x, float) and x.is_integer() and abs(x) >= 1:
        x = int(x)
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        return f"{x:.{digits}g}" if abs(x) < 1e3 else f"{x:,.0f}"
    return str(x)


def one_or_list(values):
    vals = sorted({str(v) for v in values})
    return vals[0] if len(vals) == 1 else ", ".join(vals) + " (differ between runs)"


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: report.py CAMPAIGN_DIR")
    camp = sys.argv[1].rstrip("/")
    name = os.path.basename(camp)
    runs = []
    for rj in sorted(glob.glob(os.path.join(camp, "runs", "*", "run.json"))):
        rdir = os.path.dirname(rj)
        runs.append({"dir": os.path.relpath(rdir, camp), "run": load(rj) or {},
                     "sum": load(os.path.join(rdir, "analysis", "summary.json")) or {}})
    if not runs:
        sys.exit(f"report.py: no run.json under {camp}/runs")
    runs.sort(key=lambda r: (r["run"].get("world_size", 0), r["dir"]))
    camp_json = load(os.path.join(camp, "analysis", "campaign.json"))
    eff = {}
    kinds = []
    one_size = len({r["run"].get("world_size") for r in runs}) == 1
    if camp_json and not one_size:  # scaling efficiency per run, from each accepted series
        for ser in camp_json.get("series", []):
            if ser.get("checkpoint_variant"):  # a checkpoint study's point, not a series of its own
                continue
            sizes = ", ".join(str(g) for g in ser.get("gpus", []))
            kind = f"{ser.get('kind')} scaling" if ser.get("kind") != "single" else "single point"
            kinds.append(f"{ser.get('model')}, {ser.get('layout')}: {kind} over {sizes} rank(s), "
                         f"base {ser.get('base_gpus')}")
            # efficiency per point (repeats share their point's median)
            pts = camp_json.get("points", [])
            for pi, e in zip(ser.get("points", []), ser.get("efficiency", [])):
                for d in (pts[pi].get("runs", []) if pi < len(pts) else []):
                    eff[os.path.basename(str(d).rstrip("/"))] = e

    first = runs[0]["run"]
    starts = sorted(r["run"].get("start_time", "") for r in runs if r["run"].get("start_time"))
    hosts = sorted({h["host"] for r in runs for h in r["run"].get("hosts", [])})
    dev = first.get("device", {})
    hw = f"{dev.get('name', '?')} ({dev.get('kind', '?')}), {dev.get('precision', '?')}"
    if dev.get("kind") == "cpu" and socket.gethostname().split(".")[0] in hosts:
        hw += f"; node {', '.join(hosts)}: {cpu_model()}, {os.cpu_count()} hardware threads"
    else:
        hw += f"; nodes: {', '.join(hosts)}"
    peaks = {r["sum"].get("peak_source") for r in runs if r["sum"].get("peak_source")}
    if camp_json and camp_json.get("campaign_peak"):
        peaks = {camp_json["campaign_peak"]["source"] + " (the per-run table below keeps each run's own)"}
    m = first.get("model", {})
    model = (f"{m.get('name', '?')}: {m.get('n_params', 0):,} parameters, {m.get('n_layers')} layers, "
             f"d_model {m.get('d_model')}, {m.get('n_heads')} heads ({m.get('n_kv_heads')} kv), "
             f"seq_len {m.get('seq_len')}")
    shapes = {(r["run"].get("model", {}).get("name"), r["run"].get("model", {}).get("seq_len")) for r in runs}
    if len(shapes) > 1:
        model = "several: " + ", ".join(f"{n} (seq_len {t})" for n, t in sorted(shapes, key=str)) + " (see the table)"
    steps = one_or_list(r["run"].get("config", {}).get("train", {}).get("steps") for r in runs)
    windows = one_or_list(r["sum"].get("window", {}).get("text", "n/a") for r in runs)

    out = []
    out.append(f"# Campaign {name}\n")
    out.append("| | |\n|---|---|")
    out.append(f"| date | {starts[0] if starts else 'n/a'} (first run start, UTC) |")
    out.append(f"| commit | {one_or_list(r['run'].get('git_commit', '?') for r in runs)} |")
    out.append(f"| hardware | {hw} |")
    out.append(f"| peak FLOP/s | {', '.join(sorted(peaks)) or 'n/a'} |")
    out.append(f"| model | {model} |")
    out.append(f"| steps | {steps} per run |")
    out.append(f"| steady-state window | {windows} |")
    out.append(f"| runs | {len(runs)} |")
    out.append(f"| scaling series | {'; '.join(kinds) or 'none (see the campaign analysis below)'} |\n")

    inv = os.path.join(camp, "invocation.txt")
    notes = []
    if os.path.exists(inv):
        with open(inv) as f:
            notes = [ln[len("# note:"):].strip() for ln in f if ln.startswith("# note:")]
    if notes:
        out.append("Note: " + " ".join(notes) + "\n")
    load_txt = os.path.join(camp, "load.txt")
    if os.path.exists(load_txt):  # --local: the load average around every job
        with open(load_txt) as f:
            lines = [ln.rstrip() for ln in f if ln.strip()]
        worst = 0.0
        for ln in lines:
            try:
                worst = max(worst, float(ln.split(":", 1)[1].split()[0]))
            except (IndexError, ValueError):
                pass
        cores = os.cpu_count() or 1
        if worst > cores:
            out.append(f"**Not a clean measurement: the 1-minute load average reached {worst:g} on "
                       f"{cores} cores during the runs (other work shared the machine).**\n")
        out.append("Load average (1, 5, 15 min) before and after each job:\n")
        out.append("```\n" + "\n".join(lines) + "\n```\n")
    if os.path.exists(inv):
        with open(inv) as f:
            out.append("## Driver invocation\n\nRun from the repository root; then the sbatch line of each job.\n")
            out.append("```\n" + f.read().rstrip() + "\n```\n")

    out.append("## Results\n")
    out.append("Per run (scaletrain-analyze run, median over the window; step time = slowest rank):\n")
    out.append("| run | nodes | ranks | mesh | batch/rank (seq) | tokens/step | step p50 (s) | tok/s | "
               "tok/s/rank | efficiency | MFU % | HFU % | peak GFLOP/s/rank | ckpt overhead |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        run, s = r["run"], r["sum"]
        mesh = run.get("mesh", {})
        mesh_s = "x".join(f"{k}{mesh[k]}" for k in ("dp", "tp", "pp", "cp") if k in mesh)
        tr = run.get("config", {}).get("train", {})
        bpr = tr.get("micro_batch", 0) * tr.get("grad_accum", 1)
        ck = s.get("checkpoint", {}).get("instrumented", {}).get("overhead")
        e = eff.get(os.path.basename(r["dir"]))
        out.append(f"| [{os.path.basename(r['dir'])}]({r['dir']}/analysis/report.md) | {len(run.get('hosts', []))} | "
                   f"{run.get('world_size')} | {mesh_s} | {bpr} | {fmt(s.get('tokens_per_step'))} | "
                   f"{fmt(s.get('step_time_s', {}).get('p50'))} | {fmt(s.get('tok_s'))} | {fmt(s.get('tok_s_gpu'))} | "
                   f"{fmt(e) if e is not None else 'n/a'} | {fmt(s.get('mfu_pct'))} | {fmt(s.get('hfu_pct'))} | "
                   f"{fmt(s['peak_flops'] / 1e9) if s.get('peak_flops') else 'n/a'} | "
                   f"{fmt(100 * ck) + ' %' if ck is not None else 'n/a'} |")
    out.append("")
    ctxt = os.path.join(camp, "analysis", "campaign.txt")
    if os.path.exists(ctxt):
        with open(ctxt) as f:
            out.append("`scaletrain-analyze campaign` said:\n\n```\n" + f.read().rstrip() + "\n```\n")

    order = ["tok_s_gpu_vs_gpus", "mfu_vs_gpus", "scaling_efficiency", "step_breakdown",
             "mfu_by_layout", "ckpt_overhead_vs_interval", "ckpt_cost_vs_interval", "ckpt_write_bandwidth", "ckpt_restore_time"]
    plots = [p + ".svg" for p in order if os.path.exists(os.path.join(camp, "analysis", p + ".svg"))]
    if plots:
        out.append("## Plots\n")
        for p in plots:
            out.append(f"![{p[:-4]}](analysis/{p})\n")
    out.append("## Files\n")
    out.append("- `invocation.txt`: the driver command and every sbatch line it submitted")
    out.append("- `runs/<run>/`: raw run folders: `run.json`, `telemetry/rank_NNNNN.jsonl` (per-rank step and "
               "event records, docs/telemetry.md), `log.txt`; `analysis/` in each is `scaletrain-analyze run`")
    out.append("- `slurm/`: the job logs (`<run>-<jobid>.out`, `analyze-<jobid>.out`)")
    out.append("- `analysis/`: `scaletrain-analyze campaign` outputs (report.md, campaign.csv, campaign.json, "
               "plots with their .dat/.gp sources)")
    out.append("- checkpoints, if any, are not part of the committed folder (`.gitignore`)\n")
    with open(os.path.join(camp, "README.md"), "w") as f:
        f.write("\n".join(out))


if __name__ == "__main__":
    main()
