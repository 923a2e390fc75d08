#!/usr/bin/env python3
"""plan_guard.py: asks the planner whether one campaign job fits before a
driver submits it (common.sh's submit calls it for every job).

Runs `scaletrain-plan` on the job's own --config and --set overrides for its
device count, with ZeRO 0-3 and every activation-checkpointing mode as knobs,
finds the job's own layout in plan.json (its tp/pp/cp from the configuration,
dp = devices / (tp*pp*cp)) and:
  - prints "fits: <layout>, predicted peak X GiB of Y GiB" and exits 0, or
  - prints the refusal with the predicted peak and the nearest feasible layout
    (fewest knobs changed, then the planner's best throughput) as --set
    overrides, and exits 3 (the driver stops unless --force).
Exit 2: bad input or the planner failed. Standard library only.

usage: plan_guard.py --plan BIN --cluster FILE --devices N [--devices-per-node G]
                     --name JOB -- TRAINER_ARGS...
"""
import json
import os
import subprocess
import sys
import tempfile

GIB = float(1 << 30)


def die(msg, code=2):
    print(f"plan_guard: {msg}", file=sys.stderr)
    sys.exit(code)


def parse(argv):
    opts = {"dpn": None}
    i = 0
    while i < len(argv) and argv[i] != "--":
        a = argv[i]
        if a in ("--plan", "--cluster", "--devices", "--devices-per-node", "--name"):
            if i + 1 >= len(argv):
                die(f"{a} needs a value")
            opts[{"--plan": "plan", "--cluster": "cluster", "--devices": "devices",
                  "--devices-per-node": "dpn", "--name": "name"}[a]] = argv[i + 1]
            i += 2
        else:
            die(f"unknown option '{a}'")
    for k in ("plan", "cluster", "devices", "name"):
        if k not in opts:
            die(f"--{k} is required")
    trainer = argv[i + 1:]
    # The model: --config and every --set (the planner takes them as the trainer does).
    model = []
    j = 0
    while j < len(trainer):
        if trainer[j] in ("--config", "--set") and j + 1 < len(trainer):
            key = trainer[j + 1].split("=", 1)[0]
            # keys that only steer the job, not its memory or time
            if not key.startswith(("runtime.", "checkpoint.", "data.")) and key != "train.steps":
                model += [trainer[j], trainer[j + 1]]
            j += 2
        else:
            j += 1
    return opts, model


def layout_sets(l):
    return (f"--set parallel.tp={l['tp']} --set parallel.pp={l['pp']} --set parallel.cp={l['cp']} "
            f"--set parallel.zero_stage={l['zero_stage']} --set train.act_ckpt={l['act_ckpt']}")


def describe(l):
    return (f"dp{l['dp']} tp{l['tp']} pp{l['pp']} cp{l['cp']} ZeRO {l['zero_stage']} "
            f"act_ckpt {l['act_ckpt']} micro_batch {l['micro_batch']} grad_accum {l['grad_accum']}")


def main():
    opts, model = parse(sys.argv[1:])
    with tempfile.TemporaryDirectory(prefix="plan_guard.") as tmp:
        cmd = [opts["plan"], "--cluster", opts["cluster"], "--devices", opts["devices"],
               "--zero", "0,1,2,3", "--act-ckpt", "none,selective,full", "--top", "1",
               "--near", "0", "--no-plots", "--out", tmp] + model
        if opts["dpn"]:
            cmd += ["--devices-per-node", opts["dpn"]]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode != 0:
            die("the planner refused the job's configuration:\n  " + " ".join(cmd) + "\n" +
                p.stdout[-2000:])
        with open(os.path.join(tmp, "plan.json")) as f:
            plan = json.load(f)
    base = plan["base"]
    n = int(opts["devices"])
    per = base["tp"] * base["pp"] * base["cp"]
    if per <= 0 or n % per:
        die(f"{opts['name']}: {n} devices are not a multiple of tp*pp*cp = {per}")
    want = dict(base, dp=n // per)
    # pipeline_layers: the job's own split, not another the planner tried
    knobs = ("dp", "tp", "pp", "cp", "sp", "zero_stage", "num_model_chunks", "micro_batch",
             "grad_accum", "act_ckpt", "pipeline_layers")
    mine = [l for l in plan["layouts"] if all(l[k] == want[k] for k in knobs)]
    if not mine:
        die(f"{opts['name']}: the planner has no row for the job's layout {describe(want)}")
    me = mine[0]
    avail = plan["cluster"]["memory_bytes"] - plan["cluster"]["memory_reserved_bytes"]
    cl = plan["cluster"]["name"]
    peak = me.get("memory", {}).get("total")
    if me["feasible"]:
        print(f"plan_guard: {opts['name']} fits on {cl}: {describe(me)}, predicted peak "
              f"{peak / GIB:.1f} GiB of {avail / GIB:.1f} GiB per device")
        return 0
    why = (f"predicted peak {peak / GIB:.1f} GiB per device, {avail / GIB:.1f} GiB available"
           if peak is not None else me.get("reason", "not feasible"))
    ok = [l for l in plan["layouts"] if l["feasible"]]
    msg = (f"plan_guard: refusing {opts['name']}: {describe(me)} on {n} x {cl} does not fit: "
           f"{why}")
    if me.get("reason"):
        msg += f" ({me['reason']})"
    if ok:
        # nearest: fewest knobs changed, then the planner's ranking (best throughput first)
        near = min(ok, key=lambda l: (sum(l[k] != me[k] for k in knobs), l["rank"]))
        msg += (f"\n  nearest feasible layout: {describe(near)}, predicted peak "
                f"{near['memory']['total'] / GIB:.1f} GiB, "
                f"{near['time']['tokens_per_s_device']:.0f} tok/s per device"
                f"\n  overrides: {layout_sets(near)}")
    else:
        msg += f"\n  no layout of this model fits {n} x {cl} (ZeRO 0-3, any act_ckpt)"
    msg += "\n  --force submits it anyway"
    print(msg, file=sys.stderr)
    return 3


if __name__ == "__main__":
    sys.exit(main())
