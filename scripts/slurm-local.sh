#!/usr/bin/env bash
# slurm-local.sh — a one-node Slurm cluster on this machine, for the tests: munged, slurmctld
# and slurmd run from a private directory with their own ports, so `srun` starts shoal's
# ranks the way a cluster does, without touching the machine's own Slurm setup.
#   scripts/slurm-local.sh start DIR   # exit 0 once the node takes jobs; then
#                                      #   SLURM_CONF=DIR/slurm.conf srun -n 2 ...
#   scripts/slurm-local.sh stop DIR    # stops the daemons and removes DIR
# Needs Debian's slurmd, slurmctld, slurm-client and munge (scripts/deps.sh installs them)
# and root (slurmd starts tasks as the submitting user). On failure, one line on stderr
# says why and the logs are left in DIR/log.
set -u
cmd=${1:?usage: slurm-local.sh start|stop DIR}
dir=${2:?usage: slurm-local.sh start|stop DIR}

say() { echo "slurm-local: $*" >&2; }

stop_daemons() {
    for f in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
        [ -s "$f" ] && kill "$(cat "$f")" 2>/dev/null
    done
    sleep 0.3
    for f in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
        [ -s "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
    done
    return 0
}

stop() { stop_daemons; rm -rf "$dir"; }

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null ||
        echo $((20000 + RANDOM % 20000))
}

start() {
    for b in munged slurmctld slurmd srun sinfo; do
        command -v "$b" >/dev/null || PATH=$PATH:/usr/sbin command -v "$b" >/dev/null ||
            { say "$b not found: install slurmd, slurmctld, slurm-client and munge"; return 2; }
    done
    PATH=$PATH:/usr/sbin
    [ "$(id -u)" -eq 0 ] || { say "needs root (slurmd starts the tasks)"; return 2; }
    mkdir -p "$dir/spool" "$dir/state" "$dir/munge" "$dir/log" || return 1
    chmod 700 "$dir" "$dir/munge"
    host=$(hostname -s)
    head -c 1024 /dev/urandom >"$dir/munge/munge.key" && chmod 400 "$dir/munge/munge.key"
    munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
        --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
        --seed-file="$dir/munge/munged.seed" 2>>"$dir/log/munged.log" ||
        { say "munged did not start: $(tail -1 "$dir/log/munged.log")"; return 1; }
    cat >"$dir/slurm.conf" <<EOF
ClusterName=shoaltest
SlurmctldHost=$host
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=$host CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
    export SLURM_CONF=$dir/slurm.conf
    slurmctld -i -f "$SLURM_CONF" 2>>"$dir/log/slurmctld.log" ||
        { say "slurmctld did not start: $(tail -1 "$dir/log/slurmctld.log")"; return 1; }
    slurmd -f "$SLURM_CONF" 2>>"$dir/log/slurmd.log" ||
        { say "slurmd did not start: $(tail -1 "$dir/log/slurmd.log")"; return 1; }
    for _ in $(seq 100); do
        state=$(sinfo -h -o %T 2>/dev/null | head -1)
        case $state in idle*|mixed*|alloc*) return 0 ;; esac
        sleep 0.2
    done
    say "the node did not come up (state '${state:-?}'); logs in $dir/log"
    return 1
}

case $cmd in
start) start; rc=$?; [ $rc -ne 0 ] && stop_daemons; exit $rc ;;
stop) stop ;;
*) say "unknown command '$cmd': use start or stop"; exit 2 ;;
esac
