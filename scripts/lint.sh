#!/usr/bin/env bash
# Every static check: style (ruff), types (mypy --strict), layering (import-linter contracts in
# pyproject.toml) and module size (scripts/module_size.py). `make lint` runs this; so does
# scripts/test.sh before the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin

echo "== ruff"
$BIN/ruff check src tests bench scripts
$BIN/ruff format --check src tests bench scripts
echo "== mypy"
$BIN/mypy
echo "== import-linter"
$BIN/lint-imports --no-cache
echo "== module size"
$BIN/python scripts/module_size.py --max 600 src/modelgate
echo "== format names"
$BIN/python scripts/format_names.py src/modelgate
