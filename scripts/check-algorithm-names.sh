#!/usr/bin/env bash
# The algorithm table (scheduler/planners/algorithms.cpp) is the one place an algorithm's name is written in the
# code: everywhere else asks it (a column such as closed_form or colour, find_algorithm, baseline_algorithm,
# default_algorithm). Lists every other string literal that is an algorithm's name in the sources (tests and
# benchmarks, which choose their cases by name, aside) and fails if there is one. A line that spells the tool's name or an op kind says "not the algorithm".
set -euo pipefail
cd "$(dirname "$0")/.."
names=$(grep -oE '\bname = "[^"]+"' scheduler/planners/algorithms.cpp | cut -d'"' -f2 | sort -u)
[[ -n $names ]] || { echo "check-algorithm-names: no names found in the algorithm table" >&2; exit 2; }
pattern='"('$(printf '%s\n' $names | sed 's/[+]/\\+/g' | paste -sd'|')')"'
hits=$(git ls-files 'scheduler/*' 'sim/*' 'tools/*' 'calibrate/*' 'runtime/*' 'topologies/*' 'python/*' |
  grep -E '\.(cpp|hpp|cu|cuh|h|in)$' | grep -v '^scheduler/planners/algorithms\.cpp$' |
  xargs grep -nE "$pattern" | grep -v 'not the algorithm' || true)
if [[ -n $hits ]]; then
  echo "check-algorithm-names: algorithm names outside the algorithm table (ask the table instead):" >&2
  echo "$hits" >&2
  exit 1
fi
echo "check-algorithm-names: no algorithm name outside the table ($(echo $names | wc -w) names)"
