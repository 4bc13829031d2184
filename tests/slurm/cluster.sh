#!/usr/bin/env bash
# cluster.sh - a real three-node Slurm test cluster on this Debian 12 machine (root, no systemd).
#
#   bash tests/slurm/cluster.sh up     install packages, write config, start everything; returns
#                                      once every node is idle and a batch job ran in each
#                                      partition (idempotent: a healthy cluster is left running)
#   bash tests/slurm/cluster.sh down   stop the daemons this script started (keeps config/state)
#   bash tests/slurm/cluster.sh env    print export lines: eval "$(bash tests/slurm/cluster.sh env)"
#
# What it builds (Slurm 22.05 from Debian, config in the default /etc/slurm so plain sinfo works):
#   ClusterName=tsb; three fake nodes on 127.0.0.1, one slurmd each (slurmd -N NAME):
#     gpunode1, gpunode2  CPUs=16, Gres=gpu:8 each (fake GPUs: char devices cloned from
#                         /dev/null, one set per node under $STATE/dev/NODE)
#     cpunode             CPUs=4, no GRES
#   The node sizes are fake (SlurmdParameters=config_overrides): the jobs our tool writes for
#   8 GPUs ask for 8 tasks on one node, which the 2 real cores would refuse.
#   Partitions (EnforcePartLimits=ALL, so over-limit jobs are refused at submission):
#     gpu  Default, gpunode[1-2], MaxTime=04:00:00      cpu  cpunode, MaxTime=01:00:00
#   Accounting: MariaDB (own datadir, 127.0.0.1:$DB_PORT) + slurmdbd,
#   AccountingStorageEnforce=associations,limits,qos; accounts tsb (root's default) and tsb2;
#   the Unix user tsbother, when it exists, gets an association with tsb2 only.
#   MaxArraySize=5: a batch of more than 5 jobs of one shape needs more than one array.
#   MpiDefault=none; --mpi=pmix works (libpmix-dev). OpenMPI 4.1 and mpi4py (openmpi-bin,
#   libopenmpi-dev, python3-mpi4py) are installed for the system /usr/bin/python3, which the
#   stand-ins in tests/slurm/standins run under: Debian's OpenMPI is built against the same
#   external PMIx (libpmix2) as Slurm's pmix_v4 plugin, so `srun --mpi=pmix -n N` gives a real
#   N-rank MPI_COMM_WORLD (the smoke test checks it with mpi4py, 4 ranks over both GPU nodes).
#   Every slurmd runs in its own mount namespace (unshare -m) with its own /dev/shm and where
#   $STATE/pmix-cli is its own folder $STATE/pmix/NODE: the pmix plugin makes one client folder
#   per step under PMIxCliTmpDirBase and OpenMPI one shared memory file per rank of a node in
#   /dev/shm, both named without the node, so two slurmds on one machine would collide.
#   SPANK: tests/slurm/spank/fake_pyxis.c (pyxis's --container-* options, no container), built
#   into $STATE/fake_pyxis.so; it records container steps in $FAKE_PYXIS_RECORD (job env), else
#   in $STATE/fake_pyxis.jsonl (emptied whenever the cluster (re)starts).
# Ports: slurmctld 6817, slurmd 6818 (gpunode1) / 6821 (gpunode2) / 6820 (cpunode),
# slurmdbd 6819, mariadbd 6833.
# Everything it writes besides /etc/slurm lives under $STATE (logs in $STATE/log); a munged
# that already works is reused, else one is started (and stopped by `down`).
set -euo pipefail

