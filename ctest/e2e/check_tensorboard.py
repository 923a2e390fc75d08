#!/usr/bin/env python3
"""Reads TensorBoard event files back and checks every scalar against the run's
telemetry (rank 0's records and run.json), independently of the C++ writer:
the record framing and its masked CRC32C by hand, the Event/Summary messages
with Debian's python3-protobuf (classes generated from lib/tensorboard/
event.proto by protoc at test time), the expected tags and values from the
rule in docs/tensorboard.md re-implemented here.

With --log, the tokens/s of each progress line of RUN_DIR/log.txt (the last
line of a step done again) must be TensorBoard's, to the line's precision:
one tok/s definition.

usage: check_tensorboard.py PROTOC PROTO_DIR RUN_DIR TB_DIR [--same-as OTHER_TB_DIR] [--log]
Prints "checked N scalars in M events: all equal" and exits 0, else 1.
"""
import atexit
import glob
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def load_pb(protoc, proto_dir):
    out = tempfile.mkdtemp(prefix="tbpb-")
    atexit.register(shutil.rmtree, out, True)  # the generated module's folder
    subprocess.run([protoc, "-I", proto_dir, "--python_out=" + out, "event.proto"], check=True)
    sys.path.insert(0, out)
    import event_pb2  # noqa: E402
    return event_pb2


