#!/usr/bin/env bash
# The main job: installs the distribution packages, builds, prepares the
# real-text corpus, runs a 2-rank CPU training run of the default model with
# checkpoints and per-rank telemetry, then prints the run's report. It trains
# with train.precision=auto (bf16 where the CPU multiplies bf16 in hardware,
# else fp32; the report says which); a --set given here overrides it.
# Usage: scripts/demo.sh [extra --set overrides for the run...]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
bash scripts/install-deps.sh
cmake --preset cpu >/dev/null
cmake --build --preset cpu -j "$(nproc)"
bash scripts/prepare-corpus.sh build
source scripts/cpu-env.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=results/runs/demo-$(date -u +%Y%m%d-%H%M%S)
ranks=${SCALETRAIN_RANKS:-2}
# launch.sh: mpirun with Ctrl-C turned into an emergency checkpoint (exit 3).
bash scripts/launch.sh --oversubscribe --bind-to none -np "$ranks" \
  build/app/scaletrain --config configs/default.yaml --set runtime.out="$out" \
  --set train.precision=auto "$@"
build/analysis/scaletrain-analyze run "$out" > /dev/null
echo
cat "$out/analysis/report.md"
echo
echo "run folder: $out"
echo "report:     $out/analysis/report.md"
echo "plots:      $(cd "$out/analysis" && ls ./*.svg 2>/dev/null | sed 's|^\./||' | tr '\n' ' ')(in $out/analysis)"
