#!/usr/bin/env python3
"""expand_sweep.py: expands an MFU-sweep campaign YAML (configs/campaigns/)
into one line per job for mfu_sweep.sh: the sweep name on the first line,
then `name<TAB>nodes<TAB>ranks<TAB>placement<TAB>trainer arguments`
(placement: block or cyclic, the campaign's `placement`). Every error names the
file and the key. Format: docs/campaigns.md."""
import sys

import yaml


def fail(msg):
    sys.exit(f"mfu_sweep: {sys.argv[1]}: {msg}")


def need(d, key, kind, default=None):
    if key not in d:
        if default is not None:
            return default
        fail(f"missing key '{key}'")
    v = d[key]
    if kind is int and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
        fail(f"'{key}': expected a positive integer, got {v!r}")
    if kind is list and (not isinstance(v, list) or not v):
        fail(f"'{key}': expected a non-empty list, got {v!r}")
    if kind is str and not isinstance(v, str):
        fail(f"'{key}': expected a string, got {v!r}")
    return v


def word(s, where):
    s = str(s)
    if not s or any(c.isspace() for c in s):
        fail(f"{where}: '{s}' must be one word without spaces")
    return s


def main():
    try:
        with open(sys.argv[1]) as f:
            spec = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        fail(str(e))
    if not isinstance(spec, dict):
        fail("expected a mapping at the top level")
    known = {"name", "models", "seq_lens", "layouts", "steps", "micro_batch", "grad_accum", "set",
             "placement"}
    for k in spec:
        if k not in known:
            fail(f"unknown key '{k}' (known: {', '.join(sorted(known))})")
    name = word(need(spec, "name", str), "name")
    models = need(spec, "models", list)
    seqs = need(spec, "seq_lens", list)
    layouts = need(spec, "layouts", list)
    steps = need(spec, "steps", int, 20)
    mb = need(spec, "micro_batch", int, 1)
    ga = need(spec, "grad_accum", int, 1)
    common = [word(s, "set") for s in spec.get("set", []) or []]
    placement = spec.get("placement", "block")
    if placement not in ("block", "cyclic"):
        fail(f"'placement': expected block or cyclic, got {placement!r}")
    print(name)
    for m in models:
        m = word(m, "models")
        for t in seqs:
            if not isinstance(t, int) or t < 1:
                fail(f"seq_lens: expected positive integers, got {t!r}")
            for i, lay in enumerate(layouts):
                if not isinstance(lay, dict):
                    fail(f"layouts[{i}]: expected a mapping with name, nodes, ranks_per_node, set")
                lname = word(need(lay, "name", str), f"layouts[{i}].name")
                nodes = need(lay, "nodes", int, 1)
                rpn = need(lay, "ranks_per_node", int)
                sets = [word(s, f"layouts[{i}].set") for s in lay.get("set", []) or []]
                args = ["--config", f"configs/models/{m}.yaml", "--set", f"model.seq_len={t}",
                        "--set", f"train.steps={steps}", "--set", f"train.micro_batch={mb}",
                        "--set", f"train.grad_accum={ga}"]
                for s in common + sets:
                    args += ["--set", s]
                print(f"{m}-s{t}-{lname}\t{nodes}\t{nodes * rpn}\t{placement}\t{' '.join(args)}")


if __name__ == "__main__":
    main()
