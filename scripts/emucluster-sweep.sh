# shellcheck shell=bash
# emucluster.sh's sweep (sourced by scripts/emucluster.sh, not run): finds the
# emulated clusters nobody owns any more and removes everything of theirs.
# `start --owner PID`'s watchdog tears a cluster down when its owner exits, but
# when owner and watchdog are both SIGKILLed (a killed CI job) the namespaces,
# veths, bridge, cgroups and the processes in them would stay on the host.
#
# Each cluster has a tag (4 hex digits) and a record $EMU_REG/TAG (dir=,
# cgroup=) made before its first namespace and removed by `stop`. Its
# DIR/cluster names who keeps it alive, each a PID and that process's start
# time (field 22 of /proc/PID/stat, so a reused PID does not count): starter
# (the `start` process), owner and watchdog. A recorded cluster is orphaned
# when DIR/cluster is gone or is another cluster's, when its start died
# half-way (starter gone, no DIR/cluster.up), or when it had an owner and owner
# and watchdog are both gone; one started without an owner lives until `stop`.
# A cluster with no record (started by an older emucluster.sh) is kept while
# its node processes show its DIR/cluster, or for 2 minutes after it was made.
# Only emucluster's own names are touched: namespaces stTAGnI, links stTAGvI
# and stTAGbr, cgroups scaletrain-emu-TAG and what is inside them.

EMU_REG=/run/scaletrain-emu
HEX='[0-9a-f]{4}'

proc_start() {  # proc_start PID: its start time; fails when it is gone or a zombie
  local s f
  [[ $1 =~ ^[0-9]+$ ]] || return 1
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  read -ra f <<<"${s##*) }"  # fields 3 on (the name before may hold spaces)
  [[ ${f[0]} != [ZX] ]] && echo "${f[19]}"
}
alive() {  # alive PID [START]: PID runs and, when START is given, is the process that started then
  local st
  st=$(proc_start "${1:-}") || return 1
  [[ -z ${2:-} || $st == "$2" ]]
}
record_pid() {  # record_pid NAME PID: the DIR/cluster lines NAME=PID and NAME_start=START
  printf '%s=%s\n%s_start=%s\n' "$1" "$2" "$1" "$(proc_start "$2" || true)"
}
keyval() {  # keyval FILE KEY: the last KEY=value of FILE
  [[ -f $1 ]] || return 0
  sed -n "s/^$2=//p" "$1" | tail -n 1
}
record_tag() {  # record_tag TAG DIR CGROUP: make TAG's record; fails if TAG has one
  local tmp=$EMU_REG/.$1.$$ ok=0
  mkdir -p "$EMU_REG"
  printf 'dir=%s\ncgroup=%s\n' "$2" "$3" >"$tmp"
  ln "$tmp" "$EMU_REG/$1" 2>/dev/null && ok=1
  rm -f "$tmp"
  ((ok))
}

# --- what is on the host: a tag, or the pattern $HEX for every tag --------------
sweep_netns() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^st($1)n[0-9]+$" || true; }
sweep_links() {
  ip -o link show 2>/dev/null | awk -F': ' '{sub(/@.*/, "", $2); print $2}' |
    grep -E "^st($1)(v[0-9]+p?|br)$" || true
}
sweep_cgroups() {  # v1's cpu hierarchy, v2's root and the folder of the recorded one (sw_cg)
  local r d
  for r in "$CG_FS/cpu" "$CG_FS" ${sw_cg:+"${sw_cg%/*}"}; do
    for d in "$r"/scaletrain-emu-*; do
      [[ -d $d && ${d##*/} =~ ^scaletrain-emu-($1)$ ]] && echo "$d"
    done
  done | sort -u
}
sweep_tags() {  # every tag with a record, a namespace, a link or a cgroup here
  local f
  {
    for f in "$EMU_REG"/*; do [[ ${f##*/} =~ ^$HEX$ ]] && echo "${f##*/}"; done
    sweep_netns "$HEX" | cut -c3-6
    sweep_links "$HEX" | cut -c3-6
    sweep_cgroups "$HEX" | sed 's/.*scaletrain-emu-//'
  } | sort -u
}
sweep_left() {  # what of TAG is still here, one a line
  sweep_netns "$1" | sed 's/^/namespace /'
  sweep_links "$1" | sed 's/^/link /'
  sweep_cgroups "$1" | sed 's/^/cgroup /'
}

