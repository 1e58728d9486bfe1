#!/usr/bin/env bash
# Lists the functions longer than a limit (default 80 lines) in every C++ and CUDA
# source of the tree (scheduler, sim, runtime, topologies, calibrate, tools, python,
# bench, tests), longest first: "lines file:line name". Lambdas count toward the
# function that holds them. Needs Universal Ctags (apt-get install universal-ctags).
# Usage: scripts/function-lengths.sh [LIMIT] [DIR...]
set -euo pipefail
cd "$(dirname "$0")/.."
limit=${1:-80}
shift || true
dirs=("$@")
[ ${#dirs[@]} -gt 0 ] || dirs=(scheduler sim runtime topologies calibrate tools python bench tests)
if ! ctags --version 2>&1 | grep -q 'Universal Ctags'; then
  echo "function-lengths.sh: needs Universal Ctags (apt-get install universal-ctags)" >&2
  exit 2
fi
find "${dirs[@]}" -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' \) -print0 | sort -z |
  xargs -0 ctags -f - --language-force=C++ --kinds-C++=f --fields=+ne --extras=-q |
  awk -F'\t' -v limit="$limit" '
    $1 !~ /^__anon/ {
      line = 0; end = 0; scope = ""
      for (i = 4; i <= NF; ++i) {
        if ($i ~ /^line:/) line = substr($i, 6)
        else if ($i ~ /^end:/) end = substr($i, 5)
        else if ($i ~ /^(class|struct|namespace|function):/) { scope = $i; sub(/^[a-z]+:/, "", scope) }
      }
      n = end - line + 1
      if (end > 0 && n > limit) {
        gsub(/(::)?__anon[0-9a-f]+/, "", scope)
        sub(/^charm::/, "", scope)
        printf "%5d %s:%d %s%s\n", n, $2, line, scope == "" ? "" : scope "::", $1
      }
    }' | sort -k1,1nr -k2,2
