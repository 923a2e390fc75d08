# Shell functions the two throw-away Slurm clusters share (sourced, not run):
# ctest/slurm/minislurm.sh (one node on localhost, for the slurm tests) and
# scripts/emucluster.sh (emulated nodes in network namespaces). The caller
# sets $slurm_tool to its own name, for messages.

find_bin() {  # daemons live in sbin, which a non-login PATH may lack
  local b=$1 d
  if command -v "$b" >/dev/null 2>&1; then command -v "$b"; return 0; fi
  for d in /usr/sbin /sbin /usr/local/sbin; do
    if [[ -x $d/$b ]]; then echo "$d/$b"; return 0; fi
  done
  return 1
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

free_port() {  # a free port from $1 up
  local p=$1
  while ! port_free "$p"; do p=$((p + 1)); done
  echo "$p"
}

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local t=$1 what=$2 i
  shift 2
  for ((i = 0; i < t * 10; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  echo "$slurm_tool: timed out after ${t}s waiting for $what" >&2
  return 1
}

start_munged() {  # start_munged DIR: own key, socket and files; --force as it runs as root
  local dir=$1 munged
  munged=$(find_bin munged)
  dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
  chmod 400 "$dir/munge.key"
  "$munged" --force --socket="$dir/munge.sock" --key-file="$dir/munge.key" \
    --pid-file="$dir/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munged.seed"
  wait_for 10 munged test -S "$dir/munge.sock"
}

# slurm_conf_common DIR SLURMD_TIMEOUT KILL_WAIT: the slurm.conf lines both
# clusters use (munge auth on DIR's socket, state and controller files in
# DIR, no accounting, cons_tres by CPU, requeue allowed, fast scheduling);
# the caller adds the cluster name, hosts, ports, slurmd files, nodes and
# partition.
slurm_conf_common() {
  cat <<CONF
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$1/munge.sock,cred_expire=10
StateSaveLocation=$1/state
SlurmctldPidFile=$1/slurmctld.pid
SlurmctldLogFile=$1/log/slurmctld.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
JobRequeue=1
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MailProg=/bin/true
SlurmctldTimeout=30
SlurmdTimeout=$2
InactiveLimit=0
KillWait=$3
MinJobAge=600
CONF
}
