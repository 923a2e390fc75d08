#!/usr/bin/env bash
# Fuzzes every reader of outside input with libFuzzer (clang, ASan + UBSan):
# the YAML config loader with --set overrides, the checkpoint index and HDF5
# rank-file reader, the token-file sidecar, the token-file headers (llm.c,
# Megatron, raw), and the telemetry reader with the run analysis (harnesses in ctest/fuzz). Each runs for SECONDS (default 60),
# one after the other, niced, starting from the committed seed corpus
# (ctest/fuzz/corpus/NAME, copied: the committed seeds stay as they are).
# What each found lands in build-fuzz/crashes/NAME; commit a crasher, once
# fixed, to ctest/fuzz/crashers/NAME, where the ordinary build replays it as
# a unit test (fuzz_replay_NAME). A summary line per harness goes to stdout
# and build-fuzz/fuzz-summary.txt.
#
# Usage: scripts/fuzz.sh [SECONDS] [NAME...]     (NAME: config checkpoint sidecar tokenfile telemetry)
# Needs clang and libFuzzer (Debian 12: apt-get install clang libclang-rt-14-dev libomp-14-dev);
# not part of CI, which replays the corpus and crashers instead.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
secs=${1:-60}
shift || true
names=("$@")
[[ ${#names[@]} -eq 0 ]] && names=(config checkpoint sidecar tokenfile telemetry)
[[ $secs =~ ^[0-9]+$ ]] || { echo "fuzz.sh: SECONDS must be a whole number, got '$secs'" >&2; exit 2; }
command -v clang++ >/dev/null || {
  echo "fuzz.sh: clang++ not found; apt-get install clang libclang-rt-14-dev libomp-14-dev" >&2
  exit 2
}

build=build-fuzz
cmake --preset fuzz >/dev/null
nice -n 10 cmake --build "$build" -j "$(nproc)" --target $(printf 'fuzz_%s ' "${names[@]}")

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$here/ctest/fuzz/lsan.supp}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
summary=$build/fuzz-summary.txt
: >"$summary"
status=0
for n in "${names[@]}"; do
  corpus=$build/corpus/$n crashes=$build/crashes/$n
  mkdir -p "$corpus" "$crashes"
  log=$build/fuzz-$n.log
  echo "fuzz.sh: $n for ${secs}s (log $log)"
  rc=0
  # -fork=1 with -ignore_*: one crash does not end the run; every finding
  # lands in $crashes and the run lasts SECONDS. A generous -timeout, since a
  # loaded machine starves a niced fuzzer; timeouts are re-run alone below.
  nice -n 10 "$build/ctest/fuzz/fuzz_$n" "$corpus" "ctest/fuzz/corpus/$n" \
    -max_total_time="$secs" -timeout=30 -rss_limit_mb=4096 -max_len=65536 \
    -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
    -artifact_prefix="$crashes/" -print_final_stats=1 >"$log" 2>&1 || rc=$?
  # A timeout that does not repeat when its input runs alone was the load.
  for t in "$crashes"/timeout-*; do
    [[ -e $t ]] || continue
    if timeout 60 "$build/ctest/fuzz/fuzz_$n" -timeout=10 "$t" >/dev/null 2>&1; then
      mkdir -p "$crashes/not-repeated" && mv "$t" "$crashes/not-repeated/"
    fi
  done
  # Executions: the final stats line, or the last progress line (-fork mode).
  execs=$(grep 'stat::number_of_executed_units' "$log" | awk '{s += $2} END {print s}' || true)
  if [[ -z $execs || $execs == 0 ]]; then
    execs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#' || true)
  fi
  found=$(find "$crashes" -maxdepth 1 -type f | wc -l)
  line="$n: ${secs}s, ${execs:-?} execs, corpus $(find "$corpus" -type f | wc -l) files, $found crash/timeout/oom file(s) in $crashes, exit $rc"
  echo "$line" | tee -a "$summary"
  if ((rc != 0 || found > 0)); then status=1; fi
done
exit $status
