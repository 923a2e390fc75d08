#!/usr/bin/env bash
# Builds scaletrain and runs every test that needs no GPU (labels unit, mpi,
# e2e, slurm). Installs the distribution packages first. This is the README's
# test command and what CI runs.
# Usage: scripts/test.sh [--preset ci|cpu|asan] [extra ctest args...]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
preset=cpu
if [[ "${1:-}" == "--preset" ]]; then preset=$2; shift 2; fi
bash scripts/install-deps.sh
jobs=$(nproc)
cmake --preset "$preset"
cmake --build --preset "$preset" -j "$jobs"
# Tests run oversubscribed MPI jobs; run them one at a time on small machines.
ctest --preset "$preset" -j 1 "$@"
