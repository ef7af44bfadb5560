#!/usr/bin/env bash
# farcall's concurrency building blocks under ThreadSanitizer (the project
# in tests/tsan/, built in build-tsan/, whose CMakeLists.txt lists them):
# the byte budget and BudgetWait, the worker pool, a call's serial steps, the
# idle watchdog, the staging and device-memory pools, the drain gate, the
# fault-injecting device, stopping calls, the FFI handler's waiting threads,
# the client's polling turns and its timer threads (RunAfter), with their unit tests (each has cases that
# run many threads at once). Any report fails the run.
#
# TSan must see every lock, and Debian's Abseil is not instrumented, so
# Abseil is built here from the upstream source of the release Debian
# packages (20220623.1, fetched once from Debian's archive into
# ~/.cache/farcall and checked against Debian's SHA-256). The code that uses
# gRPC or protobuf (the reactors, the router, the client) stays out: those
# libraries are not instrumented either; ASan and UBSan cover it
# (scripts/run_sanitizers.sh).
# Built with clang, whose TSan runtime comes with the fuzzers' packages.
# ctest runs this as tsan_test (label sanitize).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
version=20220623.1
sha256=abfe2897f3a30edaa74bc34365afe3c2a3cd012091a97dc7e008f7016adcd5fe
cache=${XDG_CACHE_HOME:-$HOME/.cache}/farcall
tarball=$cache/abseil_$version.orig.tar.gz
mkdir -p "$cache" build-tsan
if ! echo "$sha256  $tarball" | sha256sum -c --status 2>/dev/null; then
  echo "== tsan: fetching Abseil $version's source from Debian's archive"
  curl -fsSL --retry 3 -o "$tarball.part" \
    "http://deb.debian.org/debian/pool/main/a/abseil/abseil_$version.orig.tar.gz"
  echo "$sha256  $tarball.part" | sha256sum -c --status ||
    { echo "tsan: the Abseil tarball does not match its SHA-256" >&2; rm -f "$tarball.part"; exit 1; }
  mv "$tarball.part" "$tarball"
fi
src=build-tsan/abseil-$version
[ -d "$src" ] || tar -xzf "$tarball" -C build-tsan
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
flags="-O1 -g1 -fsanitize=thread -fno-omit-frame-pointer"
echo "== tsan: configuring build-tsan"
cmake -S tests/tsan -B build-tsan/build -G Ninja -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_COMPILER=clang++ \
  "-DCMAKE_CXX_FLAGS=$flags" "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread" \
  "-DABSL_SOURCE_DIR=$PWD/$src" "${launcher[@]}" >build-tsan/build.log 2>&1 \
  || { cat build-tsan/build.log >&2; exit 1; }
echo "== tsan: building (Abseil too, the first time: a few minutes on 2 cores)"
cmake --build build-tsan/build -j "$jobs" >>build-tsan/build.log 2>&1 \
  || { tail -50 build-tsan/build.log >&2; exit 1; }
echo "== tsan: running the tests"
# The suppressions name false positives inside Abseil's mutex alone (see
# the file).
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan/suppressions.txt"
cd build-tsan/build
ctest -j "$jobs" --timeout 600 --output-on-failure
