#!/usr/bin/env bash
# Throughput through agents of several platforms, side by side: a 64 MiB
# aliased copy (up and back) and a 64 MiB uint8 sum (up only), each run three
# times over gRPC (shared memory off), in GB/s one way.
#   bash bench/device_bench.sh [PLATFORM ...]     # default: cpu oneapi
set -euo pipefail
cd "$(dirname "$0")/.."
platforms=("$@")
((${#platforms[@]})) || platforms=(cpu oneapi)
bytes=${FARCALL_BENCH_BYTES:-$((64 << 20))}
bash scripts/build.sh farcall farcall-agent >/dev/null
printf '%-8s %-22s %s\n' platform handler "GB/s (3 runs)"
for plat in "${platforms[@]}"; do
  fifo=$(mktemp -u); mkfifo "$fifo"
  build/device_agents/farcall-agent --platform="$plat" --listen=127.0.0.1:0 --shm_socket= \
    --ready_fd=3 3>"$fifo" >/dev/null 2>&1 &
  pid=$!
  if ! read -r port _ <"$fifo"; then
    rm -f "$fifo"; echo "$plat: the agent did not start (no device?)"; continue
  fi
  rm -f "$fifo"
  for h in "copy --alias" "sum"; do
    runs=()
    for _ in 1 2 3; do
      # shellcheck disable=SC2086  # $h is a handler plus its flag
      runs+=("$(build/client/farcall bench --target=127.0.0.1:$port --platform=$plat \
        --handler=$h --bytes=$bytes --calls=6 --warmup=1 --json | tail -1 |
        python3 -c 'import json,sys; print("%.2f" % json.load(sys.stdin)["gbps"])')")
    done
    printf '%-8s %-22s %s\n' "$plat" "$h" "${runs[*]}"
  done
  kill "$pid"; wait "$pid" 2>/dev/null || true
done
