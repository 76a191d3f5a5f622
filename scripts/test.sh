#!/usr/bin/env bash
# The whole test suite: lint, types, then pytest. `make test` calls this after installing the
# package with its test extras into .venv. Services the tests need (PostgreSQL, Redis) are started
# by scripts/services.sh when present.
#
# pytest runs on MODELGATE_TEST_WORKERS processes (pytest-xdist; default 2, one per core of the CI
# machine), each test file kept on one worker (--dist loadfile: module-scoped servers start once).
# Arguments go to pytest after these, so `bash scripts/test.sh tests/billing -k cap` runs one area
# and `-n 0` runs in this one process.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin

bash scripts/lint.sh
echo "== pytest"
if [ -x scripts/services.sh ]; then
    # shellcheck disable=SC1091
    source scripts/services.sh
    # Set before starting: a start that fails half-way (PostgreSQL up, Redis not) still stops
    # what it started.
    trap stop_services EXIT
    # A run stopped by a signal (Ctrl-C, a CI timeout) exits through the EXIT trap too.
    trap 'exit 130' INT
    trap 'exit 143' TERM
    start_services
fi
$BIN/pytest -q -p no:cacheprovider -n "${MODELGATE_TEST_WORKERS:-2}" --dist loadfile --durations=30 "$@"
