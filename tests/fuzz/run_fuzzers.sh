#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan and UBSan) in build-fuzz/ and
# runs each for FARCALL_FUZZ_SECONDS (default 60) from its seed corpus in
# tests/fuzz/corpus/NAME/. Exits non-zero on a crash, a leak or a broken
# promise (each target aborts when one is broken); the input that did it is
# left in build-fuzz/findings/.
# Usage: tests/fuzz/run_fuzzers.sh [TARGET ...]   (default: all)
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${FARCALL_FUZZ_SECONDS:-60}
targets=("$@")
((${#targets[@]})) || targets=(frame_decoder_fuzz header_limits_fuzz chunk_assembler_fuzz npy_fuzz shm_protocol_fuzz
  capability_fuzz)
mkdir -p build-fuzz
# Only what the targets need: no device backends, no Python, no tests.
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DFARCALL_FUZZ=ON -DFARCALL_BUILD_TESTS=OFF -DFARCALL_PYTHON=OFF \
  "-DFARCALL_DISABLE_BACKENDS=cuda;rocm;oneapi" \
  "-DCMAKE_CXX_FLAGS=-fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=undefined" \
  "-DCMAKE_C_FLAGS=-fsanitize=address,undefined,fuzzer-no-link" \
  >build-fuzz/configure.log || { cat build-fuzz/configure.log >&2; exit 1; }
cmake --build build-fuzz -j "$(nproc 2>/dev/null || echo 2)" --target "${targets[@]}"
mkdir -p build-fuzz/findings
failed=0
for t in "${targets[@]}"; do
  corpus=build-fuzz/corpus/$t
  mkdir -p "$corpus"
  cp -n tests/fuzz/corpus/$t/* "$corpus"/ 2>/dev/null || true
  echo "== $t: ${seconds}s"
  if ! ASAN_OPTIONS=detect_leaks=1 build-fuzz/tests/fuzz/$t "$corpus" \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix=build-fuzz/findings/$t- >build-fuzz/$t.log 2>&1; then
    echo "FAILED: $t (see build-fuzz/$t.log and build-fuzz/findings/)"
    tail -40 build-fuzz/$t.log
    failed=$((failed + 1))
  else
    grep -E "stat::number_of_executed_runs|cov:" build-fuzz/$t.log | tail -2 || true
  fi
done
echo "fuzzing: $(( ${#targets[@]} - failed )) passed, $failed failed"
exit $(( failed > 0 ))
