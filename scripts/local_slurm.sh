#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, to try `--launcher slurm` and to test it.
#
#   scripts/local_slurm.sh up      start munged, slurmctld and slurmd (nothing if already up)
#   scripts/local_slurm.sh down    stop exactly what `up` started (by the pids it recorded)
#   scripts/local_slurm.sh status  say whether it is up; exit 0 if it is, 3 if not
#   scripts/local_slurm.sh env     print `export SLURM_CONF=...` (eval it in your shell)
#
# Slurm's client commands (sbatch, squeue, scancel ...) find a cluster through its
# configuration file, /etc/slurm/slurm.conf or the one $SLURM_CONF names. This cluster
# keeps everything in one folder it owns, $WORKBENCH_SLURM_DIR (default
# /tmp/workbench-slurm): slurm.conf, munge's key and socket, state, logs and pid files.
# So it touches no system file, and uses ports other than Slurm's defaults (6817, 6818),
# so it cannot answer for, or clash with, a real Slurm on the machine. After `up`:
#
#   export SLURM_CONF=/tmp/workbench-slurm/slurm.conf
#   sinfo; srun -n2 hostname; workbench run --launcher slurm --np 2 ...
#
# Why these settings: in a container there is no systemd and often no writable cgroup
# tree, so processes are tracked by their parent links (proctrack/linuxproc) and not
# bound to cores by Slurm (task/none); accounting is off (no slurmdbd). The node offers
# every CPU of this machine. Needs root (slurmd starts jobs as their user) and Debian's
# `slurm-wlm` and `munge` packages (scripts/install_system_deps.sh installs them).
set -euo pipefail

DIR=${WORKBENCH_SLURM_DIR:-/tmp/workbench-slurm}
CONF=$DIR/slurm.conf
CTLD_PORT=${WORKBENCH_SLURM_PORT:-16817}
SLURMD_PORT=$((CTLD_PORT + 1))
NODE=$(hostname -s)

