#!/usr/bin/env bash
# scripts/emucluster.sh sweep (no Slurm): a cluster whose owner and watchdog
# were both SIGKILLed (a killed CI job) is found and removed whole; a live one
# beside it is left alone; `start` sweeps such a cluster before it starts.
# 1. clusters A and B, 2 nodes each, each owned by a sleeping process; A gets a
#    process of its own in node1, and decoys named like A's things but not of
#    emucluster's patterns (namespace stTAGn1x, link stTAGbrx, cgroup
#    scaletrain-emu-TAGx);
# 2. A's watchdog, then its owner, SIGKILLed: A's namespaces, links and cgroups
#    stay; `check` names A and succeeds; `sweep --dry-run` names A, removes nothing;
# 3. `sweep` removes A's namespaces, veths, bridge, cgroups, processes and
#    record; B (namespaces, cgroups, holders, watchdog, exec) and the decoys
#    are untouched; a second sweep removes nothing;
# 4. C (1 node) orphaned the same way; `start` of D (no owner) removes it first;
# 5. B and D stopped normally.
# Every exit path removes what the test made, by hand where emucluster.sh did
# not (trap). Exit 77 (skipped) where the emulated cluster cannot run (not
# root, no namespaces). Usage: emucluster_sweep.sh SOURCE_DIR
set -uo pipefail
src=${1:?usage: emucluster_sweep.sh SOURCE_DIR}
emu="bash $src/scripts/emucluster.sh"
if ! why=$($emu check --no-slurm 2>&1); then
  echo "skipped: the emulated cluster cannot run here: $why"
  exit 77
