#!/usr/bin/env bash
# The build's commit (cmake/git_commit.cmake, run at every build): in a
# scratch git checkout it names HEAD, follows a new commit without any
# configure step, says -dirty while a tracked file differs, leaves its file
# untouched (no recompile) when nothing changed, and says "unknown" outside
# a checkout; the trainer's --version prints what the build wrote.
# Usage: check_build_commit.sh SOURCE_DIR GENERATED_CPP TRAINER
set -euo pipefail
src=$1 generated=$2 trainer=$3
script=$src/cmake/git_commit.cmake
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
run() { cmake -DSRC="$tmp/repo" -DOUT="$tmp/out.cpp" -P "$script"; }
says() { grep -o 'return "[^"]*"' "$tmp/out.cpp" | sed 's/return "\(.*\)"/\1/'; }

mkdir "$tmp/repo"
git -C "$tmp/repo" init -q
git -C "$tmp/repo" -c user.name=t -c user.email=t@t commit -q --allow-empty -m one
echo a > "$tmp/repo/f" && git -C "$tmp/repo" add f
git -C "$tmp/repo" -c user.name=t -c user.email=t@t commit -q -m two
run
[[ $(says) == $(git -C "$tmp/repo" rev-parse --short=12 HEAD) ]] || fail "names $(says), not HEAD"
before=$(stat -c %Y.%s "$tmp/out.cpp")
sleep 1.1
run
[[ $(stat -c %Y.%s "$tmp/out.cpp") == "$before" ]] || fail "rewritten with nothing changed"
echo b > "$tmp/repo/f"
run
[[ $(says) == "$(git -C "$tmp/repo" rev-parse --short=12 HEAD)-dirty" ]] || fail "a changed file: $(says)"
git -C "$tmp/repo" -c user.name=t -c user.email=t@t commit -q -am three
run
[[ $(says) == $(git -C "$tmp/repo" rev-parse --short=12 HEAD) ]] || fail "after a commit: $(says)"
rm -rf "$tmp/repo/.git"
run
[[ $(says) == unknown ]] || fail "outside a checkout: $(says)"

# The trainer prints the commit its build wrote.
built=$(grep -o 'return "[^"]*"' "$generated" | sed 's/return "\(.*\)"/\1/')
"$trainer" --version | grep -q "(commit $built," || fail "$trainer --version: $("$trainer" --version), build wrote $built"
echo "build commit: ok ($built)"
