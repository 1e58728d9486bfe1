"""CHARM+ from Python: plan, validate, simulate, compare, advise and sweep.

The functions are the `charm` command's, called in-process on the same C++
objects (the extension charm._core); keyword arguments are named like the
command's flags (``--head-dim`` is ``head_dim``, ``--pass`` is ``pass_``) and
take the same values (``seq=26880`` or ``seq="26k"``). Results are plain dicts
and lists: ``compare`` and ``sweep`` return one dict per row, every row with the
same keys, so ``pandas.DataFrame(charm.sweep(...))`` works as it is. A bad input
raises ValueError with the line the command prints after ``charm: error:``.

    >>> import charm
    >>> rows = charm.compare(topology="topologies/h100-2x8.json", seq=26880, batch=16, heads=12, head_dim=192)
"""

import glob as _glob
import os as _os
import sys as _sys


def _find_extension():
    """Where charm._core lives: next to this file (a pip install or the build tree's copy), on sys.path
    (PYTHONPATH=build/python), or in the build tree of the checkout this file is in (the repository root)."""
    here = _os.path.dirname(_os.path.abspath(__file__))
    if _glob.glob(_os.path.join(here, "_core*.so")):
        return None
    candidates = [_os.path.join(p or _os.curdir, "charm") for p in _sys.path]
    build = _os.environ.get("CHARM_BUILD_DIR", _os.path.join(_os.path.dirname(here), "build"))
    candidates.append(_os.path.join(build, "python", "charm"))
    for c in candidates:
        if _os.path.abspath(c) != here and _glob.glob(_os.path.join(c, "_core*.so")):
            return _os.path.abspath(c)
    raise ImportError(
        "charm: the extension charm._core is not built; run scripts/build.sh (needs pybind11-dev and "
        "python3-dev: scripts/setup.sh), or set CHARM_BUILD_DIR to the build folder"
    )


_extra = _find_extension()
if _extra is not None:
    __path__.append(_extra)  # noqa: F821 (a package's own __path__)

from ._core import (  # noqa: E402
    __version__,
    advise,
    algorithms,
    compare,
    frameworks,
    plan,
    simulate,
    sweep,
    validate,
)

__all__ = ["advise", "algorithms", "compare", "frameworks", "plan", "simulate", "sweep", "validate"]
