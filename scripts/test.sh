#!/usr/bin/env bash
# The whole test suite: lint, types, then pytest. `make test` calls this after installing the
# package with its test extras into .venv. Services the tests need (PostgreSQL, Redis) are started
# by scripts/services.sh when present.
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
    start_services
fi
$BIN/pytest -q -p no:cacheprovider "$@"
