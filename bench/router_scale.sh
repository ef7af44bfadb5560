#!/usr/bin/env bash
# One router in front of 64, 128 and 256 real cpu agents (one handler thread
# each) and 32 clients calling through lookaside: the router's CPU and RSS,
# Resolve's p50/p99, the calls' p50/p99, and how soon a dead agent leaves
# Resolve's answers (bench/router_scale.cc). Builds nothing
# (scripts/build.sh first).
#
#   bash bench/router_scale.sh [--agents=64,128,256] [--clients=32] [--seconds=10] [--json]
set -euo pipefail
cd "$(dirname "$0")/.."
build="${FARCALL_BUILD_DIR:-build}"
# 256 agents and their sockets: more descriptors than the default 1024.
ulimit -n 65536 2>/dev/null || true
exec "$build/bench/router_scale" --agent_bin="$build/device_agents/farcall-agent" \
  --router_bin="$build/server/farcall-router" "$@"
