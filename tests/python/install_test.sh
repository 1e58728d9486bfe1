#!/usr/bin/env bash
# The README's install of the Python module, in a fresh virtual environment with no network: pip may not reach an
# index (--no-index), so the build backend must need nothing beyond the standard library. The checkout's build
# (CHARM_BUILD_DIR) already holds the extension for this interpreter: the backend packages it (a build of its own
# would take the library's whole compile). Then charm imports from outside the checkout and answers a call.
# Usage: install_test.sh PYTHON SOURCE_DIR BUILD_DIR
set -euo pipefail
py=$1 src=$2 build=$3
if ! "$py" -c "import ensurepip, venv" 2>/dev/null; then
  echo "skipped: $py has no venv/ensurepip (Debian: python3-venv)"; exit 0
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$py" -m venv "$tmp/venv"
cd "$src"
CHARM_BUILD_DIR=$build PIP_NO_INDEX=1 PIP_FIND_LINKS= "$tmp/venv/bin/python" -m pip install --no-index -q --disable-pip-version-check .
cd "$tmp"
"$tmp/venv/bin/python" - "$src" <<'PY'
import sys, charm
assert charm.__file__.startswith(sys.prefix), charm.__file__  # the venv's copy, not the checkout's
rows = charm.compare(topology=sys.argv[1] + "/topologies/h100-2x8.json", seq=8192, algos="ring", pass_="fwd")
assert rows and rows[0]["time_ms"] > 0, rows
print("installed and imported:", charm.__file__)
PY
