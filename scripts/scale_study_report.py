#!/usr/bin/env python3
"""Report of scripts/scale-study.sh: reads OUT/timings.tsv, the runs' telemetry
and the resumed runs' telemetry, and writes OUT/scale.md (the table),
scale.csv, scale.json and three SVG plots (start-up, step and checkpoint
times, resident memory; against ranks on a log2 axis).

Usage: scale_study_report.py OUT
"""
import csv
import glob
import json
import math
import os
import statistics
import sys

out = sys.argv[1]


def records(run):
    """Per rank file: (header, steps, events)."""
    files = sorted(glob.glob(f"{run}/telemetry/rank_*.jsonl"))
    res = []
    for f in files:
        head, steps, events = None, [], []
        for line in open(f):
            r = json.loads(line)
            t = r.get("type")
            if t == "header":
                head = r
            elif t == "step":
                steps.append(r)
            elif t == "event":
                events.append(r)
        res.append((head, steps, events))
    return res


def med(xs):
    return statistics.median(xs) if xs else float("nan")


rows = []
for line in open(f"{out}/timings.tsv"):
    n, half, t0, t1, t2, t3, t4, t5, rss = line.rstrip("\n").split("\t")
    n, half = int(n), int(half)
    t0, t1, t2, t3, t4, t5 = map(float, (t0, t1, t2, t3, t4, t5))
    rss_max_kb, anon_max_kb, pss_total_kb = map(int, rss.split())
    name = f"r{n:04d}"
    recs = records(f"{out}/runs/{name}")
    if len(recs) != n:
        sys.exit(f"scale_study_report.py: {name} has {len(recs)} rank files, expected {n}")
    first_start = max(s[0]["t_start"] for _, s, _ in recs)
    startup_s = [h["startup_s"] for h, _, _ in recs]
    startup_cpu = [h["startup_cpu_s"] for h, _, _ in recs]
    by_step = {}
    for _, steps, _ in recs:
        for s in steps:
            by_step.setdefault(s["step"], []).append(s["step_s"])
    if any(len(v) != n for v in by_step.values()):
        sys.exit(f"scale_study_report.py: {name}: a step is missing on some rank")
    slowest = {k: max(v) for k, v in by_step.items()}
    commits = [e for _, _, ev in recs for e in ev if e["event"] == "ckpt_commit"]
    saves = sorted({e["step"] for e in commits})
    if any(sum(1 for e in commits if e["step"] == s) != n for s in saves):
        sys.exit(f"scale_study_report.py: {name}: a checkpoint was not committed by every rank")
    plain = [v for k, v in slowest.items() if k > 1 and k not in saves]
    rrecs = records(glob.glob(f"{out}/resume/{name}-to-*")[0])
    loads = [e["load_s"] for _, _, ev in rrecs for e in ev if e["event"] == "ckpt_resume"]
    if len(rrecs) != half or len(loads) != half:
        sys.exit(f"scale_study_report.py: {name}: the resume at {half} ranks is incomplete")
    rows.append({
        "ranks": n,
        "launch_to_first_step_s": first_start - t0,
        "rank_startup_s_max": max(startup_s),
        "rank_startup_cpu_s_median": med(startup_cpu),
        "rank_startup_cpu_s_max": max(startup_cpu),
        "rss_per_rank_mb_max": rss_max_kb / 1024,
        "anon_per_rank_mb_max": anon_max_kb / 1024,
        "pss_total_mb_max": pss_total_kb / 1024,
        "median_step_s": med(plain),
        "ckpt_saves": len(saves),
        "ckpt_stall_s_median": med([e["stall_s"] for e in commits]),
        "ckpt_write_s_median": med([e["write_s"] for e in commits]),
        "ckpt_write_s_max": max(e["write_s"] for e in commits),
        "run_wall_s": t1 - t0,
        "resume_ranks": half,
        "resume_wall_s": t3 - t2,
        "resume_load_s_max": max(loads),
        "analyze_run_s": t5 - t4,
    })

camp = open(f"{out}/campaign_time.txt").read().split()
campaign_s = float(camp[2]) - float(camp[1])

