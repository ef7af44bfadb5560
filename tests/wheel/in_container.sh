#!/usr/bin/env bash
# Runs inside the bare container of tests/wheel/run_wheel_test.sh, with no
# network: /wheelhouse holds farcall's wheel and its dependencies' wheels,
# /src the repository (read-only). Installs the wheel into a fresh venv, then
# makes one jitted call through the XLA FFI path and runs the Python tests
# against the installed package and its bundled binaries.
set -euo pipefail
for tool in cc c++ gcc cmake; do
  if command -v "$tool" >/dev/null 2>&1; then
    echo "wheel_test: this image has $tool; it must have no build tools" >&2
    exit 1
  fi
done
if ls /usr/lib/x86_64-linux-gnu/libgrpc* >/dev/null 2>&1; then
  echo "wheel_test: this image has gRPC's libraries; it must have none" >&2
  exit 1
fi
python3 -m venv /venv
/venv/bin/pip install -q --no-index --find-links /wheelhouse --disable-pip-version-check \
  "farcall[jax,test]"
echo "== wheel_test: installed $(/venv/bin/pip list 2>/dev/null | grep -E '^(farcall|jax|jaxlib) ' | tr -s ' ' | paste -sd, -)"
cd /tmp
export PYTHONDONTWRITEBYTECODE=1
# One jitted call on the FFI path, against an agent started from the
# wheel's farcall-agent.
/venv/bin/python /src/tests/wheel/one_ffi_call.py /venv/bin/farcall-agent
echo "== wheel_test: the Python tests against the installed wheel"
FARCALL_AGENT_BIN=/venv/bin/farcall-agent FARCALL_ROUTER_BIN=/venv/bin/farcall-router \
  FARCALL_CLI_BIN=/venv/bin/farcall \
  /venv/bin/python -m pytest -q -rs -p no:cacheprovider /src/tests/python
