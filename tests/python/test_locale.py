"""Numbers are read the same whatever locale the host process set: under de_DE (a decimal comma) strtod read '1.5k'
as 1k. Run in a fresh interpreter, so that the locale of the other tests is left alone; skipped where de_DE is not
installed (localedef -i de_DE -f UTF-8 de_DE.UTF-8)."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROBE = r"""
import json, locale, sys
import charm
try:
    locale.setlocale(locale.LC_NUMERIC, "de_DE.UTF-8")
except locale.Error:
    sys.exit(77)
assert locale.localeconv()["decimal_point"] == ","
p = charm.plan(algo="ring", ranks=2, seq="1.5k", heads=2, head_dim=16)
rows = charm.sweep(topology="topologies/h100-2x8.json", batch=1, seq="1.5k", heads=8, head_dim=64, algos="ring",
                   set={"inter.bandwidth_gbps": "12.5,25"})
print(json.dumps({"seq": p["workload"]["seq"], "sweep_seq": sorted({r["seq"] for r in rows}),
                  "bandwidths": sorted({r["inter.bandwidth_gbps"] for r in rows})}))
"""


def test_sizes_and_set_values_ignore_a_decimal_comma():
    p = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=ROOT, timeout=120)
    if p.returncode == 77:
        pytest.skip("the de_DE.UTF-8 locale is not installed")
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got["seq"] == 1536 and got["sweep_seq"] == [1536]
    assert got["bandwidths"] == [12.5, 25]
