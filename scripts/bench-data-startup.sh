#!/usr/bin/env bash
# Start-up time against corpus size: the trainer's seconds from launch to the
# start of step 1 (the telemetry's t_start) on a generated 2 MB and 2 GB token
# set, as a raw file, as a folder of llm.c shards and as a Megatron-LM pair
# (PREFIX.bin with PREFIX.idx beside it; sentence-sized sequences of 32 ids,
# as Megatron's --split-sentences writes, so the index of the 2 GB set holds
# 33.6 M sequences, 0.4 GB, and the pair is 2.4 GB), and the ratio 2 GB /
# 2 MB measured in the same run. With a second binary (BEFORE, e.g. a
# scaletrain built from an earlier commit) its figures are printed beside.
# The sets are written under $TMPDIR (not the checkout) and removed at the
# end; the page cache is warm (they were just written).
# Usage: scripts/bench-data-startup.sh [BUILD_DIR] [BEFORE_SCALETRAIN] [REPEATS] [SETS]
#   SETS: any of raw, shards, megatron, comma-separated (default all three)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
before=${2:-}
reps=${3:-3}
sets=${4:-raw,shards,megatron}
after=$build/app/scaletrain
[[ -x $after ]] || { echo "bench-data-startup: no $after (build first)" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/st-bench-data-XXXXXX")
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

# Byte-level ids of real text (uint16, ids < 256) repeated to the size wanted:
# raw.bin, shards/part_NN.bin (llm.c layout, 8 shards) and meg/corpus.{bin,idx}.
python3 - "$work" "$sets" <<'EOF'
import os, struct, sys
from array import array
work, sets = sys.argv[1], sys.argv[2].split(",")
text = open("/usr/share/common-licenses/GPL-3", "rb").read() if os.path.exists(
    "/usr/share/common-licenses/GPL-3") else bytes(range(32, 127)) * 400
block = b"".join(struct.pack("<H", b) for b in text)
block = (block * (1 + (1 << 20) // len(block)))[: 1 << 20]  # 1 MiB = 512 Ki ids
for name, mib in (("small", 2), ("big", 2048)):
    d = os.path.join(work, name)
    os.makedirs(d)
    if "raw" in sets:
        with open(os.path.join(d, "raw.bin"), "wb") as f:
            for _ in range(mib):
                f.write(block)
    if "shards" in sets:
        os.makedirs(os.path.join(d, "shards"))
        shards = 8 if mib >= 8 else 2
        per_mib = mib // shards
        for k in range(shards):
            with open(os.path.join(d, "shards", "part_%02d.bin" % k), "wb") as f:
                hdr = [0] * 256
                hdr[0], hdr[1], hdr[2] = 20240520, 1, per_mib * (1 << 19)
                f.write(struct.pack("<256i", *hdr))
                for _ in range(per_mib):
                    f.write(block)
    if "megatron" in sets:
        # Megatron-LM's _IndexWriter layout (docs/data.md): uint16 ids (code
        # 8), sequences of 32 ids back to back, a document every 16.
        os.makedirs(os.path.join(d, "meg"))
        with open(os.path.join(d, "meg", "corpus.bin"), "wb") as f:
            for _ in range(mib):
                f.write(block)
        seqs = (mib << 19) // 32
        docs = array("q", range(0, seqs, 16))
        docs.append(seqs)
        with open(os.path.join(d, "meg", "corpus.idx"), "wb") as f:
            f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, seqs, len(docs)))
            for at in range(0, seqs, 1 << 20):
                (array("i", [32]) * min(1 << 20, seqs - at)).tofile(f)
            for at in range(0, seqs, 1 << 20):
                array("q", range(at * 64, min(seqs, at + (1 << 20)) * 64, 64)).tofile(f)
            docs.tofile(f)
EOF
du -sh "$work"/small/* "$work"/big/* >&2

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
for set in ${sets//,/ }; do
  case $set in
    raw) sub=raw.bin ;;
    shards) sub=shards ;;
    megatron) sub=meg/corpus ;;
    *) echo "bench-data-startup: unknown set '$set' (raw, shards, megatron)" >&2; exit 2 ;;
  esac
  [[ -n $before ]] && row before "$before" "$sub"
  row after "$after" "$sub"
done
