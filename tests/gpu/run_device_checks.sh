#!/usr/bin/env bash
# The device checks for a machine with an NVIDIA GPU, in one go (well under
# 5 minutes once built):
#   1. the cuda unit tests (device memory, out of memory, --devices, graph
#      capture and replay: a command-buffer-compatible handler's host code
#      runs once per signature);
#   2. the conformance suite against a cuda agent, directly and through the
#      router, with the example CUDA plugin; then again with a staging pool of
#      two 1 MiB blocks, so that calls run out of blocks and wait for their
#      own copies (or fall back to plain memory);
#   2b. results a handler leaves unwritten are zero in device memory too
#      (result_zeroing_test with a cuda test.half);
#   3. a short benchmark: host-to-device and device-to-host throughput through
#      the agent (256 MiB calls over loopback gRPC, median of 3 runs), next to
#      cudaMemcpy on pinned memory measured in the same run;
#   4. a 64-byte call's p50 on the cuda agent next to a cpu agent.
# It prints a summary table last and exits non-zero if a check failed.
#
#   bash tests/gpu/run_device_checks.sh                 # builds build-gpu/ first
#   bash tests/gpu/run_device_checks.sh --bundle DIR    # runs a bundle made by
#                                                       # tests/gpu/make_bundle.sh
# A bundle carries the binaries and the libraries they need to a machine
# that has the NVIDIA driver but no build tools or Debian libraries.
set -uo pipefail
cd "$(dirname "$0")/../.."

bundle=""
if [ "${1:-}" = "--bundle" ]; then bundle=$(cd "$2" && pwd); fi
if [ -n "$bundle" ]; then
  bin=$bundle/bin
  export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  agent=$bin/farcall-agent; router=$bin/farcall-router; cli=$bin/farcall
  unit=$bin/cuda_backend_test; conformance=$bin/conformance_test
  plugin=$bin/farcall_example_cuda_plugin.so; memcpy_bin=$bin/cuda_memcpy
  zeroing=$bin/result_zeroing_test; half_plugin=$bin/farcall_half_cuda_plugin.so
else
  echo "== building the cuda pieces in build-gpu/"
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DFARCALL_BUILD_TESTS=ON \
    -DFARCALL_DISABLE_BACKENDS="rocm;oneapi" -DFARCALL_REQUIRE_BACKENDS=cuda >/dev/null || exit 1
  cmake --build build-gpu -j "$(nproc)" --target farcall-agent farcall-router farcall \
    cuda_backend_test conformance_test farcall_example_cuda_plugin cuda_memcpy \
    result_zeroing_test farcall_half_cuda_plugin || exit 1
  b=build-gpu
  agent=$b/device_agents/farcall-agent; router=$b/server/farcall-router; cli=$b/client/farcall
  unit=$b/device_agents/cuda_backend_test; conformance=$b/tests/conformance_test
  plugin=$b/device_agents/farcall_example_cuda_plugin.so; memcpy_bin=$b/bench/cuda_memcpy
  zeroing=$b/tests/result_zeroing_test; half_plugin=$b/tests/farcall_half_cuda_plugin.so
fi

declare -a rows
row() { rows+=("$(printf '%-44s %-8s %s' "$1" "$2" "$3")"); }
failed=0

echo "== cuda devices"
if ! devices=$(timeout 60 "$agent" --platform=cuda --list_devices 2>&1); then
  echo "$devices"
  echo "no usable NVIDIA GPU: nothing to check here." >&2
  exit 2
fi
echo "$devices"
row "devices" "ok" "$(echo "$devices" | head -1)"

gtest_summary() {  # the "[  PASSED  ] N tests" and skipped/failed counts of a log
  local passed skipped fails
  passed=$(grep -oE '\[  PASSED  \] [0-9]+' "$1" | grep -oE '[0-9]+$' || echo 0)
  skipped=$(grep -oE '\[  SKIPPED \] [0-9]+ test' "$1" | grep -oE '[0-9]+' || echo 0)
  fails=$(grep -oE '[0-9]+ FAILED TEST' "$1" | grep -oE '^[0-9]+' || echo 0)
  echo "passed ${passed:-0}, skipped ${skipped:-0}, failed ${fails:-0}"
}

