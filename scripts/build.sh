#!/usr/bin/env bash
# Configures and builds farcall in build/ (Release, ccache when present).
# Usage: scripts/build.sh [TARGET ...]   (no targets: everything, tests too)
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build
# Cache hits across checkouts in other folders (see scripts/run_tests.sh).
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR=true
jobs=$(nproc 2>/dev/null || echo 2)
# FARCALL_REQUIRE_BACKENDS="cuda;rocm;oneapi" makes a missing toolkit an
# error instead of a backend left out (CI sets it).
# The Python extension is built against .venv's Python and nanobind, when
# scripts/install_deps.sh has made it.
# In CI the extension must build (FARCALL_PYTHON=ON), so that its tests
# cannot be left out unnoticed.
python_mode=${FARCALL_PYTHON:-AUTO}
[ "${CI:-}" = true ] && python_mode=ON
python_args=("-DFARCALL_PYTHON=$python_mode")
if [ -x .venv/bin/python ]; then
  python_args+=("-DPython_EXECUTABLE=$PWD/.venv/bin/python")
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFARCALL_BUILD_TESTS=ON \
  "-DFARCALL_REQUIRE_BACKENDS=${FARCALL_REQUIRE_BACKENDS:-}" "${python_args[@]}" >build/configure.log \
  || { cat build/configure.log >&2; exit 1; }
grep -E "farcall: (toolkits found|agent platforms built|Python extension)" build/configure.log || true
if (($#)); then
  cmake --build build -j "$jobs" --target "$@"
else
  cmake --build build -j "$jobs"
fi
# The farcall package into .venv, built by the same build tree (so the C++
# compiled above is reused, not built again), which keeps its tests and the
# extension's stub (.venv has what making it imports).
if [ -x .venv/bin/python ] && grep -q "farcall: Python extension with" build/configure.log; then
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-build-isolation \
    --no-deps -C build-dir=../build -C cmake.define.FARCALL_BUILD_TESTS=ON \
    -C cmake.define.FARCALL_PYTHON_STUB=ON ./python
fi
