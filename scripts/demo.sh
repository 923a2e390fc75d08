#!/usr/bin/env bash
# The main job: installs the distribution packages it needs, builds only the
# programs it runs (the trainer, the tokenizer, the analysis), prepares the
# real-text corpus, runs a 2-rank CPU training run of the default model with
# checkpoints and per-rank telemetry, then prints the run's report and how
# long each phase took. It trains with train.precision=auto (bf16 where the
# CPU multiplies bf16 in hardware, else fp32; the report says which); a
# --set given here overrides it. scripts/test.sh builds the rest (the tests,
# the CUDA backend where nvcc is) in the same build folder, so little built
# here is built twice (the few files that include the build's options).
# Usage: scripts/demo.sh [extra --set overrides for the run...]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

# Phases: each announced as it starts, its time printed as it ends and again
# in the summary at the end.
phases=()
t_all=$SECONDS
t_phase=$SECONDS
begin() { echo "demo: [$1] $2" >&2; t_phase=$SECONDS; }
end() {
  local s=$((SECONDS - t_phase))
  phases+=("$1 $((s / 60))m$(printf %02d $((s % 60)))s")
  echo "demo: [$1] done in $((s / 60))m$(printf %02d $((s % 60)))s" >&2
}

begin install "the packages the demo needs (scripts/install-deps.sh --demo)"
bash scripts/install-deps.sh --demo
end install

# The demo runs on CPU ranks: no CUDA backend, even where nvcc is installed
# (scripts/test.sh configures the preset as it is, CUDA included, and
# builds the rest).
begin configure "cmake --preset cpu -DSCALETRAIN_CUDA=OFF"
cmake --preset cpu -DSCALETRAIN_CUDA=OFF >/dev/null
end configure

# Only the programs the demo runs (and what they link); ninja prints each
# step as [done/total].
targets=(scaletrain scaletrain-tokenize scaletrain-analyze)
begin build "${targets[*]} ($(nproc) jobs)"
cmake --build --preset cpu -j "$(nproc)" --target "${targets[@]}"
end build

begin corpus "the King James Bible as byte tokens (scripts/prepare-corpus.sh)"
bash scripts/prepare-corpus.sh build
end corpus

source scripts/cpu-env.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=results/runs/demo-$(date -u +%Y%m%d-%H%M%S)
ranks=${SCALETRAIN_RANKS:-2}
begin train "$ranks ranks into $out"
# launch.sh: mpirun with Ctrl-C turned into an emergency checkpoint (exit 3).
bash scripts/launch.sh --oversubscribe --bind-to none -np "$ranks" \
  build/app/scaletrain --config configs/default.yaml --set runtime.out="$out" \
  --set train.precision=auto "$@"
end train

begin report "scaletrain-analyze run $out"
build/analysis/scaletrain-analyze run "$out" > /dev/null
end report

echo
cat "$out/analysis/report.md"
echo
echo "run folder: $out"
echo "report:     $out/analysis/report.md"
echo "plots:      $(cd "$out/analysis" && ls ./*.svg 2>/dev/null | sed 's|^\./||' | tr '\n' ' ')(in $out/analysis)"
s=$((SECONDS - t_all))
echo "time:       $(IFS=,; echo "${phases[*]}" | sed 's/,/, /g'); total $((s / 60))m$(printf %02d $((s % 60)))s"
echo "tests:      scripts/test.sh builds the rest in the same build folder and runs them"
