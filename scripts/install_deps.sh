#!/usr/bin/env bash
# Installs what farcall needs on Debian 12: the C++ toolchain, libraries and
# the rocm and oneapi toolchains from Debian's packages, and .venv (Python
# 3.11) with numpy, ml_dtypes, jax and jaxlib for the CPU, pytest and the
# Python build tools from PyPI. Safe to run again: it installs only what is
# missing. scripts/build.sh then installs the farcall package into .venv.
set -euo pipefail
cd "$(dirname "$0")/.."

DEBS=(
  build-essential cmake ninja-build ccache pkg-config git curl
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler openssl
  libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev prometheus-cpp-dev
  libspdlog-dev
  # UCX, for the data plane's building block (core/ucx) and ucx_perftest.
  libucx-dev ucx-utils
  python3 python3-dev python3-venv
  # Device backends: rocm (HIP 5.2 compiler and runtime) and oneapi (the
  # OpenCL loader and headers, with PoCL as a CPU device to run it on).
  hipcc libamdhip64-dev ocl-icd-opencl-dev opencl-headers pocl-opencl-icd clinfo
  # The libFuzzer targets (tests/fuzz) and tests/tsan: clang and its
  # runtimes; clang-format for the layout check (scripts/check_format.sh).
  clang libclang-rt-14-dev clang-format-14
  # Deployment (deploy/, tests/deploy): podman and what it needs to build and
  # run the images with no registry (a base image made by mmdebstrap; runc,
  # since crun 1.8 refuses hybrid cgroups); the Prometheus server with
  # promtool (without recommends it brings only its web console's JavaScript
  # libraries); headless Chromium for the router's status page. Names on
  # podman's (CNI) networks need the dnsname plugin, and pods catatonit.
  podman buildah skopeo fuse-overlayfs uidmap slirp4netns mmdebstrap runc
  golang-github-containernetworking-plugin-dnsname catatonit
  prometheus chromium chromium-driver
  # The multi-host test bed (tests/hosts): network namespaces, a bridge,
  # tbf and iptables inside the namespaces.
  iproute2 iptables
  # A test server that does not stop at SIGTERM has its threads' stacks
  # printed before it is killed (tests/ready_process.py).
  gdb
)

missing=()
for p in "${DEBS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install_deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The cuda backend needs the CUDA toolkit, which Debian does not package at
# the version farcall targets: it is expected at /usr/local/cuda (or
# CUDAToolkit_ROOT). Without it the cuda backend is simply not built.
if [ ! -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null 2>&1; then
  echo "install_deps: no CUDA toolkit found (/usr/local/cuda/bin/nvcc); the cuda backend will not be built"
fi

# Python: the client package, the JAX drop-in and their tests.
if [ ! -x .venv/bin/python ]; then
  echo "install_deps: creating .venv"
  python3 -m venv .venv
fi
# Pinned versions: a second run finds them there and downloads nothing.
echo "install_deps: Python packages in .venv (python/requirements-dev.txt)"
.venv/bin/python -m pip install -q --disable-pip-version-check -r python/requirements-dev.txt
# podman-compose for deploy/compose.yaml (tests/deploy/test_compose.py):
# Debian 12's (1.0.3), like every one before 1.5, runs a healthcheck's CMD
# through /bin/sh, which farcall's images do not have.
.venv/bin/python -m pip install -q --disable-pip-version-check podman-compose==1.6.0
