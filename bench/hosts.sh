#!/usr/bin/env bash
# Bulk bytes between hosts (network namespaces): 256 MiB aliased copies over
# links capped at 2, 10 and 25 Gbit/s and uncapped, gRPC and UCX, concurrency
# 1 and 2, each against its ceiling, beside a raw TCP stream and
# ucx_perftest. See bench/hosts.py. Root; builds nothing (scripts/build.sh).
#
#   sudo bash bench/hosts.sh [--caps=2gbit,10gbit,25gbit,none] [--json]
set -euo pipefail
cd "$(dirname "$0")/.."
exec env PYTHONPATH="${FARCALL_BUILD_DIR:-build}/python" .venv/bin/python bench/hosts.py "$@"
