#!/usr/bin/env bash
# Headless Chromium for the browser tests (tests/notebooks/test_browser.py, test_report_print.py) and
# poppler-utils (pdftotext reads the printed report back), from Debian's packages:
# Playwright drives /usr/bin/chromium (`playwright install` is not used: it downloads browsers).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/apt.sh
apt_install_missing chromium chromium-driver fonts-dejavu-core poppler-utils
echo "== browser: $(/usr/bin/chromium --version 2>/dev/null || echo 'chromium missing')"
