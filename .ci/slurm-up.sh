#!/usr/bin/env bash
# A single-node SLURM cluster with accounting, plus an MLflow tracking server, for the tests
# marked `slurm` (tests/test_slurm.py). Debian 12 (slurm-wlm 22.05), as root, no systemd: every
# daemon runs in the foreground in its own session (setsid), its PID in $S/<name>.pid, so
# .ci/slurm-down.sh stops exactly these processes.
#   usage: .ci/slurm-up.sh DIR     (state, logs and PIDs under DIR; the tests' env in DIR/env)
# Accounting (slurmdbd + MariaDB) is not optional: without it `sacct` cannot say that a job was
# cancelled, which is what the sweep's job watcher reads once a job leaves the queue.
set -euo pipefail
S=${1:?usage: slurm-up.sh DIR}
MLFLOW_PORT=${MLFLOW_PORT:-5077}
PY=${PYTHON:-python}
mkdir -p "$S"/{spool,state,log}
start() {  # name command...: run in its own session, remember its PID
  setsid "${@:2}" >"$S/log/$1.out" 2>&1 </dev/null &
  echo $! >"$S/$1.pid"
}
wait_for() {  # what command: poll for 30 s
  for _ in $(seq 300); do eval "$2" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "slurm-up: $1 did not come up in 30 s; its log:" >&2
  tail -n 20 "$S/log/$1.out" "$S/log/$1.log" 2>/dev/null >&2 || true
  exit 1
}

# The tracking server first (it takes longest to start), in its own session: its workers outlive
# a SIGTERM to the parent alone, so slurm-down.sh kills the process group.
start mlflow "$PY" -m mlflow server --backend-store-uri "sqlite:///$S/mlflow.db" \
  --default-artifact-root "$S/mlartifacts" --host 127.0.0.1 --port "$MLFLOW_PORT" --workers 1
if ! command -v slurmctld >/dev/null || ! command -v mariadbd >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    slurmctld slurmd slurm-client slurmdbd munge mariadb-server >/dev/null
fi
mkdir -p /run/munge /run/mysqld
chown munge:munge /run/munge
chown mysql:mysql /run/mysqld
[ -s /etc/munge/munge.key ] || { mungekey --create >/dev/null; chown munge:munge /etc/munge/munge.key; }

start munged setpriv --reuid=munge --regid=munge --init-groups munged --foreground
start mariadbd mariadbd --user=mysql --skip-networking --socket=/run/mysqld/mysqld.sock
wait_for munged "munge -n | unmunge"
wait_for mariadbd "mariadb -e 'select 1'"
mariadb -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
  CREATE USER IF NOT EXISTS slurm@localhost IDENTIFIED BY 'ci';
  GRANT ALL ON slurm_acct_db.* TO slurm@localhost;"

cat >/etc/slurm/slurmdbd.conf <<CONF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
StorageType=accounting_storage/mysql
StorageUser=slurm
StoragePass=ci
LogFile=$S/log/slurmdbd.log
PidFile=$S/slurmdbd.pidfile
CONF
chmod 600 /etc/slurm/slurmdbd.conf

# One node named `localhost` (slurmd -N: the machine's hostname is something else) with this
# machine's cores and 80% of its memory; one partition `cpu` (no GPUs). KillWait: seconds
# between SIGTERM and SIGKILL of a cancelled job, the time a run has to save its checkpoint.
cat >/etc/slurm/slurm.conf <<CONF
ClusterName=ci
SlurmctldHost=localhost
SlurmUser=root
NodeName=localhost CPUs=$(nproc) RealMemory=$(awk '/MemTotal/{print int($2/1024*0.8)}' /proc/meminfo) State=UNKNOWN
PartitionName=cpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SlurmdSpoolDir=$S/spool
StateSaveLocation=$S/state
SlurmctldPidFile=$S/slurmctld.pidfile
SlurmdPidFile=$S/slurmd.pidfile
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.log
ReturnToService=2
MpiDefault=none
KillWait=30
AccountingStorageType=accounting_storage/slurmdbd
JobAcctGatherType=jobacct_gather/none
CONF

start slurmdbd slurmdbd -D
wait_for slurmdbd "sacctmgr -n list cluster"
sacctmgr -i add cluster ci >/dev/null 2>&1 || true
start slurmctld slurmctld -D -i
wait_for slurmctld "scontrol ping | grep -q UP"
start slurmd slurmd -D -N localhost
wait_for slurmd "sinfo -h -o %T | grep -qx idle"

for _ in $(seq 900); do
  curl -sf "http://127.0.0.1:$MLFLOW_PORT/health" >/dev/null && break
  kill -0 "$(cat "$S/mlflow.pid")" 2>/dev/null || { tail -n 20 "$S/log/mlflow.out" >&2; exit 1; }
  sleep 0.2
done
curl -sf "http://127.0.0.1:$MLFLOW_PORT/health" >/dev/null || { echo "slurm-up: mlflow server not up in 180 s" >&2; exit 1; }
echo "SCALING_LAB_TEST_TRACKING_URI=http://127.0.0.1:$MLFLOW_PORT" >"$S/env"
sinfo
