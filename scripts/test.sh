#!/usr/bin/env bash
# The README's test command: set up, build (warnings as errors) and run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/check-algorithm-names.sh  # one place names the algorithms: their table
scripts/check-string-compares.sh  # values told apart by type: error kinds, tables of spellings
scripts/check-architecture.sh  # docs/ARCHITECTURE.md names only files and symbols that exist
scripts/build.sh -DCHARM_WERROR=ON
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 600