# Run as root, this script must trust nothing another user could have written: a folder
# /tmp/workbench-slurm that someone created first would let them choose slurm.conf, the
# munge key and the pid files that `down` kills. So the folder must be ours, no symlink, and
# writable by nobody else; and a pid is only signalled if its process is the daemon the file
# is named after and runs as us.
own_dir() {  # succeed if $DIR does not exist yet or is a safe folder of ours
    [ -e "$DIR" ] || [ -L "$DIR" ] || return 0
    local owner mode
    if [ -L "$DIR" ] || [ ! -d "$DIR" ]; then
        echo "local_slurm: $DIR is not a folder (a symlink?): not using it;" \
             "remove it or set WORKBENCH_SLURM_DIR" >&2
        return 1
    fi
    read -r owner mode < <(stat -c '%u %a' "$DIR")
    if [ "$owner" != "$(id -u)" ] || [ $((8#$mode & 8#022)) -ne 0 ]; then
        echo "local_slurm: $DIR belongs to uid $owner (mode $mode), not to uid $(id -u)" \
             "alone: not using it; remove it or set WORKBENCH_SLURM_DIR" >&2
        return 1
    fi
}

pid_of() {  # the pid recorded in $DIR/<name>.pid if that daemon still runs as us, else nothing
    local file=$DIR/$1.pid pid
    [ -f "$file" ] && [ ! -L "$file" ] && [ -s "$file" ] || return 0
    [ "$(stat -c %u "$file")" = "$(id -u)" ] || return 0
    pid=$(head -c 32 "$file" | tr -cd '0-9')
    [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] || return 0
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$1" ] || return 0
    [ "$(stat -c %u "/proc/$pid")" = "$(id -u)" ] || return 0
    echo "$pid"
}

is_up() {  # the three daemons run and the node answers (state idle, mixed or allocated)
    [ -n "$(pid_of munged)" ] && [ -n "$(pid_of slurmctld)" ] && [ -n "$(pid_of slurmd)" ] \
        && SLURM_CONF=$CONF sinfo -h -n "$NODE" -o %T 2>/dev/null | grep -qE '^(idle|mixed|alloc)'
}

write_conf() {
    cat >"$CONF" <<EOF
# Written by scripts/local_slurm.sh: a one-node cluster for trying and testing the workbench.
ClusterName=workbench
SlurmctldHost=$NODE
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/state/ctld
SlurmdSpoolDir=$DIR/state/slurmd
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
# Quick turn-around for a one-node teaching cluster: start queued jobs soon after
# resources free up, and give a cancelled job's processes 2 s between SIGTERM and SIGKILL.
SchedulerParameters=sched_min_interval=100000,batch_sched_delay=0
KillWait=2
MinJobAge=300
NodeName=$NODE CPUs=$(nproc) RealMemory=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2)) State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
}

up() {
    if is_up; then
        echo "local Slurm already up ($CONF)"
        return 0
    fi
    if [ "$(id -u)" -ne 0 ]; then
        echo "local_slurm: needs root (slurmd starts each job as its user)" >&2
        exit 1
    fi
    own_dir || exit 1
    for prog in munged mungekey slurmctld slurmd sinfo; do
        if ! command -v "$prog" >/dev/null && [ ! -x "/usr/sbin/$prog" ]; then
            echo "local_slurm: $prog not found: install slurm-wlm and munge" \
                 "(scripts/install_system_deps.sh)" >&2
            exit 1
        fi
    done
    down quiet  # whatever half of an earlier cluster is left
    # -m 755 on $DIR itself: readable (slurm.conf) by the users who submit, writable by us only.
    mkdir -p -m 755 "$DIR"
    own_dir || exit 1  # created by someone else between the check above and now
    mkdir -p "$DIR"/{munge,state/ctld,state/slurmd,log}
    chmod 700 "$DIR/munge"
    # Our own munge key: a cluster's nodes share one; ours has one node.
    [ -s "$DIR/munge/munge.key" ] || mungekey --create --keyfile="$DIR/munge/munge.key" >/dev/null
    write_conf
    # --force: munged refuses folders it considers insecure (e.g. /tmp); this one is ours.
    munged --force --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge/munge.key" \
        --pid-file="$DIR/munged.pid" --log-file="$DIR/log/munged.log" \
        --seed-file="$DIR/munge/munged.seed" 2>>"$DIR/log/munged.log"
    # -i: ignore state left by an earlier cluster in this folder (no old jobs come back).
    SLURM_CONF=$CONF slurmctld -i
    SLURM_CONF=$CONF slurmd
    for _ in $(seq 1 60); do
        if is_up; then
            echo "local Slurm up: node $NODE, $(nproc) CPUs, partition debug."
            echo "Use it with:  export SLURM_CONF=$CONF"
            return 0
        fi
        sleep 0.25
    done
    echo "local_slurm: the cluster did not come up in 15 s; see $DIR/log/" >&2
    tail -n 5 "$DIR"/log/*.log >&2 || true
    down quiet
    exit 1
}

down() {  # stop each daemon by its recorded pid: SIGTERM, then SIGKILL after 5 s
    local name pid stopped=()
    for name in slurmd slurmctld munged; do
        pid=$(pid_of "$name")
        [ -n "$pid" ] || continue
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
        rm -f "$DIR/$name.pid"
        stopped+=("$name")
    done
    if [ "${1:-}" != quiet ]; then
        if [ ${#stopped[@]} -gt 0 ]; then echo "stopped: ${stopped[*]}"
        else echo "local Slurm was not running"; fi
    fi
}

case "${1:-}" in
    up) up ;;
    down) own_dir || exit 1; down ;;
    status)
        own_dir || exit 1
        if is_up; then echo "up ($CONF)"; SLURM_CONF=$CONF sinfo; exit 0
        else echo "down"; exit 3; fi ;;
    env) echo "export SLURM_CONF=$CONF" ;;
    *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac
