#!/usr/bin/env bash
# Runs every test: installs what is missing, builds with tests, runs ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
echo "== building with tests"
bash scripts/build.sh
echo "== running tests"
cd build
ctest --output-on-failure --timeout 900 -j 2
