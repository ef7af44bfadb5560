#!/usr/bin/env bash
# Builds the cuda pieces here and packs them, with the shared libraries they
# need beyond glibc and the NVIDIA driver, into DIR (default .gpu-bundle/),
# for tests/gpu/run_device_checks.sh --bundle DIR on a machine without build
# tools. Prints the bundle's size.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-.gpu-bundle}
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DFARCALL_BUILD_TESTS=ON \
  -DFARCALL_DISABLE_BACKENDS="rocm;oneapi" -DFARCALL_REQUIRE_BACKENDS=cuda >/dev/null
cmake --build build-gpu -j "$(nproc)" --target farcall-agent farcall-router farcall \
  cuda_backend_test conformance_test farcall_example_cuda_plugin cuda_memcpy \
  result_zeroing_test farcall_half_cuda_plugin
rm -rf "$out"; mkdir -p "$out/bin" "$out/lib"
for f in device_agents/farcall-agent server/farcall-router client/farcall \
         device_agents/cuda_backend_test tests/conformance_test \
         device_agents/farcall_example_cuda_plugin.so bench/cuda_memcpy \
         tests/result_zeroing_test tests/farcall_half_cuda_plugin.so; do
  cp "build-gpu/$f" "$out/bin/"
  strip --strip-unneeded "$out/bin/$(basename "$f")" 2>/dev/null || true
done
# Libraries from this machine's packages, except the C runtime and the
# driver, which the target has (newer glibc and libstdc++ run these).
for f in "$out"/bin/*; do ldd "$f" 2>/dev/null; done | awk '/=> \//{print $3}' | sort -u |
  grep -vE '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libstdc\+\+|libgcc_s|libcuda)\.so' |
  while read -r lib; do cp -L "$lib" "$out/lib/"; done
du -sh "$out"