echo "== 1. cuda unit tests (graph replay included)"
log=$(mktemp)
if timeout 120 "$unit" 2>&1 | tee "$log"; then status=ok; else status=FAILED; failed=1; fi
row "cuda unit tests" "$status" "$(gtest_summary "$log")"
if grep -q "HostCodeRunsOncePerSignatureAndReplaysWithNewData" "$log" &&
   grep -q "\[       OK \] GraphCacheTest.HostCodeRunsOncePerSignature" "$log"; then
  row "graph replay: host code once per signature" "ok" "5 calls, 1 capture; new shape or attr recaptures"
else
  row "graph replay: host code once per signature" "FAILED" "see the unit test log above"; failed=1
fi

if grep -q "\[       OK \] GraphCacheTest.TheLeastRecentlyUsedGraphIsDropped" "$log"; then
  row "graph cache: LRU within --graph_cache_bytes" "ok" "the least recently used graph goes first"
else
  row "graph cache: LRU within --graph_cache_bytes" "FAILED" "see the unit test log above"; failed=1
fi

# The conformance suite against cuda agents with extra agent flags ($2),
# as row $1.
conformance_run() {
  if FARCALL_TEST_PLATFORM=cuda FARCALL_TEST_PLUGIN="$plugin" FARCALL_AGENT_BIN="$agent" \
     FARCALL_ROUTER_BIN="$router" FARCALL_CLI_BIN="$cli" FARCALL_TEST_AGENT_FLAGS="$2" \
     timeout 240 "$conformance" 2>&1 | tee "$log" |
     grep -E -A4 '^\[ +(FAILED|SKIPPED) +\]|Failure' ; then :; fi
  if grep -q '\[  PASSED  \]' "$log" && ! grep -q 'FAILED TEST' "$log"; then status=ok; else status=FAILED; failed=1; fi
  row "$1" "$status" "$(gtest_summary "$log")"
}
echo "== 2. conformance suite against a cuda agent"
conformance_run "conformance (agent, router; Call, Execute)" ""
echo "== 2a. again, with two 1 MiB staging blocks per device"
conformance_run "conformance, staging pool of 2 blocks" \
  "--staging_bytes=2097152 --staging_block_bytes=1048576"

echo "== 2b. unwritten results are zero in device memory"
if FARCALL_TEST_PLATFORM=cuda FARCALL_TEST_PLUGIN="$half_plugin" FARCALL_AGENT_BIN="$agent" \
   timeout 120 "$zeroing" 2>&1 | tee "$log" | tail -3; then status=ok; else status=FAILED; failed=1; fi
grep -q '\[  PASSED  \] 1 test' "$log" || { status=FAILED; failed=1; }
row "result zeroing on device memory" "$status" "$(gtest_summary "$log")"

echo "== 3. throughput: through the agent vs cudaMemcpy (pinned), 256 MiB"
bytes=$((256 << 20))
base=$(timeout 60 "$memcpy_bin" --bytes=$bytes --runs=5 2>&1 | tail -1)
echo "cudaMemcpy: $base"
fifo=$(mktemp -u); mkfifo "$fifo"
"$agent" --platform=cuda --listen=127.0.0.1:0 --ucx_transports=tcp --ready_fd=3 3>"$fifo" \
  >/dev/null 2>&1 &
agent_pid=$!
read -r port _ <"$fifo"; rm -f "$fifo"
bench() {  # handler, extra flags: the median of 3 runs' GB/s (payload bytes one way per second)
  local target_port=${bench_port:-$port} platform=${bench_platform:-cuda}
  for _ in 1 2 3; do
    UCX_TLS=tcp timeout 120 "$cli" bench --target=127.0.0.1:$target_port --platform=$platform \
      --bytes=$bytes \
      --calls=8 --warmup=2 --json "$@" 2>/dev/null | tail -1 |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["gbps"])' 2>/dev/null || echo 0
  done | sort -g | sed -n 2p
}
up=$(bench --handler=sum --transport=grpc)            # the bytes go up; a 1-byte result back
round=$(bench --handler=copy --alias --transport=grpc) # up and back down, updated in place
# The same round trip through same-host shared memory: the agent copies
# between the client's region and device memory (target: 0.8x cudaMemcpy).
round_shm=$(bench --handler=copy --alias --transport=shm)
# And over UCX (TCP on loopback): the pieces land in host memory, then go to
# the device (target: 0.8x the cpu agent's UCX figure, measured below).
round_ucx=$(bench --handler=copy --alias --transport=ucx)

