#!/usr/bin/env bash
# Installs farcall from BUILD_DIR into a fresh prefix (`cmake --install`),
# builds tests/install/ against it out of the tree (find_package(farcall)),
# starts the installed farcall-agent with the plugin built there, and runs
# the client built there against it. ctest runs this as install_test.
#   bash tests/install/run_install_test.sh [BUILD_DIR]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$(cd "${1:-build}" && pwd)
work=$(mktemp -d)
agent_pid=""
cleanup() {
  [ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
echo "== install: cmake --install into $work/prefix"
cmake --install "$build" --prefix "$work/prefix" >"$work/install.log"
launcher=()
if command -v ccache >/dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
echo "== install: building tests/install against it"
cmake -S tests/install -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_PREFIX_PATH=$work/prefix" "${launcher[@]}" >"$work/configure.log" \
  || { cat "$work/configure.log" >&2; exit 1; }
cmake --build "$work/build" >"$work/build.log" || { tail -40 "$work/build.log" >&2; exit 1; }
echo "== install: the installed agent with the plugin, and the client"
mkfifo "$work/ready"
"$work/prefix/bin/farcall-agent" --listen=127.0.0.1:0 --shm_socket= \
  "--plugins=$work/build/twice_plugin.so" --ready_fd=3 3>"$work/ready" 2>"$work/agent.log" &
agent_pid=$!
read -r port _ <"$work/ready" || { cat "$work/agent.log" >&2; exit 1; }
"$work/build/consumer_client" "127.0.0.1:$port"
