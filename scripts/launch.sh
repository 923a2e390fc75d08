#!/usr/bin/env bash
# launch.sh: mpirun, with the stop signals a person or a scheduler sends it
# turned into the one Open MPI 4 forwards to the ranks. Use it instead of
# mpirun when a run should survive Ctrl-C or `kill` with a checkpoint.
#
# Why: mpirun answers SIGTERM and SIGINT by killing the ranks (SIGCONT, then
# SIGTERM after odls_base_sigkill_timeout = 1 s, then SIGKILL one more second
# later), too soon for an emergency checkpoint, and it refuses to forward
# them (ess_base_forward_signals rejects SIGTERM). It does forward SIGUSR1 to
# every rank at once, and the trainer treats SIGUSR1 as "checkpoint, then exit
# 3". So here the first TERM or INT (Ctrl-C) becomes USR1 to mpirun; a second
# one is passed on as TERM (stop now, no checkpoint). USR1 passes through.
# mpirun runs in its own process group, so a terminal's Ctrl-C reaches only
# this script. Details: docs/signals.md.
#
# Usage: scripts/launch.sh MPIRUN-ARGS...      e.g.
#   scripts/launch.sh -np 4 build/app/scaletrain --config configs/models/tiny.yaml
# Exit status: mpirun's (3 after an emergency checkpoint). MPIRUN overrides
# the launcher command (default mpirun).
set -uo pipefail

if [[ $# -eq 0 ]]; then
  sed -n '2,/^$/s/^# \{0,1\}//p' "$0" >&2
  exit 2
fi
mpirun=${MPIRUN:-mpirun}
set -m  # background jobs get their own process group: Ctrl-C is ours alone
"$mpirun" "$@" &
pid=$!
set +m
stops=0
on_stop() {
  stops=$((stops + 1))
  if ((stops == 1)); then
    echo "launch.sh: SIG$1: every rank writes an emergency checkpoint (SIGUSR1 to mpirun $pid); send it again to stop at once" >&2
    kill -USR1 "$pid" 2>/dev/null || true
  else
    echo "launch.sh: SIG$1 again: stopping mpirun $pid now (SIGTERM)" >&2
    kill -TERM "$pid" 2>/dev/null || true
  fi
}
trap 'on_stop INT' INT
trap 'on_stop TERM' TERM
trap 'kill -USR1 "$pid" 2>/dev/null || true' USR1
while :; do
  rc=0
  wait "$pid" || rc=$?
  # wait returns early (rc > 128) when a trapped signal arrives: keep waiting.
  if ((rc > 128)) && kill -0 "$pid" 2>/dev/null; then continue; fi
  break
done
exit "$rc"
