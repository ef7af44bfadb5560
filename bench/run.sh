#!/usr/bin/env bash
# Runs farcall's benchmarks side by side with bare-gRPC and raw-TCP baselines
# measured in the same run, three times each after a warm-up, and prints a
# table of medians and ratios against the targets (docs/performance.md).
#   bash bench/run.sh            # builds what it needs first
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh farcall farcall-agent farcall-router grpc_baseline tcp_echo >/dev/null
exec python3 bench/run.py "$@"
