#!/usr/bin/env bash
# emucluster.sh: many emulated nodes on one Linux host, for multi-node runs
# and tests without a cluster. Each node is a network + UTS + mount namespace
# with its own hostname, an address on a private bridge (real TCP between
# nodes, nothing routed off the bridge), a CPU cgroup (its processes, an
# optional CPU quota: cgroup v1's cpu controller, cpu.cfs_quota_us, or on a
# host with cgroup v2 only, cpu.max) and an optional link bandwidth (tc tbf, both
# directions; the kernels here have no netem, so no added latency). One
# slurmd runs inside each node; slurmctld and munged run on the host, on the
# bridge address. Everything (keys, config, state, logs, each node's
# "local disk" DIR/node/NAME, mounted at DIR/local inside the node, and its
# own /dev/shm, which goes with the node) lives in
# DIR; `stop`, or the watchdog when the --owner process is gone, removes every
# namespace, link, bridge, qdisc, cgroup and daemon it made; `sweep` removes
# the clusters whose owner and watchdog were both killed. Needs root.
#
# Usage: emucluster.sh check [--no-slurm]   exit 0 if usable here, else say why (exit 1);
#                      on cgroup v2 it enables the cpu controller for the root's children;
#                      names the orphaned clusters it finds (still exit 0)
#        emucluster.sh start DIR [--nodes N] [--cpus C] [--bandwidth RATE]
#                      [--node-bandwidth NAME=RATE]... [--node-cpu NAME=FRACTION]...
#                      [--prefix node] [--owner PID] [--no-slurm] [--weight W]
#                      --weight: the cluster cgroup's CPU weight (v2 cpu.weight
#                      1..10000, v1 cpu.shares = W*1024/100; default 100 = the
#                      kernel's): a high one keeps the nodes' quotas served while
#                      other work on the host runs at a low priority (nice 19)
#                      writes DIR/env (source it: SLURM_CONF, PATH, MPI's TCP
#                      subnet), DIR/hostfile and DIR/bin/emu-rsh (mpirun's
#                      plm_rsh_agent: runs a command inside a node, like ssh);
#                      sweeps the orphaned clusters first
#        emucluster.sh stop DIR              tears down everything started in DIR
#        emucluster.sh sweep [--dry-run]     removes every orphaned cluster (owner and
#                      watchdog gone, or its DIR/cluster gone): kills its processes,
#                      removes its cgroups, namespaces, veths and bridge, one line each;
#                      exit 1 naming what could not be removed (scripts/emucluster-sweep.sh)
#        emucluster.sh exec DIR NAME CMD...  run CMD (a shell line, as ssh does) in node NAME
#        emucluster.sh kill-node DIR NAME    SIGKILL every process of node NAME (a crash)
#        emucluster.sh link DIR NAME up|down take node NAME's link up or down
#        emucluster.sh shape DIR NAME RATE|none  set node NAME's link bandwidth (e.g. 1gbit)
#        emucluster.sh cpu DIR NAME FRACTION|none  node NAME's CPU quota (0.5 = half a CPU)
#        emucluster.sh revive DIR NAME       start node NAME's slurmd again (after kill-node)
#        emucluster.sh pids DIR NAME         the processes of node NAME, one a line
#        emucluster.sh nodes DIR             the node names, one a line
set -Eeuo pipefail

SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
SLURM_BINS=(munged slurmctld slurmd sbatch srun squeue scontrol scancel sinfo)
# The cgroup file systems; EMUCLUSTER_CGROUP_FS moves them (a test's tree).
CG_FS=${EMUCLUSTER_CGROUP_FS:-/sys/fs/cgroup}

die() { echo "emucluster: $*" >&2; exit 1; }
log() { echo "emucluster: $*"; }

# shellcheck disable=SC2034  # read by slurm-common.sh
slurm_tool=emucluster
# shellcheck source=slurm-common.sh
source "$(dirname "$SELF")/slurm-common.sh"
# shellcheck source=emucluster-sweep.sh
source "$(dirname "$SELF")/emucluster-sweep.sh"

