#!/usr/bin/env bash
# Runs every test: installs what is missing, builds with tests, runs ctest
# (unit tests next to their code, and the conformance suite in tests/ against
# real agent and router processes).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
echo "== building with tests"
bash scripts/build.sh
echo "== running tests"
cd build
ctest --output-on-failure --timeout 900 -j 2
