#!/bin/sh
# The scale test: 128 test hosts written as one inventory range (tests/e2e/test_scale_e2e.py).
# Root needed; runs alone (it builds its own cluster under DDPTUI_TESTHOSTS's prefix).
#   DDPTUI_TESTHOSTS=PREFIX:SUBNET scripts/scale_test.sh [PYTEST ARGS]
set -eu
cd "$(dirname "$0")/.."
exec .venv/bin/python -m pytest tests/e2e/test_scale_e2e.py -m scale -v "$@"
