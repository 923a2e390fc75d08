#!/usr/bin/env bash
# The demo with the token files users bring: the King James Bible (as in
# prepare-corpus.sh) split into a training text (all but the last 5% of its
# verses) and a held-out validation text (the last 5%), each written as an
# llm.c shard by `scaletrain-tokenize --format llmc` into data/llmc/, then a
# 2-rank CPU training run reading the training shard (data.format=auto
# detects llm.c's header) and evaluating on the validation shard every
# EVAL steps; prints the run's report (training and validation loss, and
# loss.svg with both). Builds nothing: pass the build folder.
# Usage: scripts/demo-shards.sh [BUILD_DIR] [extra --set overrides...]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
build=${1:-build}
shift || true
command -v bible >/dev/null || { echo "demo-shards: 'bible' not found; run scripts/install-deps.sh" >&2; exit 2; }
mkdir -p data/llmc
if [[ ! -s data/llmc/train.bin || ! -s data/llmc/val.bin ]]; then
  bible -f "Gen1:1-Rev22:21" | sed -E 's/^[1-3]?[A-Za-z]+[0-9]+:[0-9]+ //' > data/llmc/all.txt
  lines=$(wc -l < data/llmc/all.txt)
  keep=$((lines * 95 / 100))
  head -n "$keep" data/llmc/all.txt > data/llmc/train.txt
  tail -n +"$((keep + 1))" data/llmc/all.txt > data/llmc/val.txt
  "$build/app/scaletrain-tokenize" --format llmc -o data/llmc/train.bin data/llmc/train.txt
  "$build/app/scaletrain-tokenize" --format llmc -o data/llmc/val.bin data/llmc/val.txt
  rm -f data/llmc/all.txt
fi
source scripts/cpu-env.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=results/runs/demo-shards-$(date -u +%Y%m%d-%H%M%S)
ranks=${SCALETRAIN_RANKS:-2}
bash scripts/launch.sh --oversubscribe --bind-to none -np "$ranks" \
  "$build/app/scaletrain" --config configs/default.yaml --set data.path=data/llmc/train.bin \
  --set data.format=auto --set data.val_path=data/llmc/val.bin --set train.eval_interval=10 \
  --set runtime.name=demo-shards --set runtime.out="$out" "$@"
"$build/analysis/scaletrain-analyze" run "$out" > /dev/null
echo
cat "$out/analysis/report.md"
echo
echo "run folder: $out"
echo "detected:   $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["config"]["data"]["format"])' "$out/run.json") (run.json config.data.format)"
echo "plots:      $(cd "$out/analysis" && ls ./*.svg 2>/dev/null | sed 's|^\./||' | tr '\n' ' ')(in $out/analysis)"