cmd_check() {
  local slurm=1 b missing=()
  [[ ${1:-} == --no-slurm ]] && slurm=0
  [[ $(id -u) -eq 0 ]] || { echo "needs root (network namespaces, veth, tc, cgroups)"; return 1; }
  for b in ip tc unshare nsenter; do find_bin "$b" >/dev/null || missing+=("$b"); done
  if ((slurm)); then for b in "${SLURM_BINS[@]}"; do find_bin "$b" >/dev/null || missing+=("$b"); done; fi
  if ((${#missing[@]})); then
    echo "missing: ${missing[*]} (install with scripts/install-deps.sh)"
    return 1
  fi
  if ! unshare --net --uts --mount true 2>/dev/null; then
    echo "network/UTS/mount namespaces are not permitted here (unshare --net --uts --mount fails)"
    return 1
  fi
  cg_check || return 1
  sweep_report
}

# --- cgroups: v1 (the cpu controller's hierarchy) or v2 (unified) -------------
# The cluster's cgroup CG_ROOT/scaletrain-emu-TAG holds one cgroup per node:
# its processes, and its CPU quota (v1 cpu.cfs_quota_us, v2 cpu.max). A hybrid
# host (v2 mounted beside v1, with cpu on v1) uses v1.
cg_detect() {  # sets CG_VER and CG_ROOT, or says why not and returns 1
  if [[ -f $CG_FS/cpu/cpu.cfs_quota_us ]]; then
    CG_VER=1 CG_ROOT=$CG_FS/cpu
  elif [[ -f $CG_FS/cgroup.controllers ]]; then
    CG_VER=2 CG_ROOT=$CG_FS
  else
    echo "no cgroup cpu controller: neither cgroup v1's $CG_FS/cpu nor cgroup v2's $CG_FS/cgroup.controllers"
    return 1
  fi
}
cg_check() {  # usable: writable, and on v2 the cpu controller given to the root's children
  cg_detect || return 1
  if ((CG_VER == 1)); then
    [[ -w $CG_ROOT ]] || { echo "the cgroup v1 cpu controller ($CG_ROOT) is not writable"; return 1; }
    return 0
  fi
  grep -qw cpu "$CG_ROOT/cgroup.controllers" || {
    echo "cgroup v2 ($CG_ROOT) does not offer the cpu controller (cgroup.controllers: $(cat "$CG_ROOT/cgroup.controllers")); is it bound to a v1 hierarchy?"
    return 1
  }
  grep -qw cpu "$CG_ROOT/cgroup.subtree_control" && return 0
  echo +cpu >"$CG_ROOT/cgroup.subtree_control" 2>/dev/null || {
    echo "cgroup v2: cannot enable the cpu controller in $CG_ROOT/cgroup.subtree_control (v2 gives controllers only to children of a cgroup without processes of its own: in a container, move its processes into a child cgroup first)"
    return 1
  }
}
cg_make() {  # cg_make DIR: a cgroup; on v2 one whose children get cpu.max
  mkdir -p "$1"
  if ((CG_VER == 2)); then echo +cpu >"$1/cgroup.subtree_control"; fi
}
cg_quota() {  # cg_quota DIR USEC|none: CPU time per 100 ms period
  if ((CG_VER == 1)); then
    echo "${2/none/-1}" >"$1/cpu.cfs_quota_us"
  else
    echo "${2/none/max} 100000" >"$1/cpu.max"
  fi
}
cg_weight() {  # cg_weight DIR W: CPU weight against the cgroup's siblings (v2 scale)
  if ((CG_VER == 1)); then
    echo $(($2 * 1024 / 100)) >"$1/cpu.shares"
  else
    echo "$2" >"$1/cpu.weight"
  fi
}
cg_busy() {  # cg_busy DIR: a live process in it
  local p
  [[ -f $1/cgroup.procs ]] || return 1
  while read -r p; do
    [[ -n $p ]] && kill -0 "$p" 2>/dev/null && return 0
  done <"$1/cgroup.procs"
  return 1
}
cg_remove() {  # cg_remove DIR: an empty cgroup (a test's tree of plain files: those too)
  case $(stat -f -c %T "$1" 2>/dev/null) in
    cgroupfs | cgroup2fs | "") ;;
    *) find "$1" -maxdepth 1 -type f -delete 2>/dev/null || true ;;
  esac
  rmdir "$1" 2>/dev/null || true
}

# --- cluster state ---------------------------------------------------------
# DIR/cluster holds tag, subnet, nodes, prefix, cgver, cgroup; names derive from
# the tag. It also names who keeps the cluster alive for `sweep` (starter,
# owner, watchdog: PID and start time); /run/scaletrain-emu/TAG points back to DIR.
load() {
  dir=$1
  [[ -f $dir/cluster ]] || die "no emulated cluster in '$dir' (no $dir/cluster)"
  # shellcheck disable=SC1091
  source "$dir/cluster"
  bridge=st${tag}br
  # cgver and cgroup are in DIR/cluster since start; an older one was v1.
  CG_VER=${cgver:-1}
  [[ -n ${cgroup:-} ]] || cgroup=$CG_FS/cpu/scaletrain-emu-$tag
}
node_index() {  # node_index NAME -> 1..N
  local name=$1 i=${1#"$prefix"}
  [[ $i =~ ^[0-9]+$ ]] && ((i >= 1 && i <= nodes)) ||
    die "no node '$name' in $dir (nodes: ${prefix}1..${prefix}$nodes)"
  echo "$i"
}
holder_of() {
  local i
  i=$(node_index "$1")
  local p
  p=$(cat "$dir/node/$prefix$i/holder.pid" 2>/dev/null) || die "node '$1' is not running"
  kill -0 "$p" 2>/dev/null || die "node '$1' is not running (holder $p gone)"
  echo "$p"
}

cmd_exec() {  # exec DIR NAME CMD...: as ssh: the arguments joined into one shell line
  load "$1"
  local name=$2 pid i
  shift 2
  pid=$(holder_of "$name")
  i=$(node_index "$name")
  echo $$ >"$cgroup/n$i/cgroup.procs"
  exec nsenter -t "$pid" -n -u -m -- /bin/sh -c "cd $(printf %q "$PWD") 2>/dev/null; $*"
}

kill_cgroup() {  # kill_cgroup CGDIR SIGNAL [KEEP_PID]: every process in it
  local cg=$1 sig=$2 keep=${3:-} p
  [[ -f $cg/cgroup.procs ]] || return 0
  while read -r p; do
    [[ -n $p && $p != "$keep" ]] && kill -s "$sig" "$p" 2>/dev/null || true
  done <"$cg/cgroup.procs"
}

cmd_kill_node() {
  load "$1"
  local i holder
  i=$(node_index "$2")
  holder=$(cat "$dir/node/$prefix$i/holder.pid")
  kill_cgroup "$cgroup/n$i" KILL "$holder"
  log "killed every process of node $2"
}

cmd_link() {
  load "$1"
  local i
  i=$(node_index "$2")
  [[ $3 == up || $3 == down ]] || die "link: expected up or down, got '$3'"
  ip link set "st${tag}v$i" "$3"
}

shape() {  # shape I RATE|none: tbf on both ends of node I's veth
  local i=$1 rate=$2 holder
  holder=$(cat "$dir/node/$prefix$i/holder.pid")
  tc qdisc del dev "st${tag}v$i" root 2>/dev/null || true
  nsenter -t "$holder" -n tc qdisc del dev eth0 root 2>/dev/null || true
  [[ $rate == none ]] && return 0
  [[ $rate =~ ^[0-9.]+([kmg]?bit)$ ]] || die "bandwidth '$rate': expected a tc rate such as 500mbit or 2gbit"
  # burst: large enough for the GSO packets veth passes; latency bounds the queue.
  tc qdisc add dev "st${tag}v$i" root tbf rate "$rate" burst 512kb latency 100ms
  nsenter -t "$holder" -n tc qdisc add dev eth0 root tbf rate "$rate" burst 512kb latency 100ms
}
cmd_shape() {
  load "$1"
  shape "$(node_index "$2")" "$3"
}

set_cpu() {  # set_cpu I FRACTION|none: the node's cgroup CPU quota
  local i=$1 f=$2
  if [[ $f == none ]]; then cg_quota "$cgroup/n$i" none; return 0; fi
  [[ $f =~ ^[0-9]*\.?[0-9]+$ ]] || die "CPU fraction '$f': expected a number of CPUs such as 0.5, or none"
  cg_quota "$cgroup/n$i" "$(awk -v f="$f" 'BEGIN { q = int(f * 100000); if (q < 1000) q = 1000; print q }')"
}
cmd_cpu() {
  load "$1"
  set_cpu "$(node_index "$2")" "$3"
}

cmd_revive() {
  load "$1"
  local i
  i=$(node_index "$2")
  [[ -f $dir/slurm.conf ]] || die "no Slurm in $dir"
  bash "$SELF" exec "$dir" "$2" "$(find_bin slurmd) -f '$dir/slurm.conf'" </dev/null >>"$dir/log/slurmd-start.log" 2>&1 ||
    die "slurmd on $2 did not start: $(tail -n 5 "$dir/node/$2/slurmd.log" 2>/dev/null)"
  export SLURM_CONF=$dir/slurm.conf
  wait_for 40 "node $2 to come back" node_idle "$2"
}
node_idle() { [[ $(sinfo -h -n "$1" -o %t 2>/dev/null) == idle ]]; }

cmd_pids() {  # every process of the node but the namespace holder
  load "$1"
  local i holder
  i=$(node_index "$2")
  holder=$(cat "$dir/node/$prefix$i/holder.pid")
  grep -vx "$holder" "$cgroup/n$i/cgroup.procs" || true
}

cmd_nodes() {
  load "$1"
  local i
  for ((i = 1; i <= nodes; i++)); do echo "$prefix$i"; done
}

cmd_stop() {
  local i p name
  [[ -f $1/cluster ]] || return 0
  load "$1"
  # First end this cluster's jobs, so no job step outlives the daemons.
  if [[ -f $dir/slurmctld.pid && -f $dir/slurm.conf ]]; then
    SLURM_CONF=$dir/slurm.conf timeout 10 scancel --full --quiet 2>/dev/null || true
  fi
  for ((i = 1; i <= nodes; i++)); do  # slurmd and everything else on each node
    kill_cgroup "$cgroup/n$i" TERM
  done
  for name in slurmctld munged; do
    p=$(cat "$dir/$name.pid" 2>/dev/null) || continue
    [[ $p =~ ^[0-9]+$ ]] && kill -TERM "$p" 2>/dev/null || true
  done
  for ((i = 0; i < 50; i++)); do
    local alive=0
    for ((p = 1; p <= nodes; p++)); do
      cg_busy "$cgroup/n$p" && alive=1
    done
    for name in slurmctld munged; do
      kill -0 "$(cat "$dir/$name.pid" 2>/dev/null || echo x)" 2>/dev/null && alive=1
    done
    ((alive)) || break
    sleep 0.1
  done
  for ((i = 1; i <= nodes; i++)); do kill_cgroup "$cgroup/n$i" KILL; done
  for name in slurmctld munged; do
    p=$(cat "$dir/$name.pid" 2>/dev/null) || continue
    kill -KILL "$p" 2>/dev/null || true
    rm -f "$dir/$name.pid"
  done
  for ((i = 1; i <= nodes; i++)); do
    for ((p = 0; p < 150; p++)); do  # a job's processes may take a while to go
      cg_busy "$cgroup/n$i" || break
      kill_cgroup "$cgroup/n$i" KILL
      sleep 0.1
    done
    cg_remove "$cgroup/n$i"
    ip netns del "st${tag}n$i" 2>/dev/null || true
    ip link del "st${tag}v$i" 2>/dev/null || true
  done
  cg_remove "$cgroup"
  ip link del "$bridge" 2>/dev/null || true
  rm -f "$dir/cluster.up"
  if [[ -d $cgroup ]] || ip netns list | grep -q "^st${tag}n"; then
    echo "emucluster: some of cluster $tag could not be removed (cgroup $cgroup, namespaces st${tag}n*)" >&2
    return 1
  fi
  mv "$dir/cluster" "$dir/cluster.stopped"
  rm -f "$EMU_REG/$tag"
}

# --- start -----------------------------------------------------------------
pick_subnet() {  # a 10.237.X.0/24 no route of this host touches
  local x=$1 k
  for ((k = 0; k < 256; k++)); do
    if ! ip -4 route | grep -q "^10\.237\.$x\." && ! ip -4 addr | grep -q " 10\.237\.$x\."; then
      echo "10.237.$x"
      return 0
    fi
    x=$(((x + 1) % 256))
  done
  die "no free 10.237.X.0/24 subnet"
}

claim_tag() {  # a tag no cluster here has: DIR/cluster (who keeps it alive), then its record
  local k sw_cg=''
  for ((k = 0; k < 100; k++)); do
    tag=$(printf '%04x' $((RANDOM % 65536)))
    [[ -z $(sweep_left "$tag") ]] || continue  # an unrecorded cluster's names
    subnet=$(pick_subnet $((0x${tag:2:2})))
    {
      printf 'tag=%s\nsubnet=%s\nnodes=%d\nprefix=%s\ncgver=%s\ncgroup=%s\nowner=%s\n' "$tag" "$subnet" \
        "$nodes" "$prefix" "$CG_VER" "$CG_ROOT/scaletrain-emu-$tag" "$owner"
      [[ -z $owner ]] || record_pid owner "$owner"
      record_pid starter $$
    } >"$dir/cluster"
    record_tag "$tag" "$dir" "$CG_ROOT/scaletrain-emu-$tag" && return 0
  done
  rm -f "$dir/cluster"
  die "no free cluster tag (records in $EMU_REG)"
}

start_node() {  # start_node I: namespace, link, cgroup, hostname, /etc/hosts
  local i=$1 name=$prefix$1 ns=st${tag}n$1 v=st${tag}v$1 ip=$subnet.$((10 + $1)) k
  mkdir -p "$dir/node/$name"
  ip netns add "$ns"
  ip link add "$v" type veth peer name "${v}p"
  ip link set "${v}p" netns "$ns"
  ip -n "$ns" link set "${v}p" name eth0
  ip -n "$ns" addr add "$ip/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  ip link set "$v" master "$bridge"
  ip link set "$v" up
  cg_make "$cgroup/n$i"
  (
    echo "$BASHPID" >"$cgroup/n$i/cgroup.procs"
    # nsenter rather than `ip netns exec`, which remounts /sys and so hides
    # the cgroup file systems slurmd needs.
    exec nsenter --net="/run/netns/$ns" unshare --uts --mount --propagation private -- /bin/sh -c \
      "hostname $name && mount --bind '$dir/hosts' /etc/hosts && mount --bind '$dir/node/$name' '$dir/local' && mount -t tmpfs -o mode=1777,size=1g tmpfs /dev/shm && touch '$dir/node/$name/ready' && exec sleep infinity"
  ) </dev/null >>"$dir/log/holder-$name.log" 2>&1 &
  echo $! >"$dir/node/$name/holder.pid"
  for ((k = 0; k < 100; k++)); do [[ -f $dir/node/$name/ready ]] && break; sleep 0.05; done
  [[ -f $dir/node/$name/ready ]] || die "node $name did not come up: $(cat "$dir/log/holder-$name.log")"
}

nodes_up() {
  local n
  n=$(sinfo -h -N -t idle,mixed,allocated -o '%N' 2>/dev/null | sort -u | wc -l)
  ((n == nodes))
}

start_slurm() {
  local slurmctld slurmd i host ctl_port
  slurmctld=$(find_bin slurmctld); slurmd=$(find_bin slurmd)
  host=$(hostname -s)
  start_munged "$dir"
  ctl_port=$(free_port $((20000 + RANDOM % 20000)))  # slurmds use 6818 in their own namespaces
  {
    cat <<CONF
# Generated by scripts/emucluster.sh: $nodes emulated nodes on $subnet.0/24.
ClusterName=emucluster
SlurmctldHost=$host($subnet.1)
SlurmctldPort=$ctl_port
SlurmdPort=6818
SlurmdSpoolDir=$dir/local/spool
SlurmdPidFile=$dir/local/slurmd.pid
SlurmdLogFile=$dir/local/slurmd.log
CONF
    slurm_conf_common "$dir" 10 5
    for ((i = 1; i <= nodes; i++)); do
      echo "NodeName=$prefix$i NodeAddr=$subnet.$((10 + i)) CPUs=$cpus RealMemory=1000 State=UNKNOWN"
    done
    echo "PartitionName=emu Nodes=${prefix}[1-$nodes] Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
  } >"$dir/slurm.conf"
  # PMIx's per-step folders go to each node's own disk (they collide in a shared /tmp).
  # Under srun only (mpirun's own PMIx server must keep its default): PMIx's
  # shared-memory datastore (gds ds21) crashed Open MPI 4.1's ranks now and
  # then in MPI_Init (openpmix issue 1114); the hash store does not.
  printf 'PMIxCliTmpDirBase=%s\nPMIxEnv=PMIX_MCA_gds=hash\n' "$dir/local/pmix" >"$dir/mpi.conf"
  export SLURM_CONF=$dir/slurm.conf
  "$slurmctld" -f "$dir/slurm.conf" -i
  wait_for 20 slurmctld scontrol ping
  for ((i = 1; i <= nodes; i++)); do
    mkdir -p "$dir/node/$prefix$i/spool" "$dir/node/$prefix$i/pmix"
    bash "$SELF" exec "$dir" "$prefix$i" "$slurmd -f '$dir/slurm.conf'" </dev/null >>"$dir/log/slurmd-start.log" 2>&1 ||
      die "slurmd on $prefix$i did not start: $(tail -n 5 "$dir/node/$prefix$i/slurmd.log" 2>/dev/null)"
  done
  wait_for 40 "all $nodes nodes to come up" nodes_up || {
    sinfo -N >&2 || true
    tail -n 20 "$dir/log/slurmctld.log" "$dir/node/${prefix}1/slurmd.log" >&2 || true
    return 1
  }
}

cmd_start() {
  local nodes=4 cpus=4 bw="" owner="" slurm=1 prefix=node i kv bws=() cpus_of=() weight=
  dir=$1
  shift
  while (($#)); do
    case $1 in
      --nodes) nodes=$2; shift 2 ;;
      --cpus) cpus=$2; shift 2 ;;
      --bandwidth) bw=$2; shift 2 ;;
      --node-bandwidth) bws+=("$2"); shift 2 ;;
      --node-cpu) cpus_of+=("$2"); shift 2 ;;
      --prefix) prefix=$2; shift 2 ;;
      --owner) owner=$2; shift 2 ;;
      --no-slurm) slurm=0; shift ;;
      --weight) weight=$2; shift 2 ;;
      *) die "unknown option '$1' (see the usage at the top of $SELF)" ;;
    esac
  done
  [[ $nodes =~ ^[1-9][0-9]?$ ]] || die "--nodes '$nodes': expected 1..99"
  [[ $cpus =~ ^[1-9][0-9]*$ ]] || die "--cpus '$cpus': expected a positive number"
  [[ $prefix =~ ^[a-z][a-z0-9-]*$ ]] || die "--prefix '$prefix': expected a lower-case hostname prefix"
  [[ -z $weight || ($weight =~ ^[1-9][0-9]*$ && $weight -le 10000) ]] ||
    die "--weight '$weight': expected a CPU weight 1..10000 (100 is the kernel's default)"
  [[ -z $owner ]] || alive "$owner" || die "--owner '$owner': no such process"
  local why
  if [[ $slurm == 1 ]]; then why=$(cmd_check) || die "not usable here: $why"; else why=$(cmd_check --no-slurm) || die "not usable here: $why"; fi
  cmd_sweep || log "sweep before start: some orphaned cluster is left (above); starting anyway"
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  [[ -f $dir/cluster ]] && die "a cluster is already running in $dir (stop it first)"
  chmod 700 "$dir"
  mkdir -p "$dir/state" "$dir/log" "$dir/node" "$dir/local" "$dir/bin"
  cg_detect >/dev/null
  claim_tag
  load "$dir"
  trap 'echo "emucluster: start failed; tearing down" >&2; cmd_stop "$dir" >&2 || true' ERR
  # Every step below is undone by cmd_stop, which reads DIR/cluster.
  ip link add "$bridge" type bridge
  ip addr add "$subnet.1/24" dev "$bridge"
  ip link set "$bridge" up
  cg_make "$cgroup"
  if [[ -n $weight ]]; then cg_weight "$cgroup" "$weight"; fi
  {
    printf '127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n'
    printf '%s %s emuctl\n' "$subnet.1" "$(hostname -s)"
    for ((i = 1; i <= nodes; i++)); do printf '%s %s\n' "$subnet.$((10 + i))" "$prefix$i"; done
  } >"$dir/hosts"
  for ((i = 1; i <= nodes; i++)); do start_node "$i"; done
  for ((i = 1; i <= nodes; i++)); do
    [[ -n $bw ]] && shape "$i" "$bw"
    echo "$prefix$i slots=$cpus"
  done >"$dir/hostfile"
  for kv in "${bws[@]}"; do shape "$(node_index "${kv%%=*}")" "${kv#*=}"; done
  for kv in "${cpus_of[@]}"; do set_cpu "$(node_index "${kv%%=*}")" "${kv#*=}"; done
  if ((slurm)); then start_slurm; fi
  # mpirun's launch agent: `emu-rsh NODE CMD...` runs CMD inside the node.
  printf '#!/bin/sh\nexec bash %q exec %q "$@"\n' "$SELF" "$dir" >"$dir/bin/emu-rsh"
  chmod +x "$dir/bin/emu-rsh"
  {
    [[ $slurm == 1 ]] && printf 'export SLURM_CONF=%q\n' "$dir/slurm.conf"
    # shellcheck disable=SC2016  # $PATH expands when DIR/env is sourced
    printf 'export PATH=%q:$PATH\n' "$(dirname "$(find_bin slurmd 2>/dev/null || echo /usr/sbin/x)")"
    printf 'export EMUCLUSTER_DIR=%q\n' "$dir"
    # MPI between nodes over the bridge only (not the host's other networks).
    printf 'export OMPI_MCA_btl_tcp_if_include=%s OMPI_MCA_oob_tcp_if_include=%s\n' \
      "$subnet.0/24" "$subnet.0/24"
    printf 'export OMPI_MCA_plm_rsh_agent=%q\n' "$dir/bin/emu-rsh"
  } >"$dir/env"
  trap - ERR
  touch "$dir/cluster.up"
  if [[ -n $owner ]]; then  # watchdog: tear down when the owner is gone
    local owner_start
    owner_start=$(keyval "$dir/cluster" owner_start)
    (
      trap '' HUP INT TERM
      while alive "$owner" "$owner_start" && [[ -f $dir/cluster ]]; do sleep 1; done
      for k in 1 2 3; do  # a job's last processes may outlive the first pass
        cmd_stop "$dir" && break
        sleep 5
      done
    ) </dev/null >>"$dir/log/watchdog.log" 2>&1 &
    record_pid watchdog $! >>"$dir/cluster"  # for sweep: this cluster lives while it runs
    disown
  fi
  log "up in $dir: $nodes nodes ${prefix}1..${prefix}$nodes on $subnet.0/24 (bridge $bridge), $cpus CPUs each${bw:+, links $bw}"
}

