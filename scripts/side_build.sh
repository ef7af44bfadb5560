# Sourced by the scripts that configure a build of their own beside build/
# (run_sanitizers.sh, check_without_ucx.sh): the job count, and ccache as the
# compiler launcher when it is installed.
jobs=$(nproc 2>/dev/null || echo 2)
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
