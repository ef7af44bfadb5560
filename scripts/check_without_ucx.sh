#!/usr/bin/env bash
# farcall built without UCX (-DFARCALL_UCX=OFF), as on a host whose UCX is
# missing: the client and the agent then build their data planes' absent
# twins (client/ucx_exchange_absent.cc, device_agents/ucx_exchange_absent.cc)
# instead of ucx_exchange.cc. Builds build-noucx/ (cpu only, no Python or
# fuzzers, -O1) and runs there the tests that check what such a build does:
# a call that asks for UCX is refused before it is sent, an agent refuses
# --transports=ucx, offers no UCX address, and serves every other call.
# ctest runs this as no_ucx_build_test (label build).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/side_build.sh
mkdir -p build-noucx
echo "== no-ucx: configuring build-noucx"
cmake -S . -B build-noucx -G Ninja -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS=-O1 \
  -DFARCALL_UCX=OFF -DFARCALL_BUILD_TESTS=ON -DFARCALL_PYTHON=OFF -DFARCALL_FUZZ=OFF \
  "-DFARCALL_DISABLE_BACKENDS=cuda;rocm;oneapi" "${launcher[@]}" >build-noucx/build.log 2>&1 \
  || { cat build-noucx/build.log >&2; exit 1; }
grep -q "FARCALL_UCX=OFF: core/ucx is not built" build-noucx/build.log \
  || { echo "no-ucx: the configuration built core/ucx anyway" >&2; exit 1; }
tests=(shm_test device_agent_test conformance_test)
echo "== no-ucx: building the agent, the router, the CLI and ${tests[*]}"
cmake --build build-noucx -j "$jobs" --target farcall-agent farcall-router farcall "${tests[@]}" \
  >>build-noucx/build.log 2>&1 || { tail -50 build-noucx/build.log >&2; exit 1; }
if readelf -d build-noucx/device_agents/farcall-agent | grep -q "libucp"; then
  echo "no-ucx: farcall-agent links UCX" >&2
  exit 1
fi
echo "== no-ucx: running ${tests[*]}"
cd build-noucx
ctest -R "^($(IFS='|'; echo "${tests[*]}"))\$" -j "$jobs" --timeout 600 --output-on-failure
