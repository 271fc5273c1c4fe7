#!/bin/sh
# The slow hang scenarios: real jobs silent but alive for minutes on the test hosts, which the
# run's hang watch must never call hung (tests/e2e/test_hangs_e2e.py, -m slow_hangs; root
# needed). The fast ones, every rule against every scenario: scripts/hang_scenarios.py.
#   scripts/hang_scenarios.sh [PYTEST ARGS]
set -eu
cd "$(dirname "$0")/.."
exec .venv/bin/python -m pytest tests/e2e/test_hangs_e2e.py -m slow_hangs -v "$@"
