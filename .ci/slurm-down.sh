#!/usr/bin/env bash
# Stop what .ci/slurm-up.sh DIR started, by the PIDs it recorded (never by name), newest first;
# SIGKILL after 10 s. Safe to run twice or after a failed bring-up.
set -uo pipefail
S=${1:?usage: slurm-down.sh DIR}
# Jobs first: slurmstepd and the job processes are not in slurmd's session. Only this
# cluster's jobs (slurmctld from DIR answers these commands).
if [ -s "$S/slurmctld.pid" ] && kill -0 "$(cat "$S/slurmctld.pid")" 2>/dev/null; then
  jobs=$(squeue -h -o %A 2>/dev/null | sort -u)
  if [ -n "$jobs" ]; then
    scancel $jobs 2>/dev/null || true
    for _ in $(seq 400); do [ -z "$(squeue -h -o %A 2>/dev/null)" ] && break; sleep 0.1; done
  fi
fi
for name in mlflow slurmd slurmctld slurmdbd mariadbd munged; do
  [ -s "$S/$name.pid" ] || continue
  pid=$(cat "$S/$name.pid")
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null  # its session's group
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -KILL -- "-$pid" 2>/dev/null
  rm -f "$S/$name.pid"
done
exit 0
