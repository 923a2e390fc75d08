#!/usr/bin/env bash
# Lists the functions of lib/, app/ and analysis/ longer than a screen
# (default 100 lines, from the definition's first line to its closing brace),
# longest first, as "LINES FUNCTION FILE:LINE". Function extents come from
# universal-ctags (--fields end), not from a hand-written brace counter.
#
# --check ALLOW: the CI form (test_function_length). ALLOW lists, one per
# line, "FILE FUNCTION LINES" for the offenders still being split up. It
# fails when a function over the limit is not listed, when a listed one grew
# past its recorded length, and when a listed one is gone or now fits (so
# the list only shrinks: delete the line). Lines starting with # are notes.
#
# Usage: scripts/long-functions.sh [--limit N] [--root DIR] [--check ALLOW]
set -euo pipefail
limit=100 root=$(cd "$(dirname "$0")/.." && pwd) allow=
while (($#)); do
  case $1 in
    --limit) limit=${2:?--limit needs a number}; shift 2 ;;
    --root) root=${2:?--root needs a directory}; shift 2 ;;
    --check) allow=${2:?--check needs the allow-list file}; shift 2 ;;
    -h | --help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "long-functions: unknown argument '$1' (valid: --limit N, --root DIR, --check FILE)" >&2; exit 2 ;;
  esac
done
[[ $limit =~ ^[1-9][0-9]*$ ]] || { echo "long-functions: --limit '$limit' is not a positive number of lines" >&2; exit 2; }
command -v ctags >/dev/null && ctags --version 2>/dev/null | grep -q "Universal Ctags" ||
  { echo "long-functions: needs universal-ctags (scripts/install-deps.sh installs it)" >&2; exit 2; }
[[ -z $allow || -f $allow ]] || { echo "long-functions: allow-list '$allow' does not exist" >&2; exit 2; }
cd "$root"

# "LINES FUNCTION FILE:LINE" for every function (lambdas included, named
# "lambda") over the limit. Sources only: headers hold no long bodies here,
# and the tests and fuzz harnesses are not product code.
offenders=$(find lib app analysis kernels -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' \) |
  sort | ctags -L - -x --language-force=C++ --kinds-C++=f \
    --_xformat='%{line} %{end} %N %F' 2>/dev/null |
  awk -v lim="$limit" '$2 != "" { n = $2 - $1 + 1; name = $3; if (name ~ /^__anon/) name = "lambda";
                                  if (n > lim) print n, name, $4 ":" $1 }' | sort -k1,1nr -k3)

if [[ -z $allow ]]; then
  [[ -n $offenders ]] && echo "$offenders"
  echo "$(grep -c . <<<"$offenders" || true) function(s) over $limit lines" >&2
  exit 0
fi

fails=0
declare -A listed=()
while read -r file fn max rest; do
  [[ -z $file || $file == \#* ]] && continue
  [[ $max =~ ^[0-9]+$ && -z $rest ]] ||
    { echo "long-functions: $allow: '$file $fn $max $rest' is not 'FILE FUNCTION LINES'" >&2; exit 2; }
  listed["$file $fn"]=$max
done <"$allow"
declare -A seen=()
while read -r n fn loc; do
  [[ -z $n ]] && continue
  key="${loc%:*} $fn"
  seen[$key]=1
  if [[ -z ${listed[$key]:-} ]]; then
    echo "FAIL: $loc $fn is $n lines (limit $limit): split it up"
    fails=$((fails + 1))
  elif ((n > listed[$key])); then
    echo "FAIL: $loc $fn grew to $n lines (listed at ${listed[$key]} in $allow): split it up instead"
    fails=$((fails + 1))
  else
    echo "still long: $n $fn $loc"
  fi
done <<<"$offenders"
for key in "${!listed[@]}"; do
  [[ -n ${seen[$key]:-} ]] ||
    { echo "FAIL: '$key' is listed in $allow but is no longer over $limit lines (or gone): delete its line"; fails=$((fails + 1)); }
done
echo "$(grep -c . <<<"$offenders" || true) function(s) over $limit lines, ${#listed[@]} listed"
((fails == 0))
