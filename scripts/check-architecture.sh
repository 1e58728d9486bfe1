#!/usr/bin/env bash
# docs/ARCHITECTURE.md is a map: every file it names must exist, and every symbol it names must be defined or
# used somewhere in the sources. Reads each `quoted` token of the map:
#   - a path (a token with a known file extension, or a folder ending in /): some tracked file's path ends with it
#     ("a.hpp/.cpp" names a.hpp and a.cpp; "a.*" any file a.something; "*.json"-style patterns are skipped);
#   - a symbol (ns::name, Name, name(), Name<T>): its last identifier is a whole word of some tracked source.
# Flags (--x), commands with spaces and placeholders in capitals are not checked. Fails listing what is missing,
# and where support/, topologies/, tools/app/ or the Python module include a layer above their own.
set -euo pipefail
cd "$(dirname "$0")/.."
map=docs/ARCHITECTURE.md
files=$(git ls-files)
sources=$(git ls-files | grep -E '\.(cpp|hpp|cu|cuh|h|in|def|py|cmake|sh)$|CMakeLists\.txt$|^\.ci/run$')
missing=()
has_path() { grep -qE "(^|/)$(printf '%s' "$1" | sed 's/[.[\*^$+?(){}|]/\\&/g')$" <<<"$files"; }
has_prefix() { grep -qE "(^|/)$(printf '%s' "$1" | sed 's/[.[\*^$+?(){}|]/\\&/g')" <<<"$files"; }
checked=0
while IFS= read -r tok; do
  [[ -z $tok || $tok == -* || $tok == *' '* || $tok == *'*'* || ($tok == *'<'* && $tok == */*) || $tok == '<'* || $tok == build/* ]] &&
    continue
  if [[ $tok =~ \.(cpp|hpp|cu|cuh|h|md|json|cmake|sh|py|def|csv|txt|in|png|yml)$ || $tok =~ /\.[a-z]+$ || $tok =~ \.\*$ ||
        $tok =~ ^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*/$ ]]; then
    checked=$((checked + 1))
    if [[ $tok =~ ^(.*)\.([a-z]+)/\.([a-z]+)$ ]]; then          # a.hpp/.cpp
      for ext in "${BASH_REMATCH[2]}" "${BASH_REMATCH[3]}"; do has_path "${BASH_REMATCH[1]}.$ext" || missing+=("file $tok"); done
    elif [[ $tok =~ ^(.*)\.\*$ ]]; then                           # a.*
      has_prefix "${BASH_REMATCH[1]}." || missing+=("file $tok")
    elif [[ $tok == */ ]]; then                                   # a folder
      has_prefix "$tok" || missing+=("folder $tok")
    else
      has_path "$tok" || missing+=("file $tok")
    fi
  elif [[ $tok =~ ^[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_~][A-Za-z0-9_]*)*(<[A-Za-z, ]*>)?(\(\))?$ ]]; then
    name=${tok%%<*}; name=${name%()}; name=${name##*::}
    [[ $name =~ ^[A-Z0-9_]+$ && ${#name} -le 6 ]] && continue    # a placeholder (P, SHARDS) or a short constant
    checked=$((checked + 1))
    grep -qw -- "$name" $sources 2>/dev/null || missing+=("symbol $tok")
  fi
done < <(grep -oE '`[^`]+`' "$map" | tr -d '`' | sort -u)
# The layers the map draws hold: support/ includes nothing of the project above it, topologies/ (the hardware)
# nothing of scheduler/ (the planners), and tools/app/ (the application layer) nothing of the command line.
includes() { git grep -nE "^#include [<\"]($2)" -- "$1" || true; }
# The Python module and what it shares with the command (cli_support, run_one) include nothing of CLI11 or of the
# command's flags.
command_line='CLI/|tools/(cli_common|cli_workload|cli_numbers|cmd_|plan_flags|cluster_flags|main)'
crossings=$(includes 'support/*' 'scheduler/|topologies/|sim/|runtime/|calibrate/|tools/|python/'
            includes 'topologies/*' 'scheduler/|sim/|runtime/|calibrate/|tools/|python/'
            includes 'tools/app/*' "$command_line|tools/(cli_|run_one)"
            includes 'python/*' "$command_line"
            includes 'tools/cli_support.*' "$command_line"
            includes 'tools/cli_outputs.cpp' "$command_line"
            includes 'tools/cli_progress.cpp' "$command_line"
            includes 'tools/run_one.*' "$command_line")
if [[ -n $crossings ]]; then
  echo "check-architecture: an include runs against the layers:" >&2
  echo "$crossings" >&2
  exit 1
fi
if ((${#missing[@]})); then
  echo "check-architecture: $map names what the code does not have:" >&2
  printf '  %s\n' "${missing[@]}" | sort -u >&2
  exit 1
fi
echo "check-architecture: the $checked files and symbols $map names exist; support/, topologies/, tools/app/ and python/ include nothing above them"
