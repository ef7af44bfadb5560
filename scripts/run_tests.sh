#!/usr/bin/env bash
# Runs every test: installs what is missing, builds with tests, runs ctest
# (unit tests next to their code, and the conformance suite in tests/ against
# real agent and router processes, once per platform built). Tests of a
# platform with no device here skip and say why (ctest label gpu).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
# ccache keys on paths relative to the checkout, so that a fresh clone in
# another folder (as CI makes) reuses what an earlier build compiled; the
# sanitizer, TSan and fuzzing builds that ctest starts inherit it.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
# In CI every platform must build: a missing toolkit fails the run.
if [ "${CI:-}" = true ]; then
  export FARCALL_REQUIRE_BACKENDS="${FARCALL_REQUIRE_BACKENDS:-cuda;rocm;oneapi}"
fi
echo "== building with tests"
bash scripts/build.sh
echo "== device tests: which platforms have a device here"
for p in cuda rocm oneapi; do
  if ! grep -q "agent platforms built:.*\b$p\b" build/configure.log; then
    echo "  $p: not built (toolkit not found)"
  elif out=$(build/device_agents/farcall-agent --platform=$p --list_devices 2>&1); then
    echo "  $p: $(echo "$out" | head -1)"
  else
    echo "  $p: SKIPPED, device tests (ctest label gpu) skip: $out"
  fi
done
echo "== running tests"
cd build
ctest --output-on-failure --timeout 900 -j 2