case ${1:-} in
  check) shift; cmd_check "$@" ;;
  start) [[ $# -ge 2 ]] || die "usage: start DIR [options]"; shift; cmd_start "$@" ;;
  stop) [[ $# -eq 2 ]] || die "usage: stop DIR"; cmd_stop "$2" ;;
  exec) [[ $# -ge 4 ]] || die "usage: exec DIR NAME CMD..."; shift; cmd_exec "$@" ;;
  kill-node) [[ $# -eq 3 ]] || die "usage: kill-node DIR NAME"; cmd_kill_node "$2" "$3" ;;
  link) [[ $# -eq 4 ]] || die "usage: link DIR NAME up|down"; cmd_link "$2" "$3" "$4" ;;
  shape) [[ $# -eq 4 ]] || die "usage: shape DIR NAME RATE|none"; cmd_shape "$2" "$3" "$4" ;;
  cpu) [[ $# -eq 4 ]] || die "usage: cpu DIR NAME FRACTION|none"; cmd_cpu "$2" "$3" "$4" ;;
  revive) [[ $# -eq 3 ]] || die "usage: revive DIR NAME"; cmd_revive "$2" "$3" ;;
  pids) [[ $# -eq 3 ]] || die "usage: pids DIR NAME"; cmd_pids "$2" "$3" ;;
  nodes) [[ $# -eq 2 ]] || die "usage: nodes DIR"; cmd_nodes "$2" ;;
  sweep) [[ $# -le 2 ]] || die "usage: sweep [--dry-run]"; shift; cmd_sweep "$@" ;;
  *) sed -n '2,/^set -E/{/^#/p}' "$0"; exit 2 ;;
esac