cols = list(rows[0].keys())
with open(f"{out}/scale.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=cols)
    w.writeheader()
    w.writerows(rows)
json.dump({"runs": rows, "analyze_campaign_s": campaign_s}, open(f"{out}/scale.json", "w"), indent=1)

md = ["| ranks | launch to first step (s) | rank start-up, slowest (s) | start-up CPU per rank, median / max (s) "
      "| RSS per rank, max (MB) | anonymous per rank, max (MB) | PSS all ranks (MB) | median step (s) | ckpt stall, median (s) "
      "| ckpt write+vote+commit, median / max (s) | run wall (s) | resume into | resume wall (s) | resume load_s, max "
      "| analyze run (s) |",
      "|" + "---|" * 15]
for r in rows:
    md.append(f"| {r['ranks']} | {r['launch_to_first_step_s']:.2f} | {r['rank_startup_s_max']:.2f} "
              f"| {r['rank_startup_cpu_s_median']:.3f} / {r['rank_startup_cpu_s_max']:.3f} "
              f"| {r['rss_per_rank_mb_max']:.1f} | {r['anon_per_rank_mb_max']:.1f} | {r['pss_total_mb_max']:.0f} "
              f"| {r['median_step_s']:.3f} "
              f"| {r['ckpt_stall_s_median']:.4f} | {r['ckpt_write_s_median']:.3f} / {r['ckpt_write_s_max']:.3f} "
              f"| {r['run_wall_s']:.1f} | {r['resume_ranks']} | {r['resume_wall_s']:.1f} "
              f"| {r['resume_load_s_max']:.3f} | {r['analyze_run_s']:.2f} |")
md.append("")
md.append(f"`scaletrain-analyze campaign` over all {len(rows)} runs: {campaign_s:.2f} s.")
open(f"{out}/scale.md", "w").write("\n".join(md) + "\n")
print("\n".join(md))


def svg_plot(path, title, ylabel, series, logy=False):
    """Lines over ranks (log2 x axis); series: [(label, [(x, y)...])]."""
    W, H, L, R, T, B = 640, 400, 70, 170, 40, 50
    xs = [x for _, pts in series for x, _ in pts]
    ys = [y for _, pts in series for _, y in pts if y > 0 or not logy]
    fx = lambda x: L + (math.log2(x) - math.log2(min(xs))) / max(1e-9, math.log2(max(xs)) - math.log2(min(xs))) * (W - L - R)
    if logy:
        lo, hi = math.log10(min(ys)), math.log10(max(ys))
        lo, hi = math.floor(lo), math.ceil(hi) if hi > lo else math.floor(lo) + 1
        fy = lambda y: H - B - (math.log10(y) - lo) / (hi - lo) * (H - T - B)
        ticks = [10 ** k for k in range(lo, hi + 1)]
    else:
        hi = max(ys) * 1.1 if ys else 1
        fy = lambda y: H - B - y / hi * (H - T - B)
        ticks = [hi * k / 5 for k in range(6)]
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]
    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W/2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
         f'<line x1="{L}" y1="{H-B}" x2="{W-R}" y2="{H-B}" stroke="black"/>',
         f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H-B}" stroke="black"/>',
         f'<text x="{(L+W-R)/2}" y="{H-12}" text-anchor="middle">ranks (one 2-core machine, oversubscribed)</text>',
         f'<text x="16" y="{(T+H-B)/2}" text-anchor="middle" transform="rotate(-90 16 {(T+H-B)/2})">{ylabel}</text>']
    for x in sorted(set(xs)):
        s.append(f'<text x="{fx(x):.1f}" y="{H-B+16}" text-anchor="middle">{x}</text>')
    for t in ticks:
        s.append(f'<line x1="{L-4}" y1="{fy(t):.1f}" x2="{W-R}" y2="{fy(t):.1f}" stroke="#ddd"/>')
        s.append(f'<text x="{L-6}" y="{fy(t)+4:.1f}" text-anchor="end">{t:.3g}</text>')
    for i, (label, pts) in enumerate(series):
        c = colors[i % len(colors)]
        pts = [(x, y) for x, y in pts if y > 0 or not logy]
        s.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>' % (
            c, " ".join(f"{fx(x):.1f},{fy(y):.1f}" for x, y in pts)))
        for x, y in pts:
            s.append(f'<circle cx="{fx(x):.1f}" cy="{fy(y):.1f}" r="3" fill="{c}"/>')
        s.append(f'<line x1="{W-R+10}" y1="{T+10+18*i}" x2="{W-R+30}" y2="{T+10+18*i}" stroke="{c}" stroke-width="2"/>')
        s.append(f'<text x="{W-R+34}" y="{T+14+18*i}">{label}</text>')
    s.append("</svg>")
    open(path, "w").write("\n".join(s) + "\n")


def series(key):
    return [(r["ranks"], r[key]) for r in rows]


svg_plot(f"{out}/startup.svg", "Start-up", "seconds", [
    ("launch to first step", series("launch_to_first_step_s")),
    ("slowest rank start-up", series("rank_startup_s_max")),
    ("start-up CPU / rank (max)", series("rank_startup_cpu_s_max"))], logy=True)
svg_plot(f"{out}/step_checkpoint.svg", "Step and checkpoint", "seconds", [
    ("median step", series("median_step_s")),
    ("ckpt stall (median)", series("ckpt_stall_s_median")),
    ("ckpt write+commit (median)", series("ckpt_write_s_median")),
    ("resume wall", series("resume_wall_s")),
    ("analyze run", series("analyze_run_s"))], logy=True)
svg_plot(f"{out}/memory.svg", "Memory", "MB", [
    ("RSS of a rank (max)", series("rss_per_rank_mb_max")),
    ("anonymous of a rank (max)", series("anon_per_rank_mb_max")),
    ("PSS of the job / ranks", [(r["ranks"], r["pss_total_mb_max"] / r["ranks"]) for r in rows])])