fi
work=$(mktemp -d /tmp/st-emusw.XXXXXX)
fails=0
owners=()
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
val() { sed -n "s/^$2=//p" "$1/cluster" | tail -n 1; }
has_ns() { ip netns list | awk '{print $1}' | grep -qx "$1"; }
has_link() { ip link show "$1" >/dev/null 2>&1; }
running() {  # running PID: alive and not a zombie (PID 1 reaps a killed orphan a moment later)
  local s
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  s=${s##*) }
  [[ ${s:0:1} != [ZX] ]]
}
tag_left() {  # tag_left TAG: names of cluster TAG still on the host (emucluster's patterns)
  ip netns list | awk '{print $1}' | grep -E "^st$1n[0-9]+$"
  ip -o link show | awk -F': ' '{sub(/@.*/, "", $2); print $2}' | grep -E "^st$1(v[0-9]+p?|br)$"
  ls -d /sys/fs/cgroup/cpu/scaletrain-emu-"$1" /sys/fs/cgroup/scaletrain-emu-"$1" 2>/dev/null
  ls /run/scaletrain-emu/"$1" 2>/dev/null
}

# shellcheck disable=SC2317  # run by the EXIT trap
remove_by_hand() {  # remove_by_hand TAG: whatever of TAG (decoys too) is left, without emucluster.sh
  local t=$1 cg p x
  for cg in /sys/fs/cgroup/cpu/scaletrain-emu-"$t"* /sys/fs/cgroup/scaletrain-emu-"$t"*; do
    [[ -d $cg ]] || continue
    for p in $(cat "$cg"/cgroup.procs "$cg"/*/cgroup.procs 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    sleep 0.5
    rmdir "$cg"/*/ "$cg" 2>/dev/null
  done
  for x in $(ip netns list | awk '{print $1}' | grep "^st$t"); do
    for p in $(ip netns pids "$x"); do kill -KILL "$p" 2>/dev/null; done
    ip netns del "$x"
  done
  for x in $(ip -o link show | awk -F': ' '{sub(/@.*/, "", $2); print $2}' | grep "^st$t"); do ip link del "$x"; done
  rm -f /run/scaletrain-emu/"$t"
}
# shellcheck disable=SC2317
cleanup() {
  local d t
  for d in "$work"/?; do [[ -f $d/cluster ]] && $emu stop "$d" >/dev/null 2>&1; done
  for t in "${owners[@]}"; do { kill -KILL "$t" && wait "$t"; } 2>/dev/null; done
  for t in $(cat "$work"/?/cluster* 2>/dev/null | sed -n 's/^tag=//p' | sort -u); do remove_by_hand "$t"; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start() {  # start NAME NODES [OWNER]: a cluster in $work/NAME, its output in $work/NAME.log
  $emu start "$work/$1" --nodes "$2" --no-slurm ${3:+--owner "$3"} >"$work/$1.log" 2>&1 && return 0
  cat "$work/$1.log"
  fail "start $1"
  exit 1
}
orphan() {  # orphan NAME OWNER: SIGKILL the watchdog, then the owner (as a killed CI job)
  local w
  w=$(val "$work/$1" watchdog)
  running "$w" || fail "$1's recorded watchdog '$w' does not run"
  kill -KILL "$w"
  sleep 0.2
  kill -KILL "$2"
  wait "$2" 2>/dev/null
  sleep 2  # a watchdog still alive would have begun its teardown by now
}

# --- 1. A and B, decoys ------------------------------------------------------------
sleep 600 & oa=$!
sleep 600 & ob=$!
sleep 600 & oc=$!
owners=("$oa" "$ob" "$oc")
start a 2 "$oa"
start b 2 "$ob"
ta=$(val "$work/a" tag) tb=$(val "$work/b" tag) cga=$(val "$work/a" cgroup) cgb=$(val "$work/b" cgroup)
echo "A: tag $ta, cgroup $cga; B: tag $tb"
$emu exec "$work/a" node1 'sleep 600 >/dev/null 2>&1 &'
stray=$($emu pids "$work/a" node1)
[[ -n $stray ]] || fail "no process of A's own in node1"
holders_a=$(cat "$work"/a/node/node*/holder.pid) holders_b=$(cat "$work"/b/node/node*/holder.pid)
ip netns add "st${ta}n1x" && ip link add "st${ta}brx" type bridge && mkdir "${cga}x" || fail "decoys"

# --- 2. A orphaned; check and --dry-run only report ------------------------------
orphan a "$oa"
for x in "st${ta}n1" "st${ta}n2"; do has_ns "$x" || fail "namespace $x gone before the sweep"; done
for x in "st${ta}br" "st${ta}v1" "st${ta}v2"; do has_link "$x" || fail "link $x gone before the sweep"; done
[[ -d $cga/n1 ]] || fail "cgroup $cga/n1 gone before the sweep"
out=$($emu check --no-slurm) || fail "check failed with an orphan here: $out"
[[ $out == *orphaned*"$ta"* && $out != *"$tb"* ]] || fail "check did not name orphan $ta alone: '$out'"
out=$($emu sweep --dry-run) || fail "sweep --dry-run failed: $out"
[[ $out == *"would remove namespace st${ta}n1"* && $out != *"$tb"* ]] || fail "sweep --dry-run said: '$out'"
[[ $(tag_left "$ta" | wc -l) -ge 6 ]] || fail "sweep --dry-run removed something: left $(tag_left "$ta" | tr '\n' ' ')"

# --- 3. sweep: A gone, B and the decoys untouched ---------------------------------
t0=$EPOCHREALTIME
out=$($emu sweep 2>&1) || fail "sweep exit $?"
echo "$out"
awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "sweep took %.1f s\n", b - a }'

for x in namespace\ st"${ta}"n1 namespace\ st"${ta}"n2 link\ st"${ta}"v1 link\ st"${ta}"br cgroup\ "$cga"; do
  [[ $out == *"removed $x"* ]] || fail "sweep did not say 'removed $x'"
done
left=$(tag_left "$ta")
[[ -z $left ]] || fail "sweep left of A: $(echo "$left" | tr '\n' ' ')"
for p in $stray $holders_a; do running "$p" && fail "sweep left A's process $p"; done
[[ ! -f $work/a/cluster && -f $work/a/cluster.stopped ]] || fail "A's DIR/cluster not retired"
has_ns "st${ta}n1x" && has_link "st${ta}brx" && [[ -d ${cga}x ]] || fail "sweep removed a decoy"
for x in "st${tb}n1" "st${tb}n2"; do has_ns "$x" || fail "sweep removed live B's namespace $x"; done
has_link "st${tb}br" && [[ -d $cgb/n2 ]] || fail "sweep removed live B's bridge or cgroup"
for p in $holders_b $(val "$work/b" watchdog); do running "$p" || fail "B's process $p is gone"; done
[[ $($emu exec "$work/b" node2 hostname) == node2 ]] || fail "exec in live B after the sweep"
out=$($emu sweep 2>&1) || fail "second sweep exit $?: $out"
[[ $out != *removed* ]] || fail "second sweep removed: $out"

# --- 4. start sweeps first ---------------------------------------------------------
start c 1 "$oc"
tc=$(val "$work/c" tag)
orphan c "$oc"
[[ -n $(tag_left "$tc") ]] || fail "C gone before start swept it"
start d 1
grep -q "removed namespace st${tc}n1" "$work/d.log" || fail "start of D did not sweep C: $(cat "$work/d.log")"
left=$(tag_left "$tc")
[[ -z $left ]] || fail "start's sweep left of C: $(echo "$left" | tr '\n' ' ')"
has_ns "st${tb}n1" || fail "start of D removed live B"

# --- 5. B and D stopped normally ---------------------------------------------------
for x in b d; do
  t=$(val "$work/$x" tag)
  $emu stop "$work/$x" || fail "stop $x"
  left=$(tag_left "$t")
  [[ -z $left ]] || fail "stop $x left: $(echo "$left" | tr '\n' ' ')"
done

((fails == 0)) && echo "ok: sweep removed orphaned clusters whole and left a live one alone"
exit $((fails > 0))
