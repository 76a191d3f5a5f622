#!/usr/bin/env bash
# make bench: the gateway's own cost against a fast fake upstream (docs/bench.md).
# Usage: bash bench/run.sh [--peer litellm] [--seconds 3] [--endpoints chat ...]
# BENCH_MODULE=bench.ab bash bench/run.sh --ref X [--store postgresql]: make bench-ab, same set-up.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v taskset >/dev/null; then
  echo "bench: installing util-linux for taskset" >&2
  apt-get update -qq && apt-get install -y -qq util-linux >/dev/null
fi
if [ "$(nproc)" -lt 2 ]; then
  echo "bench: needs 2 cores (gateway pinned to core 0, load generator and fake upstream to core 1)" >&2
  exit 1
fi
# --store postgresql: a throwaway PostgreSQL and Redis from the test suite's script (installed from
# Debian's packages when missing), stopped when the bench ends.
if [[ " $* " == *" --store postgresql "* ]]; then
  # shellcheck disable=SC1091
  source scripts/services.sh
  start_databases
  trap stop_services EXIT
fi
.venv/bin/python -m "${BENCH_MODULE:-bench.run}" "$@"
