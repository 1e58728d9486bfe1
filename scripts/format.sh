#!/usr/bin/env bash
# The tree's C++ and CUDA sources in the style of .clang-format (LLVM at 120 columns).
# Usage: scripts/format.sh           reformat every tracked source in place
#        scripts/format.sh --check   change nothing; list what is not formatted and exit 1 (CI)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "format: clang-format is not installed (scripts/setup.sh)" >&2; exit 1; }
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh')
if [[ ${1:-} == --check ]]; then
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
  if ! clang-format --dry-run -Werror "${files[@]}" 2> "$log"; then
    grep -E "^[^ ]+:[0-9]+:[0-9]+: error" "$log" | cut -d: -f1 | sort -u | sed 's/^/format: not formatted: /' >&2
    echo "format: run scripts/format.sh ($(clang-format --version | head -1))" >&2
    exit 1
  fi
  echo "format: ${#files[@]} files formatted" >&2
else
  clang-format -i "${files[@]}"
fi
