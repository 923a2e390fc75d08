#!/usr/bin/env bash
# scripts/emucluster.sh's node cgroups on both cgroup versions (no Slurm):
# 1. on this host's own cgroups (v1's cpu controller, or v2 where the host has
#    only the unified hierarchy): two nodes, node1 capped to 0.2 CPU; a busy
#    loop in node1 is throttled by the kernel (cpu.stat nr_throttled > 0), the
#    quota file holds the cap, `cpu ... none` lifts it, `stop` removes it all.
# 2. the cgroup v2 code path on a tree of plain files standing in for
#    /sys/fs/cgroup (EMUCLUSTER_CGROUP_FS), for hosts whose cpu controller is
#    on v1: which files start, cpu and stop write (+cpu in subtree_control,
#    cpu.max "QUOTA 100000", the node's processes in cgroup.procs). The kernel
#    enforces nothing there; part 1 is the enforcement check on a v2 host.
# Exit 77 (skipped) where the emulated cluster cannot run (not root, no
# namespaces). Usage: emucluster_cgroups.sh SOURCE_DIR
set -uo pipefail
src=${1:?usage: emucluster_cgroups.sh SOURCE_DIR}
emu="bash $src/scripts/emucluster.sh"
if ! why=$($emu check --no-slurm 2>&1); then
  echo "skipped: the emulated cluster cannot run here: $why"
  exit 77
fi
work=$(mktemp -d /tmp/st-emucg.XXXXXX)
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
cleanup() {
  for d in "$work"/host "$work"/fake; do
    [[ -f $d/cluster ]] && EMUCLUSTER_CGROUP_FS=$(cat "$d.fs" 2>/dev/null || echo /sys/fs/cgroup) \
      $emu stop "$d" >/dev/null 2>&1
  done
  rm -rf "$work"
}
trap cleanup EXIT
val() { sed -n "s/^$2=//p" "$1/cluster"; }
netns_of() { readlink "/proc/$1/ns/net" 2>/dev/null; }

# --- 1. this host's cgroups ----------------------------------------------------
d=$work/host
echo /sys/fs/cgroup >"$d.fs"
$emu start "$d" --nodes 2 --no-slurm --node-cpu node1=0.2 --weight 5000 --owner $$ || { fail "start"; exit 1; }
ver=$(val "$d" cgver) cg=$(val "$d" cgroup) hostver=$ver
echo "host: cgroup v$ver, cluster cgroup $cg"
if [[ $ver == 1 ]]; then w=$(cat "$cg/cpu.shares"); want=51200; else w=$(cat "$cg/cpu.weight"); want=5000; fi
[[ $w == "$want" ]] || fail "cluster CPU weight '$w' after --weight 5000, expected '$want'"
if [[ $ver == 1 ]]; then quota=$(cat "$cg/n1/cpu.cfs_quota_us"); want=20000; else
  quota=$(cat "$cg/n1/cpu.max"); want="20000 100000"; fi
[[ $quota == "$want" ]] || fail "node1 quota '$quota', expected '$want'"
$emu exec "$d" node1 'timeout 2 sh -c "while :; do :; done"; true'
thr=$(awk '$1 == "nr_throttled" {print $2}' "$cg/n1/cpu.stat")
echo "host: node1's busy loop under 0.2 CPU: nr_throttled $thr"
((${thr:-0} > 0)) || fail "node1 was never throttled (cpu.stat: $(tr '\n' ' ' <"$cg/n1/cpu.stat"))"
$emu cpu "$d" node1 none
if [[ $ver == 1 ]]; then quota=$(cat "$cg/n1/cpu.cfs_quota_us"); want=-1; else
  quota=$(cat "$cg/n1/cpu.max"); want="max 100000"; fi
[[ $quota == "$want" ]] || fail "node1 quota after 'none' '$quota', expected '$want'"
tag=$(val "$d" tag)
$emu stop "$d" || fail "stop"
[[ -d $cg ]] && fail "stop left $cg"
ip netns list | grep -q "^st${tag}n" && fail "stop left namespaces st${tag}n*"

# --- 2. the cgroup v2 code path on a plain-file tree ---------------------------
fs=$work/cgroup2
mkdir -p "$fs"
echo "cpuset io memory pids" >"$fs/cgroup.controllers"
: >"$fs/cgroup.subtree_control"
out=$(EMUCLUSTER_CGROUP_FS=$fs $emu check --no-slurm 2>&1) && fail "check accepted a v2 tree without cpu"
[[ $out == *"does not offer the cpu controller"* ]] || fail "check without cpu said: $out"
echo "cpuset cpu io memory pids" >"$fs/cgroup.controllers"
d=$work/fake
echo "$fs" >"$d.fs"
export EMUCLUSTER_CGROUP_FS=$fs
$emu start "$d" --nodes 2 --no-slurm --node-cpu node2=0.5 --weight 300 --owner $$ || { fail "v2 start"; exit 1; }
ver=$(val "$d" cgver) cg=$(val "$d" cgroup) tag=$(val "$d" tag)
[[ $ver == 2 && $cg == "$fs/scaletrain-emu-$tag" ]] || fail "v2 tree: cgver '$ver', cgroup '$cg'"
[[ $(cat "$cg/cpu.weight") == 300 ]] || fail "v2 cpu.weight '$(cat "$cg/cpu.weight")' after --weight 300"
out=$($emu start "$work/bad" --nodes 1 --no-slurm --weight 0 2>&1) && fail "--weight 0 accepted"
[[ $out == *"--weight '0'"*"1..10000"* ]] || fail "--weight 0 said: $out"
grep -qw cpu "$fs/cgroup.subtree_control" || fail "the root's subtree_control lacks +cpu"
grep -qw cpu "$cg/cgroup.subtree_control" || fail "the cluster's subtree_control lacks +cpu"
[[ $(cat "$cg/n2/cpu.max") == "50000 100000" ]] || fail "node2 cpu.max '$(cat "$cg/n2/cpu.max")'"
[[ ! -f $cg/n1/cpu.max ]] || fail "node1 got a quota it was not given"
for i in 1 2; do
  p=$(cat "$d/node/node$i/holder.pid")
  grep -qx "$p" "$cg/n$i/cgroup.procs" || fail "node$i's holder $p not in its cgroup.procs"
  [[ $(netns_of "$p") != "$(netns_of $$)" ]] || fail "node$i's holder is in the host's namespace"
done
$emu cpu "$d" node1 0.25
[[ $(cat "$cg/n1/cpu.max") == "25000 100000" ]] || fail "node1 cpu.max '$(cat "$cg/n1/cpu.max")'"
$emu cpu "$d" node1 none
[[ $(cat "$cg/n1/cpu.max") == "max 100000" ]] || fail "node1 cpu.max after none '$(cat "$cg/n1/cpu.max")'"
holders=$(cat "$d"/node/node*/holder.pid)
$emu stop "$d" || fail "v2 stop"
[[ -d $cg ]] && fail "v2 stop left $cg"
for p in $holders; do kill -0 "$p" 2>/dev/null && fail "v2 stop left holder $p"; done
ip netns list | grep -q "^st${tag}n" && fail "v2 stop left namespaces st${tag}n*"
unset EMUCLUSTER_CGROUP_FS

((fails == 0)) && echo "ok: node cgroups on this host (cgroup v$hostver) and the v2 path on a plain-file tree"
exit $((fails > 0))
