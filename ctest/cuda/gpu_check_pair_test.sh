#!/usr/bin/env bash
# test_gpu_check_pair: the step of scripts/gpu-check.sh that runs our trainer
# and the PyTorch peer at the same configuration (issue 52) works on a CPU, so
# a lent GPU's minutes are not spent finding a broken parse. The step is cut
# out of the script between its markers, with the script's own helpers, and
# run with its model, device and sequence swapped for tiny on the CPU (the
# 8B model and optim.state_dtype need a GPU and the key's branch):
#  - both runs succeed and results.txt holds the trainer's tok/s, MFU,
#    median step and peak memory as its done line and dry run print them, the
#    peer's (torch version, tok/s, MFU over the trainer's run.json peak) as its
#    JSON holds them, a load note on each, and their tok/s ratio;
#  - the side-by-side rows (results.txt and the summary) print the same figures;
#  - a trainer that fails (an unknown key) is recorded with its error line,
#    the peer still runs, and no ratio is made up.
# Usage: gpu_check_pair_test.sh SCALETRAIN_BIN SOURCE_DIR PYTHON
set -uo pipefail
bin=${1:?usage: gpu_check_pair_test.sh SCALETRAIN_BIN SOURCE_DIR PYTHON}
src=$(cd "${2:?}" && pwd -P)
py=${3:?}
"$py" -c 'import torch, yaml' 2>/dev/null ||
  { echo "skipped: $py cannot import torch and yaml"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
cd "$src" || exit 1
script=scripts/gpu-check.sh
# The step, cut out; its GPU settings swapped for the CPU's. A marker that
# moved, or a swap that no longer applies, fails here rather than passing.
sed -n '/^# ---- Issue 52: our trainer and the PyTorch peer/,/^# ---- end of the 8B pair/p' \
  "$script" >"$tmp/block.sh"
grep -q '^pair_model=llama-8b$' "$tmp/block.sh" || fail "the pair step's markers or model moved"
grep -q '^pair_table() {' "$tmp/block.sh" || fail "the pair step has no pair_table"
grep -q '^pair_table$' "$script" || fail "the summary does not print pair_table"
sed -n '/^left() {/,/^step() /p' "$script" >"$tmp/helpers.sh"
grep -q '^load_note() {' "$tmp/helpers.sh" || fail "the helpers moved"
cpu_block() {  # $1: extra sed expression (or "")
  sed -e 's/^pair_model=llama-8b$/pair_model=tiny/' -e 's/runtime.device=cuda/runtime.device=cpu/' \
    -e 's/model.seq_len=4096/model.seq_len=64/' ${1:+-e "$1"} "$tmp/block.sh"
}
run_pair() {  # $1: the block to run; prints the summary rows to $log/summary.txt
  (
    t0=0 budget=240 psteps=5 peer_steps=2 pwarm=1 build=$tmp/build log=$tmp/log
    rm -rf "$log" && mkdir -p "$log" && : >"$log/results.txt"
    export PEER_PYTHON=$py
    source "$tmp/helpers.sh"
    source "$1"
    pair_table >"$log/summary.txt"
    echo "pair_rc=$pair_rc peer_rc=$peer_rc" >>"$log/summary.txt"
  ) >"$tmp/out.txt" 2>&1
}
mkdir -p "$tmp/build/app" && ln -s "$bin" "$tmp/build/app/scaletrain"

# ---- both sides run
cpu_block 's/  --set optim.state_dtype=bf16 /  /' >"$tmp/cpu.sh"
grep -q 'optim.state_dtype' "$tmp/cpu.sh" && fail "optim.state_dtype was not taken out"
run_pair "$tmp/cpu.sh"
res=$tmp/log/results.txt
cat "$res"
[[ $(grep -c '^|' "$tmp/log/summary.txt") -eq 5 ]] || fail "the side-by-side table is not 5 rows"
while read -r row; do
  grep -qxF -- "$row" "$res" || fail "results.txt lacks the row: $row"
done < <(grep '^|' "$tmp/log/summary.txt")
done_line=$(grep -E "done: .* steady state" "$tmp/log/trainer-tiny.txt" | tail -1)
toks=$(sed -n 's/.*steady state (.*) \([0-9.e+]*\) tok\/s.*/\1/p' <<<"$done_line")
[[ -n $toks ]] || fail "the trainer printed no steady-state tok/s: $done_line"
grep -q "pair_rc=0 peer_rc=0" "$tmp/log/summary.txt" || { cat "$tmp/out.txt"; fail "a run failed"; }
grep -Eq "^trainer tiny .*: rc 0, $toks tok/s, MFU [0-9.]+%, median step [0-9.]+ s, peak [0-9.]+ [KMG]iB \(dry run: [0-9.]+ [KMG]iB\), load [0-9.]+ -> [0-9.]+ of [0-9]+ cores" "$res" ||
  fail "results.txt lacks the trainer's figures"
jtok=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["tokens_per_s"])' \
  "$tmp/log/peer-tiny.json")
jpeak=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["peak_tflops"])' \
  "$tmp/log/peer-tiny.json")
rpeak=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["device"]["peak_flops"] / 1e12)' \
  "$tmp/log/run-tiny/run.json")
[[ $jpeak == "$rpeak" ]] || fail "the peer's peak $jpeak TFLOP/s is not the trainer's run.json $rpeak"
grep -Eq "^peer tiny \(torch [0-9][^,]*, compile (True|False), AdamW (fused|foreach), state bfloat16\): rc 0, [0-9.e+]+ tok/s, MFU [0-9.e+-]+%, median step [0-9.e+-]+ s \(spread [0-9.e+-]+%\), peak [0-9.e+-]+ GiB, load" "$res" ||
  fail "results.txt lacks the peer's figures"
want=$(awk -v a="$toks" -v b="$jtok" 'BEGIN { printf "%.3f", a / b }')
grep -q "^8B pair, scaletrain / PyTorch tok/s: $want " "$res" || fail "the ratio is not $want"
grep -q "^| scaletrain / peer | $want |" "$tmp/log/summary.txt" || fail "the summary has no ratio $want"
grep -Eq "^\| scaletrain, 5 steps \(rc 0\) \| $toks \|" "$tmp/log/summary.txt" ||
  fail "the summary's trainer row"
grep -Eq "^\| PyTorch peer, torch [^|]*\(rc 0\) \| [0-9.e+]+ \| [0-9.e+-]+% \|" \
  "$tmp/log/summary.txt" || fail "the summary's peer row"

# ---- the trainer fails (the key it refuses is the one the GPU run needs
# from main: optim.state_dtype, or one no build knows)
cpu_block 's/optim.state_dtype=bf16/optim.no_such_key=1/' >"$tmp/bad.sh"
run_pair "$tmp/bad.sh"
cat "$res"
grep -q "pair_rc=2 peer_rc=0" "$tmp/log/summary.txt" || fail "want the trainer refused, the peer run"
grep -q "^  its error: .*optim.no_such_key" "$res" || fail "the trainer's error is not recorded"
grep -q "^8B pair, scaletrain / PyTorch tok/s: n/a " "$res" || fail "a ratio without a trainer figure"

((fails == 0)) && { echo "gpu-check pair step: all checks passed"; exit 0; }
echo "$fails check(s) failed"
exit 1