echo "== 4. a 64-byte call: cuda agent next to a cpu agent, p50 of 2000 calls, 3 runs each"
fifo=$(mktemp -u); mkfifo "$fifo"
"$agent" --platform=cpu --listen=127.0.0.1:0 --shm_socket= --ucx_transports=tcp --ready_fd=3 \
  3>"$fifo" >/dev/null 2>&1 &
cpu_pid=$!
read -r cpu_port _ <"$fifo"; rm -f "$fifo"
round_ucx_cpu=$(bench_port=$cpu_port bench_platform=cpu bench --handler=copy --alias --transport=ucx)
small() {  # port, platform: the p50s of 3 runs, in us
  for _ in 1 2 3; do
    timeout 60 "$cli" bench --target=127.0.0.1:$1 --platform=$2 --bytes=64 --calls=2000 \
      --warmup=200 --json 2>/dev/null | tail -1 |
      python3 -c 'import json,sys; print("%.0f" % json.load(sys.stdin)["p50_us"])' 2>/dev/null || echo 0
  done | tr '\n' ' '
}
small_cuda=$(small "$port" cuda)
small_cpu=$(small "$cpu_port" cpu)
row "64 B copy, p50 us (3 runs)" "ok" "cuda: ${small_cuda}; cpu: ${small_cpu}"
kill "$agent_pid" "$cpu_pid" 2>/dev/null; wait "$agent_pid" "$cpu_pid" 2>/dev/null
summary=$(python3 - "$base" "$up" "$round" "$round_shm" <<'PY'
import json, sys
base = json.loads(sys.argv[1]); up = float(sys.argv[2]); rt = float(sys.argv[3])
shm = float(sys.argv[4])
h2d, d2h = base["h2d_gbps"], base["d2h_gbps"]
# A round trip moves the bytes twice; cudaMemcpy would take 1/h2d + 1/d2h.
memcpy_rt = 1 / (1 / h2d + 1 / d2h)
print(f"h2d {h2d:.2f} GB/s, d2h {d2h:.2f} GB/s|"
      f"{up:.2f} GB/s = {up / h2d:.3f}x cudaMemcpy h2d|"
      f"{rt:.2f} GB/s = {rt / memcpy_rt:.3f}x cudaMemcpy h2d+d2h|"
      f"{shm:.2f} GB/s = {shm / memcpy_rt:.3f}x cudaMemcpy h2d+d2h (target 0.8x)")
PY
)
IFS='|' read -r s_base s_up s_rt s_shm <<<"$summary"
row "cudaMemcpy, pinned (baseline, same run)" "ok" "$s_base"
row "agent upload (sum, 256 MiB)" "$([ "$up" != 0 ] && echo ok || echo FAILED)" "$s_up"
row "agent round trip (aliased copy, 256 MiB)" "$([ "$round" != 0 ] && echo ok || echo FAILED)" "$s_rt"
row "same round trip, shared memory" "$([ "$round_shm" != 0 ] && echo ok || echo FAILED)" "$s_shm"
ucx_ratio=$(python3 -c "import sys; c=float(sys.argv[2]); print('%.2f GB/s = %.3fx the cpu agent over UCX (%.2f GB/s; target 0.8x)' % (float(sys.argv[1]), float(sys.argv[1]) / c if c else 0, c))" "$round_ucx" "$round_ucx_cpu")
row "same round trip, UCX over TCP" "$([ "$round_ucx" != 0 ] && echo ok || echo FAILED)" "$ucx_ratio"
[ "$up" != 0 ] && [ "$round" != 0 ] && [ "$round_shm" != 0 ] && [ "$round_ucx" != 0 ] || failed=1
rm -f "$log"

echo
echo "== summary"
printf '%-44s %-8s %s\n' "check" "result" "figures"
for r in "${rows[@]}"; do echo "$r"; done
exit $failed
