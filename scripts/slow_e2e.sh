#!/bin/sh
# The long end-to-end runs left out of the default run to keep CI fast: each takes a path the
# default run also takes (a hot spare's swap, a cut host, the deep check), in a longer story
# (-m slow_e2e; root needed).
#   scripts/slow_e2e.sh [PYTEST ARGS]
set -eu
cd "$(dirname "$0")/.."
exec .venv/bin/python -m pytest tests/e2e -m slow_e2e -v "$@"
