#!/usr/bin/env bash
# The tests marked `slurm` against a live cluster: .ci/slurm-up.sh, `python -m pytest -m slurm`,
# .ci/slurm-down.sh (an EXIT trap: also when bring-up or a test fails). Prints each phase's time.
#   usage: .ci/slurm.sh [DIR]   (cluster state and logs; default a fresh mktemp dir)
set -euo pipefail
cd "$(dirname "$0")/.."
S=${1:-$(mktemp -d /tmp/slurm-ci.XXXXXX)}
t0=$SECONDS
down() {
  local rc=$?
  t=$SECONDS
  .ci/slurm-down.sh "$S"
  echo "slurm: tear-down $((SECONDS - t)) s; total $((SECONDS - t0)) s (state and logs in $S)"
  exit $rc
}
trap down EXIT
PYTHON=$(command -v python) .ci/slurm-up.sh "$S"
echo "slurm: bring-up $((SECONDS - t0)) s"
t=$SECONDS
# -n 0: one test at a time (pyproject runs two xdist workers; the one-node cluster is sized for one)
env $(cat "$S/env") python -m pytest -q -n 0 -m slurm -p no:cacheprovider tests/test_slurm.py
echo "slurm: tests $((SECONDS - t)) s"
