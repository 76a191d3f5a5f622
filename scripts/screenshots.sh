#!/usr/bin/env bash
# Regenerates the dashboard screenshots in docs/screenshots/ (`make screenshots`): a gateway with a
# month of seeded traffic, driven by Debian's headless Chromium (installed here when missing, as
# scripts/services.sh does for the tests). The PNGs are never edited by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC1091
source scripts/services.sh
_mg_svc_ensure_chromium
.venv/bin/python -m tests.admin.screenshots docs/screenshots
# The single sign-on views need a real OpenID provider: their tests take those shots.
MODELGATE_TEST_SCREENSHOTS="$PWD/docs/screenshots" .venv/bin/pytest -q -p no:cacheprovider tests/admin/test_sso_browser.py
