#!/usr/bin/env bash
# The repository must stand alone: a clone (or a source package) has nothing
# beside it, so no file the build, the programs, the tests or the scripts use
# may read or cite a path outside the repository. Fails, listing the files
# and lines, when any tracked file under the checked paths mentions the
# sibling folder these sources were first developed next to, or that
# folder's design sketch. The patterns are spelled so this file does not
# match itself.
# Usage: check_self_contained.sh SOURCE_DIR
set -euo pipefail
src=${1:?usage: check_self_contained.sh SOURCE_DIR}
cd "$src"
paths=(app lib kernels analysis ctest scripts slurm configs CMakeLists.txt)
pattern='\.\./shared|shared/DE[S]IGN'
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  hits=$(git grep -nE "$pattern" -- "${paths[@]}" || true)
  how="tracked files (git grep)"
else
  existing=()
  for p in "${paths[@]}"; do [[ -e $p ]] && existing+=("$p"); done
  hits=$(grep -rnE "$pattern" -- "${existing[@]}" || true)
  how="files (no git checkout: grep -r)"
fi
if [[ -n $hits ]]; then
  echo "FAIL: these lines read or cite a path outside the repository; a user's clone"
  echo "has nothing beside it. Keep the data in the repository (analysis/reference/)"
  echo "and cite docs/ instead:"
  echo "$hits"
  exit 1
fi
# No tracked file (results and docs included) records where this checkout
# sits on the machine that built it: records written by runs (cluster files,
# run.json, logs) must carry repository-relative paths.
here=$(pwd -P)
if git rev-parse --is-inside-work-tree >/dev/null 2>&1 && [[ $here != / ]]; then
  abs=$(git grep -nIF "$here/" || true)
  if [[ -n $abs ]]; then
    echo "FAIL: these lines name this checkout's absolute path ($here); record paths"
    echo "relative to the repository root instead:"
    echo "$abs"
    exit 1
  fi
fi
# The published figures the tests read are in the repository.
for f in analysis/reference/mpt_benchmarks.csv analysis/reference/mpt_models.csv \
         analysis/reference/README.md; do
  [[ -s $f ]] || { echo "FAIL: $f is missing or empty"; exit 1; }
done
echo "ok: no ${how} under ${paths[*]} reach outside the repository"
