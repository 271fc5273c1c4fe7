#!/bin/sh
# The long end-to-end runs left out of the default run to keep CI fast: each takes a path the
# default run also takes (a hot spare's swap, a cut host, the deep check), in a longer story
# (-m slow_e2e; root needed). Beside the tests marked in their files, tests/slow_e2e.txt lists
# those CI's 20 minutes left out by name.
#   scripts/slow_e2e.sh [PYTEST ARGS]
set -eu
cd "$(dirname "$0")/.."
exec .venv/bin/python -m pytest tests/e2e -m slow_e2e -v "$@"