STATE=/var/lib/tsb-slurm
CONF_DIR=/etc/slurm
CONF=$CONF_DIR/slurm.conf
CLUSTER=tsb
ACCOUNTS=(tsb tsb2)
OTHER_USER=tsbother # a second Unix account, if present: associated with tsb2 only
CTLD_PORT=6817
GPU_PORT=6818 # gpunode1; gpunode2 on GPU2_PORT
DBD_PORT=6819
CPU_PORT=6820
GPU2_PORT=6821
NODES=(gpunode1 gpunode2 cpunode)
MAX_ARRAY=5 # small, so a live test submits a batch bigger than it (Slurm's default: 1001)
DB_PORT=6833
DB_SOCK=$STATE/mysql/mysqld.sock
DB_NAME=tsb_slurm_acct
TIMEOUT=60
RUN=$STATE/run
LOG=$STATE/log
RECORD=$STATE/fake_pyxis.jsonl
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export SLURM_CONF=$CONF

say() { echo "[cluster.sh] $*" >&2; }
die() {
  say "ERROR: $*"
  exit 1
}

# pid from PIDFILE if it names a live process called NAME
live_pid() {
  local pid
  [ -s "$1" ] || return 1
  pid=$(<"$1")
  [ "$(ps -o comm= -p "$pid" 2>/dev/null)" = "$2" ] && echo "$pid"
}

# stop the process in PIDFILE (only if it is NAME), wait for it to go
stop() {
  local pid i
  if pid=$(live_pid "$1" "$2"); then
    kill "$pid" 2>/dev/null || true
    for i in $(seq 150); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      say "$2 ($pid) ignores SIGTERM, killing it"
      kill -9 "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$1"
}

install_packages() {
  local pkgs=(slurm-wlm munge libpmix-dev libslurm-dev slurmdbd mariadb-server gcc libc6-dev
    openmpi-bin libopenmpi-dev python3-mpi4py)
  local missing=() p
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  say "installing ${missing[*]}"
  # policy-rc.d on these machines keeps the packages' init scripts from starting anything
  local apt=(apt-get install -y -q --no-install-recommends -o Dpkg::Use-Pty=0)
  if ! DEBIAN_FRONTEND=noninteractive "${apt[@]}" "${missing[@]}" >"$LOG/apt.log" 2>&1; then
    apt-get update -q >>"$LOG/apt.log" 2>&1
    DEBIAN_FRONTEND=noninteractive "${apt[@]}" "${missing[@]}" >>"$LOG/apt.log" 2>&1 ||
      die "apt-get install failed: $(tail -n 5 "$LOG/apt.log")"
  fi
}

start_munge() { # reuse a munged that works, whoever started it
  munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && return 0
  [ -s /etc/munge/munge.key ] || mungekey -c -k /etc/munge/munge.key
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
  install -d -o munge -g munge -m 0755 /run/munge
  runuser -u munge -- /usr/sbin/munged --force
  local i
  for i in $(seq 50); do
    munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && break
    sleep 0.1
  done
  cp /run/munge/munged.pid "$RUN/munged.pid" # ours: `down` stops it
  munge -n </dev/null | unmunge >/dev/null || die "munged does not work"
}

build_plugin() { # srun and slurmstepd load it afresh for every step: no restart needed
  local src=$HERE/spank/fake_pyxis.c so=$STATE/fake_pyxis.so
  if [ ! -e "$so" ] || [ "$src" -nt "$so" ]; then
    gcc -shared -fPIC -O2 -Wall -Wextra -Werror -o "$so.new" "$src" ||
      die "cannot compile $src"
    mv "$so.new" "$so"
  fi
}

# write FILE from stdin; CHANGED=1 if its content changed
put() {
  local new
  new=$(cat)
  if [ ! -e "$1" ] || [ "$new" != "$(<"$1")" ]; then
    printf '%s\n' "$new" >"$1"
    CHANGED=1
  fi
}

