#!/usr/bin/env bash
# Checks that every tracked C++ source and header is as clang-format
# (.clang-format: Google style, 100 columns) would write it; lists the files
# that are not, and exits 1. ctest runs this as format_test (label lint).
#   bash scripts/check_format.sh          # check
#   bash scripts/check_format.sh --fix    # rewrite them in place
set -euo pipefail
cd "$(dirname "$0")/.."
cf=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$cf" ]; then
  echo "check_format: clang-format is not installed (scripts/install_deps.sh installs it)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files '*.cc' '*.h')
if [ "${1:-}" = "--fix" ]; then
  "$cf" -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$cf" --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  echo "check_format: ${#bad[@]} file(s) differ from clang-format's layout:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "run: bash scripts/check_format.sh --fix" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files formatted"
