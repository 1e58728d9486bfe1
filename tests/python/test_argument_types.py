"""Every keyword of every function, given a value of each kind (int, float, str, None, list, dict, an int past 64
bits), must raise a Python exception or return: never crash the interpreter. The other arguments are a small valid
call, so that a probe that is accepted runs in a moment.

The probes of one function run in one child interpreter, which says each probe before it tries it; a child that
dies names the probe that killed it, and a new child goes on after it, so one crash hides no other."""

import os
import re
import subprocess
import sys

import charm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
H100 = os.path.join(ROOT, "topologies", "h100-2x8.json")
KINDS = ["7", "2.5", "'x'", "None", "[1]", "{'a': 1}", "2**70"]
SMALL = dict(seq=1024, heads=2, head_dim=16)
UNIFORM = dict(uniform=True, ranks=2, bw_gbps=100, tflops=100)
BASE = {
    "plan": dict(algo="ring", ranks=2, **SMALL),
    "validate": dict(plan="PLAN"),
    "simulate": dict(algo="ring", **UNIFORM, **SMALL),
    "compare": dict(algos=["ring"], **UNIFORM, **SMALL),
    "advise": dict(algos=["ring"], jobs=1, **UNIFORM, **SMALL),
    "sweep": dict(topology=H100, batch=1, algos="ring", jobs=1, seq=4096, heads=16, head_dim=16),
    "frameworks": dict(algo="ring", ranks=8),
    "algorithms": dict(),
}

CHILD = r"""
import sys
import charm
PLAN = charm.plan(algo="ring", ranks=2, seq=1024, heads=2, head_dim=16)
fn = getattr(charm, sys.argv[1])
for i, line in enumerate(sys.argv[3:], int(sys.argv[2])):
    print("probe", i, flush=True)
    base, key, value = eval(line)
    args = {k: (PLAN if v == "PLAN" else v) for k, v in base.items()}
    args[key] = value
    try:
        fn(**args)
    except Exception:
        pass
print("done", flush=True)
"""


def keywords(fn):
    """The keywords in a pybind11 function's signature line: `name(*, a: object = None, ...) -> object`."""
    first = fn.__doc__.splitlines()[0]
    return re.findall(r"(\w+):", first[first.index("(") : first.rindex(")")])


def test_every_keyword_of_every_function_is_named():
    assert sorted(BASE) == sorted(charm.__all__)
    assert "seq" in keywords(charm.simulate) and "set" in keywords(charm.sweep)


def test_no_argument_crashes_the_interpreter(tmp_path):
    # In a folder of its own: a str probe of out= or trace= writes a file 'x'.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(charm.__file__)),
                                                       os.environ.get("PYTHONPATH", "")]))
    crashes = []
    for name, base in BASE.items():
        probes = [repr((base, key, None)).replace("None)", kind + ")") for key in keywords(getattr(charm, name))
                  for kind in KINDS]
        start = 0
        while start < len(probes):
            p = subprocess.run([sys.executable, "-c", CHILD, name, str(start), *probes[start:]], capture_output=True,
                               text=True, cwd=tmp_path, env=env, timeout=300)
            said = [int(w.split()[1]) for w in p.stdout.splitlines() if w.startswith("probe ")]
            if p.returncode == 0 and p.stdout.rstrip().endswith("done"):
                break
            last = said[-1] if said else start
            crashes.append(f"charm.{name}: {probes[last]} ended the interpreter ({p.returncode}): {p.stderr[-300:]}")
            start = last + 1
    assert not crashes, "\n".join(crashes)
