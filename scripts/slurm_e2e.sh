#!/bin/sh
# The longer stories of a job handed to Slurm, left out of the default run to keep CI fast:
# every launch style, launched and exported; detach, attach and stop; the exported script by
# hand; `hosts: slurm` inside salloc; progress across a restart, a straggler, a hang and a GPU
# failure in a Slurm job; a node Slurm fails mid-job (named, the job asked again without it);
# the dashboard on a Slurm job; the pitfalls, job ids counted again included
# (-m slow_slurm; root and the Slurm packages needed: see tests/support/slurmhosts.py).
#   scripts/slurm_e2e.sh [PYTEST ARGS]
set -eu
cd "$(dirname "$0")/.."
exec .venv/bin/python -m pytest tests/e2e -m slow_slurm -v "$@"
