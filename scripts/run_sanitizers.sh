#!/usr/bin/env bash
# The C++ under AddressSanitizer and UndefinedBehaviorSanitizer: builds
# build-asan/ (gcc; no device backends, Python or fuzzers; -O1 with line
# tables) and runs there every unit and integration test that needs neither
# a device nor Python (ctest labels python, deploy, fuzz and gpu left out; so
# are install, lint and build, which check builds and the sources, not the
# code: build's no_ucx_build_test makes a build of its own).
# Any report fails the run. ThreadSanitizer runs separately, on the code
# that needs no gRPC (scripts/run_tsan.sh): Debian's gRPC is not built with
# it, so its reports would be about gRPC.
# ctest runs this as sanitizer_test (label sanitize).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/side_build.sh
flags="-O1 -g1 -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
mkdir -p build-asan
echo "== sanitizers: configuring build-asan"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=None "-DCMAKE_CXX_FLAGS=$flags" \
  "-DCMAKE_C_FLAGS=$flags" -DFARCALL_BUILD_TESTS=ON -DFARCALL_PYTHON=OFF -DFARCALL_FUZZ=OFF \
  "-DFARCALL_DISABLE_BACKENDS=cuda;rocm;oneapi" "${launcher[@]}" >build-asan/build.log 2>&1 \
  || { cat build-asan/build.log >&2; exit 1; }
echo "== sanitizers: building (first time: several minutes on 2 cores)"
cmake --build build-asan -j "$jobs" >>build-asan/build.log 2>&1 || { tail -50 build-asan/build.log >&2; exit 1; }
echo "== sanitizers: running the tests"
# allocator_may_return_null: an allocation too large fails as it would
# without ASan (tests/fault asks for terabytes on purpose).
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# UCX's endpoints of a process's worker, which lives to the end (see there).
export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan_suppressions.txt"
cd build-asan
ctest -LE "python|deploy|fuzz|gpu|sanitize|install|lint|build" -j "$jobs" --timeout 900 --output-on-failure