# --- is it orphaned ------------------------------------------------------------
cluster_live() {  # cluster_live DIR TAG: 0 when alive; else 1 and sw_why says why not
  local f=$1/cluster owner
  if [[ ! -f $f ]]; then sw_why="its $f is gone"; return 1; fi
  if [[ $(keyval "$f" tag) != "$2" ]]; then sw_why="$f is another cluster's now"; return 1; fi
  alive "$(keyval "$f" starter)" "$(keyval "$f" starter_start)" && return 0
  if [[ ! -f $1/cluster.up ]]; then sw_why="its start died half-way"; return 1; fi
  owner=$(keyval "$f" owner)
  [[ -n $owner ]] || return 0  # no owner: it lives until stop
  alive "$owner" "$(keyval "$f" owner_start)" && return 0
  alive "$(keyval "$f" watchdog)" "$(keyval "$f" watchdog_start)" && return 0
  sw_why="its owner $owner and watchdog $(keyval "$f" watchdog) are gone"
  return 1
}
holder_dir() {  # holder_dir TAG: an unrecorded cluster's DIR, from its node processes' mounts
  local cgs cg node_cgs=() p m
  mapfile -t cgs < <(sweep_cgroups "$1")
  for cg in "${cgs[@]}"; do node_cgs+=("$cg"/n*); done
  for p in $(cg_live_procs "${node_cgs[@]}"); do
    while read -r m; do
      [[ $(keyval "${m%/local}/cluster" tag) == "$1" ]] && { echo "${m%/local}"; return 0; }
    done < <(awk '$5 ~ /\/local$/ {print $5}' "/proc/$p/mountinfo" 2>/dev/null)
  done
  return 0
}
made_lately() {  # made_lately TAG: a namespace or cgroup of TAG from the last 2 minutes
  local f cgs
  mapfile -t cgs < <(sweep_cgroups "$1")
  for f in /run/netns/st"$1"n* "${cgs[@]}"; do
    [[ -e $f && -n $(find "$f" -maxdepth 0 -newermt '-120 seconds' 2>/dev/null) ]] && return 0
  done
  return 1
}
sweep_judge() {  # sweep_judge TAG: 0 when orphaned (sw_why, sw_dir, sw_cg); else 1 (sw_keep)
  local tag=$1
  sw_dir='' sw_cg='' sw_why='' sw_keep=''
  if [[ -f $EMU_REG/$tag ]]; then
    sw_dir=$(keyval "$EMU_REG/$tag" dir) sw_cg=$(keyval "$EMU_REG/$tag" cgroup)
    [[ ${sw_cg##*/} == "scaletrain-emu-$tag" ]] || sw_cg=''
    cluster_live "$sw_dir" "$tag" && return 1
    return 0
  fi
  sw_dir=$(holder_dir "$tag")
  if [[ -n $sw_dir ]]; then
    sw_keep="cluster $tag in $sw_dir has no record (an older emucluster.sh started it): kept; 'emucluster.sh stop $sw_dir' removes it"
    return 1
  fi
  if made_lately "$tag"; then sw_keep="cluster $tag has no record but was made lately: kept"; return 1; fi
  sw_why="it has no record and no node process shows its folder"
}

# --- removing it ---------------------------------------------------------------
cg_live_procs() {  # cg_live_procs CGDIR...: the live (not zombie) processes in them
  local p
  (($#)) || return 0
  cat "${@/%//cgroup.procs}" 2>/dev/null | while read -r p; do alive "$p" && echo "$p"; done
  return 0
}
sweep_cgroup() {  # sweep_cgroup CGDIR: SIGKILL what runs in it and below (10 s at most), remove it
  local cgs procs n k c
  mapfile -t cgs < <(find "$1" -depth -type d 2>/dev/null)
  procs=$(cg_live_procs "${cgs[@]}")
  n=$(echo -n "$procs" | grep -c . || true)
  if ((sw_dry)); then log "sweep: would kill $n processes and remove cgroup $1"; return 0; fi
  for ((k = 0; k < 100 && n > 0; k++)); do
    # shellcheck disable=SC2086  # one PID a word
    kill -KILL $procs 2>/dev/null || true
    sleep 0.1
    procs=$(cg_live_procs "${cgs[@]}")
    [[ -n $procs ]] || break
  done
  for c in "${cgs[@]}"; do cg_remove "$c"; done
  [[ -d $1 ]] || log "sweep: removed cgroup $1 ($n processes SIGKILLed)"
}
sweep_ns() {  # sweep_ns NS: SIGKILL the processes in it, remove it
  local pids
  pids=$(ip netns pids "$1" 2>/dev/null | tr '\n' ' ')
  if ((sw_dry)); then log "sweep: would remove namespace $1${pids:+ (and kill $pids)}"; return 0; fi
  # shellcheck disable=SC2086
  [[ -z $pids ]] || kill -KILL $pids 2>/dev/null || true
  ip netns del "$1" 2>/dev/null && log "sweep: removed namespace $1"
  return 0
}
sweep_link() {  # sweep_link NAME: a veth (its peer in the namespace goes with it) or the bridge
  if ((sw_dry)); then log "sweep: would remove link $1"; return 0; fi
  ip link del "$1" 2>/dev/null || true
  ip link show "$1" >/dev/null 2>&1 || log "sweep: removed link $1"
}
sweep_do() {  # sweep_do VERB|DONE WHAT CMD...: CMD, and say so (only what it would, with --dry-run)
  local verb=${1%|*} done=${1#*|} what=$2
  shift 2
  if ((sw_dry)); then log "sweep: would $verb $what"; return 0; fi
  "$@" 2>/dev/null && log "sweep: $done $what"
  return 0
}
sweep_daemons() {  # sweep_daemons TAG: the host's slurmctld and munged of TAG's DIR, then retire DIR/cluster
  local d=$sw_dir t name p
  t=$(keyval "$d/cluster" tag)
  [[ -n $d && (-z $t || $t == "$1") ]] || return 0  # DIR is another cluster's now: its daemons too
  for name in slurmctld munged; do  # they were started with DIR/slurm.conf, DIR/munge.sock
    for p in $(pgrep -x "$name"); do
      tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF "$d/" &&
        sweep_do "kill|killed" "$name $p (SIGKILL)" kill -KILL "$p"
    done
  done
  [[ -n $t ]] || return 0
  if ((!sw_dry)) && [[ -n $(sweep_left "$1") ]]; then return 0; fi  # a later sweep tries again
  ((sw_dry)) || rm -f "$d/cluster.up"
  sweep_do "retire|retired" "$d/cluster (to $d/cluster.stopped)" mv "$d/cluster" "$d/cluster.stopped"
}
sweep_remove() {  # sweep_remove TAG: everything of an orphaned cluster
  local tag=$1 x cgs nss links
  mapfile -t cgs < <(sweep_cgroups "$tag")
  mapfile -t nss < <(sweep_netns "$tag")
  mapfile -t links < <(sweep_links "$tag" | sort -r)  # the veths, then the bridge
  for x in "${cgs[@]}"; do sweep_cgroup "$x"; done  # the holders first: then nothing holds a namespace
  for x in "${links[@]}"; do sweep_link "$x"; done
  for x in "${nss[@]}"; do sweep_ns "$x"; done
  sweep_daemons "$tag"
  [[ -f $EMU_REG/$tag ]] || return 0
  if ((sw_dry)) || [[ -z $(sweep_left "$tag") ]]; then
    sweep_do "remove|removed" "record $EMU_REG/$tag" rm -f "$EMU_REG/$tag"
  fi
}

cmd_sweep() {  # sweep [--dry-run]: remove (or only list) the orphaned clusters
  local tag left=() x
  sw_dry=0
  case ${1:-} in --dry-run) sw_dry=1 ;; "") ;; *) die "usage: sweep [--dry-run]" ;; esac
  [[ $(id -u) -eq 0 ]] || die "sweep needs root (namespaces, links, cgroups)"
  for tag in $(sweep_tags); do
    if ! sweep_judge "$tag"; then
      [[ -z $sw_keep ]] || log "sweep: $sw_keep"
      continue
    fi
    log "sweep: cluster $tag${sw_dir:+ ($sw_dir)} is orphaned: $sw_why"
    sweep_remove "$tag"
    ((sw_dry)) && continue
    while read -r x; do left+=("$x"); done < <(sweep_left "$tag")
  done
  ((${#left[@]} == 0)) && return 0
  echo "emucluster: sweep: could not remove: $(printf '%s, ' "${left[@]}" | sed 's/, $//')" >&2
  return 1
}
sweep_report() {  # for check: one line naming the orphaned clusters, if any
  local tag found=()
  for tag in $(sweep_tags); do sweep_judge "$tag" && found+=("$tag${sw_dir:+ ($sw_dir)}"); done
  ((${#found[@]} == 0)) ||
    echo "orphaned emulated clusters here ('emucluster.sh sweep' removes them): ${found[*]}"
  return 0
}
