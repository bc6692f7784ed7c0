#!/usr/bin/env bash
# Builds (via setup.sh) and runs every CPU test. This is what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 600
# End to end: real servers (the built-in tiny model on the CPU) and real clients.
python=python3
[ -x build/venv/bin/python ] && python=build/venv/bin/python  # made by setup.sh where pip could not install
"$python" -m pytest -q tests/e2e