write_config() {
  local host mem i
  host=$(hostname -s)
  mem=$(slurmd -C 2>/dev/null | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' | head -n 1)
  mem=${mem:-4000}
  local n
  mkdir -p "$CONF_DIR" "$STATE"/{ctld,pmix-cli} "$RUN" "$LOG"
  for n in "${NODES[@]}"; do mkdir -p "$STATE/spool/$n" "$STATE/pmix/$n" "$STATE/dev/$n"; done
  for n in gpunode1 gpunode2; do
    for i in 0 1 2 3 4 5 6 7; do # gres File= must be a character device
      [ -c "$STATE/dev/$n/nvidia$i" ] || mknod -m 0666 "$STATE/dev/$n/nvidia$i" c 1 3
    done
  done
  put "$CONF" <<EOF
# written by tests/slurm/cluster.sh
ClusterName=$CLUSTER
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
AccountingStorageEnforce=associations,limits,qos
AccountingStorageTRES=gres/gpu
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
EnforcePartLimits=ALL
ReturnToService=2
MinJobAge=300
MaxArraySize=$MAX_ARRAY
KillWait=5
InactiveLimit=0
MailProg=/bin/true
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd-%n.log
SlurmdParameters=config_overrides
GresTypes=gpu
NodeName=gpunode1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$GPU_PORT CPUs=16 Boards=1 SocketsPerBoard=2 CoresPerSocket=8 ThreadsPerCore=1 RealMemory=$mem Gres=gpu:8 State=UNKNOWN
NodeName=gpunode2 NodeHostname=$host NodeAddr=127.0.0.1 Port=$GPU2_PORT CPUs=16 Boards=1 SocketsPerBoard=2 CoresPerSocket=8 ThreadsPerCore=1 RealMemory=$mem Gres=gpu:8 State=UNKNOWN
NodeName=cpunode NodeHostname=$host NodeAddr=127.0.0.1 Port=$CPU_PORT CPUs=4 Boards=1 SocketsPerBoard=1 CoresPerSocket=4 ThreadsPerCore=1 RealMemory=$mem State=UNKNOWN
PartitionName=gpu Nodes=gpunode1,gpunode2 Default=YES MaxTime=04:00:00 State=UP
PartitionName=cpu Nodes=cpunode Default=NO MaxTime=01:00:00 State=UP
EOF
  put "$CONF_DIR/gres.conf" <<EOF
# written by tests/slurm/cluster.sh
AutoDetect=off
NodeName=gpunode1 Name=gpu File=$STATE/dev/gpunode1/nvidia[0-7]
NodeName=gpunode2 Name=gpu File=$STATE/dev/gpunode2/nvidia[0-7]
EOF
  put "$CONF_DIR/mpi.conf" <<EOF
# written by tests/slurm/cluster.sh
PMIxCliTmpDirBase=$STATE/pmix-cli
EOF
  put "$CONF_DIR/slurmdbd.conf" <<EOF
# written by tests/slurm/cluster.sh
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=tsb_slurm
StoragePass=tsb_slurm
StorageLoc=$DB_NAME
PidFile=$RUN/slurmdbd.pid
LogFile=$LOG/slurmdbd.log
EOF
  chmod 0600 "$CONF_DIR/slurmdbd.conf"
  put "$CONF_DIR/plugstack.conf" <<EOF
# written by tests/slurm/cluster.sh
required $STATE/fake_pyxis.so record=$RECORD
EOF
}

db() { mariadb --socket="$DB_SOCK" -N -B -e "$1"; }

start_mariadb() { # our own instance: datadir, socket and TCP port under $STATE
  db 'select 1' >/dev/null 2>&1 && return 0
  install -d -o mysql -g mysql "$STATE/mysql"
  if [ ! -d "$STATE/mysql/data/mysql" ]; then
    mariadb-install-db --user=mysql --datadir="$STATE/mysql/data" --skip-test-db \
      >"$LOG/mariadb-install.log" 2>&1 || die "mariadb-install-db failed, see $LOG"
  fi
  rm -f "$STATE/mysql/mariadbd.pid"
  setsid /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$STATE/mysql/data" \
    --socket="$DB_SOCK" --port=$DB_PORT --bind-address=127.0.0.1 --skip-name-resolve \
    --pid-file="$STATE/mysql/mariadbd.pid" --log-error="$STATE/mysql/mariadbd.err" \
    --innodb-buffer-pool-size=32M </dev/null >/dev/null 2>&1 &
  local i
  for i in $(seq 300); do
    db 'select 1' >/dev/null 2>&1 && break
    sleep 0.1
  done
  db 'select 1' >/dev/null || die "mariadbd did not start: $(tail -n 5 "$STATE/mysql/mariadbd.err")"
  cp "$STATE/mysql/mariadbd.pid" "$RUN/mariadbd.pid"
}

start_accounting() { # fresh database, slurmdbd, cluster + accounts + root's associations
  start_mariadb
  stop "$RUN/slurmdbd.pid" slurmdbd
  db "DROP DATABASE IF EXISTS $DB_NAME;
      CREATE USER IF NOT EXISTS 'tsb_slurm'@'127.0.0.1' IDENTIFIED BY 'tsb_slurm';
      GRANT ALL ON $DB_NAME.* TO 'tsb_slurm'@'127.0.0.1'; FLUSH PRIVILEGES;"
  /usr/sbin/slurmdbd || die "slurmdbd failed: $(tail -n 5 "$LOG/slurmdbd.log")"
  local t0=$SECONDS
  until sacctmgr -n list cluster >/dev/null 2>&1; do
    [ $((SECONDS - t0)) -lt $TIMEOUT ] || die "slurmdbd not answering: $(tail -n 5 "$LOG/slurmdbd.log")"
    sleep 0.2
  done
  local accts
  accts=$(IFS=,; echo "${ACCOUNTS[*]}")
  sacctmgr -i add cluster "$CLUSTER" >/dev/null
  sacctmgr -i add account "$accts" Cluster="$CLUSTER" Description=tsb-tests Organization=tsb >/dev/null
  sacctmgr -i add user root Account="$accts" DefaultAccount="${ACCOUNTS[0]}" Cluster="$CLUSTER" >/dev/null
  # the second account the shared-folder tests act as (runuser -u tsbother), when this machine has it
  if id -u "$OTHER_USER" >/dev/null 2>&1; then
    sacctmgr -i add user "$OTHER_USER" Account="${ACCOUNTS[1]}" Cluster="$CLUSTER" >/dev/null
  fi
}

daemons_alive() {
  live_pid "$RUN/slurmdbd.pid" slurmdbd >/dev/null &&
    live_pid "$RUN/slurmctld.pid" slurmctld >/dev/null &&
    db 'select 1' >/dev/null 2>&1 || return 1
  local n
  for n in "${NODES[@]}"; do live_pid "$RUN/slurmd-$n.pid" slurmd >/dev/null || return 1; done
}

nodes_idle() { # every node idle (or busy), none down/drained
  local states
  states=$(sinfo -h -N -o '%N %T' 2>/dev/null | sort -u) || return 1
  [ "$(grep -cE '^(gpunode1|gpunode2|cpunode) (idle|mixed|allocated|completing)$' <<<"$states")" -eq ${#NODES[@]} ]
}

stop_slurm() { # all slurmd + slurmctld at once (each takes seconds to exit), then slurmdbd
  local f pid pids=()
  for f in "$RUN"/slurmd-*.pid "$RUN/slurmctld.pid"; do
    pid=$(live_pid "$f" slurmd || live_pid "$f" slurmctld) && pids+=("$pid")
  done
  [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true
  for f in "$RUN"/slurmd-*.pid; do stop "$f" slurmd; done
  stop "$RUN/slurmctld.pid" slurmctld
  stop "$RUN/slurmdbd.pid" slurmdbd
}

start_slurm() {
  stop_slurm
  rm -rf "${STATE:?}/ctld" && mkdir -p "$STATE/ctld" # no stale DRAIN/INVAL, no old jobs
  : >"$RECORD"                                       # job ids start again at 1
  start_accounting
  /usr/sbin/slurmctld -f "$CONF" || die "slurmctld failed: $(tail -n 5 "$LOG/slurmctld.log")"
  local n
  for n in "${NODES[@]}"; do
    # its own mount namespace: the step's pmix client folders and OpenMPI's shared memory
    # segments (named after the host and the rank on the node) do not meet the other nodes'
    # shellcheck disable=SC2016 # the inner sh expands its own arguments
    unshare -m --propagation private sh -c 'mount --bind "$1" "$2" &&
      mount -t tmpfs -o mode=1777,size=1g tsb-shm /dev/shm && exec "$3" -f "$4" -N "$5"' \
      sh "$STATE/pmix/$n" "$STATE/pmix-cli" /usr/sbin/slurmd "$CONF" "$n" ||
      die "slurmd $n failed: $(tail -n 5 "$LOG/slurmd-$n.log")"
  done
}

wait_idle() {
  local t0=$SECONDS
  until nodes_idle; do
    if [ $((SECONDS - t0)) -ge $TIMEOUT ]; then
      sinfo -N >&2 || true
      tail -n 5 "$LOG"/slurm*.log >&2 || true
      die "nodes not idle after ${TIMEOUT}s"
    fi
    sleep 0.2
  done
}

smoke_test() { # one batch job per partition (pmix over both GPU nodes, OpenMPI+mpi4py, SPANK)
  local gpu cpu t0=$SECONDS state j
  local mpi="from mpi4py import MPI; assert MPI.COMM_WORLD.allreduce(1) == 4, 'no 4-rank MPI world'"
  srun --mpi=list 2>&1 | grep -q pmix || die "Slurm has no pmix MPI plugin: $(srun --mpi=list 2>&1)"
  gpu=$(sbatch --parsable -p gpu -N 2 --ntasks-per-node=2 --gres=gpu:2 -t 1 -J tsb-smoke -o "$LOG/smoke-%j.out" \
    --wrap "srun --mpi=pmix --container-image=tsb-smoke --container-workdir=/ /usr/bin/python3 -c \"$mpi\"")
  cpu=$(sbatch --parsable -p cpu -n 1 -t 1 -J tsb-smoke -o "$LOG/smoke-%j.out" --wrap 'srun true')
  while [ -n "$(squeue -h -j "$gpu,$cpu" 2>/dev/null)" ]; do
    [ $((SECONDS - t0)) -lt $TIMEOUT ] || die "smoke jobs $gpu,$cpu still queued after ${TIMEOUT}s"
    sleep 0.2
  done
  for j in "$gpu" "$cpu"; do
    state=$(scontrol show job "$j" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
    [ "$state" = COMPLETED ] || die "smoke job $j ended $state: $(cat "$LOG/smoke-$j.out")"
  done
}

up() {
  [ "$(id -u)" -eq 0 ] || die "run me as root"
  mkdir -p "$RUN" "$LOG"
  install_packages
  start_munge
  CHANGED=0
  write_config
  build_plugin
  if [ "$CHANGED" -eq 1 ] || ! daemons_alive || ! nodes_idle; then
    say "starting slurm (config changed or a daemon is down)"
    start_slurm
    wait_idle
  fi
  smoke_test
  say "up: $(sinfo -h -o '%P/%a/%D/%T' | tr '\n' ' ')"
}

down() {
  stop_slurm
  stop "$RUN/mariadbd.pid" mariadbd
  stop "$RUN/munged.pid" munged
  say "down"
}

case "${1:-}" in
up) up ;;
down) down ;;
env)
  echo "export SLURM_CONF=$CONF"
  echo "export TSB_SLURM_STATE=$STATE"
  echo "export TSB_SLURM_ACCOUNTS=$(IFS=,; echo "${ACCOUNTS[*]}")"
  echo "export TSB_FAKE_PYXIS_RECORD=$RECORD"
  ;;
*) die "usage: $0 up|down|env" ;;
esac
