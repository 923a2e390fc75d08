#!/usr/bin/env bash
# Makes the default run's training text: the King James Bible (public domain;
# Debian package bible-kjv, installed by scripts/install-deps.sh) as a
# byte-level token file data/corpus.bin (+ .json sidecar). Idempotent.
# Usage: scripts/prepare-corpus.sh BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
out=$here/data/corpus.bin
if [[ -s $out && -s $out.json ]]; then
  echo "prepare-corpus: $out exists"
  exit 0
fi
command -v bible >/dev/null || { echo "prepare-corpus: 'bible' not found; run scripts/install-deps.sh" >&2; exit 2; }
mkdir -p "$here/data"
# One verse per line, without the chapter:verse labels.
bible -f "Gen1:1-Rev22:21" | sed -E 's/^[1-3]?[A-Za-z]+[0-9]+:[0-9]+ //' > "$here/data/corpus.txt"
"$build/app/scaletrain-tokenize" -o "$out" "$here/data/corpus.txt"
