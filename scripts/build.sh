#!/usr/bin/env bash
# Configures and builds farcall in build/ (Release, ccache when present).
# Usage: scripts/build.sh [TARGET ...]   (no targets: everything, tests too)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFARCALL_BUILD_TESTS=ON >/dev/null
if (($#)); then
  cmake --build build -j "$jobs" --target "$@"
else
  cmake --build build -j "$jobs"
fi
