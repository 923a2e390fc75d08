#!/usr/bin/env bash
# Start-up time against corpus size: the trainer's seconds from launch to the
# start of step 1 (the telemetry's t_start) on a generated 2 MB and 2 GB token
# set, as a raw file and as a folder of llm.c shards, and the ratio 2 GB / 2 MB
# measured in the same run. With a second binary (BEFORE, e.g. a scaletrain
# built from an earlier commit, which reads raw files only) its raw figures
# are printed beside. The sets are written under $TMPDIR (not the checkout)
# and removed at the end; the page cache is warm (they were just written).
# Usage: scripts/bench-data-startup.sh [BUILD_DIR] [BEFORE_SCALETRAIN] [REPEATS]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
before=${2:-}
reps=${3:-3}
after=$build/app/scaletrain
[[ -x $after ]] || { echo "bench-data-startup: no $after (build first)" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/st-bench-data-XXXXXX")
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

# Byte-level ids of real text (uint16, ids < 256) repeated to the size wanted:
# raw.bin, and shards/part_NN.bin (llm.c layout, 8 shards).
python3 - "$work" <<'EOF'
import os, struct, sys
work = sys.argv[1]
text = open("/usr/share/common-licenses/GPL-3", "rb").read() if os.path.exists(
    "/usr/share/common-licenses/GPL-3") else bytes(range(32, 127)) * 400
block = b"".join(struct.pack("<H", b) for b in text)
block = (block * (1 + (1 << 20) // len(block)))[: 1 << 20]  # 1 MiB = 512 Ki ids
for name, mib in (("small", 2), ("big", 2048)):
    d = os.path.join(work, name)
    os.makedirs(os.path.join(d, "shards"))
    with open(os.path.join(d, "raw.bin"), "wb") as f:
        for _ in range(mib):
            f.write(block)
    shards = 8 if mib >= 8 else 2
    per_mib = mib // shards
    for k in range(shards):
        with open(os.path.join(d, "shards", "part_%02d.bin" % k), "wb") as f:
            hdr = [0] * 256
            hdr[0], hdr[1], hdr[2] = 20240520, 1, per_mib * (1 << 19)
            f.write(struct.pack("<256i", *hdr))
            for _ in range(per_mib):
                f.write(block)
EOF

# Seconds from launch to the start of step 1, best of $reps.
startup() {
  local bin=$1 path=$2 best="" i
  for ((i = 0; i < reps; i++)); do
    local out=$work/run-$RANDOM$RANDOM
    local t0
    t0=$(date +%s.%N)
    mpiexec -n 1 "$bin" --config "$here/configs/models/tiny.yaml" --set train.steps=1 \
      --set data.source=file --set "data.path=$path" --set runtime.cpu_peak_gflops=1 \
      --set checkpoint.interval=0 --out "$out" >"$work/log.txt" 2>&1 ||
      { cat "$work/log.txt" >&2; exit 1; }
    local s
    s=$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("type") == "step": print(r["t_start"] - float(sys.argv[2])); break' \
      "$out/telemetry/rank_00000.jsonl" "$t0")
    rm -rf "$out"
    if [[ -z $best ]] || python3 -c "import sys; sys.exit(not $s < $best)"; then best=$s; fi
  done
  echo "$best"
}

printf '%-8s %-22s %10s %10s %8s\n' binary set "2MB_s" "2GB_s" "2GB/2MB"
row() {
  local label=$1 bin=$2 sub=$3 a b
  a=$(startup "$bin" "$work/small/$sub")
  b=$(startup "$bin" "$work/big/$sub")
  printf '%-8s %-22s %10.3f %10.3f %8.2f\n' "$label" "$sub" "$a" "$b" \
    "$(python3 -c "print($b / $a)")"
}
[[ -n $before ]] && row before "$before" raw.bin
row after "$after" raw.bin
row after "$after" shards