def read_events(pb, tb_dir):
    files = sorted(glob.glob(os.path.join(tb_dir, "*tfevents*")))
    if len(files) != 1:
        raise SystemExit("%s: expected one event file, found %d" % (tb_dir, len(files)))
    raw = open(files[0], "rb").read()
    pos, events = 0, []
    while pos < len(raw):
        header = raw[pos:pos + 8]
        (n,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", raw[pos + 8:pos + 12])
        assert hcrc == masked(header), "length CRC at byte %d" % pos
        data = raw[pos + 12:pos + 12 + n]
        (dcrc,) = struct.unpack("<I", raw[pos + 12 + n:pos + 16 + n])
        assert dcrc == masked(data), "data CRC at byte %d" % pos
        ev = pb.Event()
        ev.ParseFromString(data)
        events.append(ev)
        pos += 16 + n
    assert events and events[0].file_version == "brain.Event:2", "first record: file_version"
    return events[1:]


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def numbers(prefix, v, out):
    if v is None:
        out.append((prefix, float("nan")))
    elif isinstance(v, bool) or isinstance(v, (str, list)):
        return
    elif isinstance(v, (int, float)):
        out.append((prefix, float(v)))
    elif isinstance(v, dict):
        for k, x in v.items():
            numbers(prefix + "/" + k, x, out)


def expected(run_dir):
    run = json.load(open(os.path.join(run_dir, "run.json")))
    m = run["model"]
    world = run["world_size"]
    peak = run["device"]["peak_flops"]
    N, L, d, T = m["n_params"], m["n_layers"], m["d_model"], m["seq_len"]
    fwd = 2.0 * N * T + L * 2.0 * 2.0 * d * T * T
    model_flops = 3.0 * fwd
    ac = run["config"]["train"]["act_ckpt"]
    hw_flops = {"full": model_flops * 4.0 / 3.0,
                "selective": model_flops + L * 4.0 * d * T * T}.get(ac, model_flops)
    recs, step_at = [], {}
    for line in open(os.path.join(run_dir, "telemetry", "rank_00000.jsonl")):
        r = json.loads(line)
        if r.get("type") == "step":
            if r["step"] in step_at:
                recs[step_at[r["step"]]] = None
            step_at[r["step"]] = len(recs)
        recs.append(r)
    out = []  # (step, wall_time, [(tag, value)])
    for r in recs:
        if r is None or "step" not in r or r.get("type") not in ("step", "event"):
            continue
        vals = []
        if r["type"] == "step":
            for k, v in r.items():
                if k in ("type", "step", "t_start", "t"):
                    continue
                numbers(k if isinstance(v, dict) else "train/" + k, v, vals)
            # The slowest rank's pace, the progress line's (one tok/s definition).
            tok_s = r["global_tokens"] / r["slowest_step_s"]
            vals.append(("throughput/tokens_per_s", tok_s))
            vals.append(("throughput/tokens_per_s_per_device", tok_s / world))
            seq_s = tok_s / T
            vals.append(("utilization/mfu_percent", 100 * (model_flops * seq_s / (world * peak))))
            vals.append(("utilization/hfu_percent", 100 * (hw_flops * seq_s / (world * peak))))
            wall = r["t_start"] + r["step_s"]
        else:
            for k, v in r.items():
                if k in ("type", "event", "step", "t_start", "t"):
                    continue
                numbers(r["event"] + "/" + k, v, vals)
            wall = r["t"]
        if vals:
            out.append((r["step"], wall, vals))
    return out


def progress_tok_s(run_dir):
    """{step: tok/s} from the progress lines of log.txt, the last line of a step."""
    out = {}
    pat = re.compile(r"step\s+(\d+)/\d+ \| loss \S+ \|\s+(\d+) tok/s")
    for line in open(os.path.join(run_dir, "log.txt")):
        m = pat.search(line)
        if m:
            out[int(m.group(1))] = float(m.group(2))
    return out


def check_log(run_dir, got, bad):
    tb = {ev.step: v.simple_value for ev in got for v in ev.summary.value
          if v.tag == "throughput/tokens_per_s"}
    lines = progress_tok_s(run_dir)
    if not lines:
        bad.append("no progress lines in %s/log.txt" % run_dir)
    for step, printed in sorted(lines.items()):
        if step not in tb:
            bad.append("step %d: a progress line, no TensorBoard tokens_per_s" % step)
        elif abs(tb[step] - printed) > 1.0:  # printed as %.0f
            bad.append("step %d: progress line %.0f tok/s, TensorBoard %r" % (step, printed, tb[step]))
    return len(lines)


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


def main():
    args = sys.argv[1:]
    other = None
    with_log = "--log" in args
    if with_log:
        args.remove("--log")
    if "--same-as" in args:
        i = args.index("--same-as")
        other = args[i + 1]
        del args[i:i + 2]
    protoc, proto_dir, run_dir, tb_dir = args
    pb = load_pb(protoc, proto_dir)
    got = read_events(pb, tb_dir)
    want = expected(run_dir)
    bad = []
    if len(got) != len(want):
        bad.append("%d events, telemetry has %d records with scalars" % (len(got), len(want)))
    checked = 0
    tags = set()
    for ev, (step, wall, vals) in zip(got, want):
        if ev.step != step or ev.wall_time != wall:
            bad.append("event step %d wall %r, telemetry step %d wall %r" % (ev.step, ev.wall_time, step, wall))
        gv = [(v.tag, v.simple_value) for v in ev.summary.value]
        if [t for t, _ in gv] != [t for t, _ in vals]:
            bad.append("step %d: tags %s, telemetry %s" % (step, [t for t, _ in gv], [t for t, _ in vals]))
            continue
        for (tag, g), (_, w) in zip(gv, vals):
            tags.add(tag)
            checked += 1
            if not same(g, f32(w)):
                bad.append("step %d %s: %r, telemetry %r (float32 %r)" % (step, tag, g, w, f32(w)))
    for t in ("train/loss", "train/lr", "train/grad_norm", "eval/val_loss", "throughput/tokens_per_s",
              "throughput/tokens_per_s_per_device", "utilization/mfu_percent", "utilization/hfu_percent",
              "train/step_s", "train/fwd_s", "train/bwd_s", "train/optim_s", "train/comm_s",
              "train/data_s", "mem_bytes/params", "mem_bytes/grads", "mem_bytes/optim",
              "mem_bytes/activations", "train/mem_peak_bytes", "train/ckpt_stall_s",
              "ckpt_commit/stall_s"):
        if t not in tags:
            bad.append("tag %s missing" % t)
    if other:
        theirs = read_events(pb, other)
        if [(e.step, e.wall_time, e.summary.SerializeToString()) for e in theirs] != \
                [(e.step, e.wall_time, e.summary.SerializeToString()) for e in got]:
            bad.append("%s and %s differ" % (tb_dir, other))
    if with_log:
        print("compared %d progress lines' tok/s" % check_log(run_dir, got, bad))
    for b in bad[:20]:
        print("MISMATCH:", b)
    if bad:
        return 1
    print("checked %d scalars (%d tags) in %d events: all equal to the telemetry" % (checked, len(tags), len(got)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
