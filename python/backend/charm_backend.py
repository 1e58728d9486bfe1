"""The package's PEP 517 build backend: `pip install .` with nothing to fetch.

setuptools before 70.1 needs the separate `wheel` package to write a wheel, and a fresh virtual environment
has neither it nor network to fetch it. This backend needs only the standard library: it builds charm._core
with the project's CMake (only that target: no tests, benchmarks, executors, MPI or CUDA) and writes the wheel
itself (a zip of the package, its metadata and RECORD, PEP 427).

Where the checkout's own build (`build/`, or $CHARM_BUILD_DIR) already holds an extension for this
interpreter (the same EXT_SUFFIX), that one is packaged instead of building again; CMAKE_ARGS in the
environment adds configure arguments to a fresh build.
"""

import base64
import hashlib
import io
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _project():
    """name, version, summary and requires-python from pyproject.toml's [project] table (plain key = "value")."""
    text = (ROOT / "pyproject.toml").read_text()
    table = text.split("[project]", 1)[1].split("\n[", 1)[0]
    fields = dict(re.findall(r'^([A-Za-z-]+)\s*=\s*"([^"]*)"', table, re.M))
    return fields["name"], fields["version"], fields.get("description", ""), fields.get("requires-python", "")


def _tag():
    """The wheel tag of this interpreter: cp311-cp311-linux_x86_64."""
    py = f"cp{sys.version_info.major}{sys.version_info.minor}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{py}-{py}-{platform}"


def _built_extension():
    """An extension for this interpreter in the checkout's build, or None."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    build = pathlib.Path(os.environ.get("CHARM_BUILD_DIR", ROOT / "build"))
    found = build / "python" / "charm" / f"_core{suffix}"
    return found if found.is_file() else None


def _build_extension(into):
    """Builds charm._core with CMake into the folder `into`; returns the file."""
    configure = ["cmake", "-S", str(ROOT), "-B", str(into), "-DCMAKE_BUILD_TYPE=Release", "-DCHARM_BUILD_TESTS=OFF",
                 "-DCHARM_BUILD_BENCH=OFF", "-DCHARM_BUILD_RUNTIME=OFF", "-DCHARM_WITH_MPI=OFF",
                 "-DCHARM_WITH_CUDA=OFF", "-DCHARM_PYTHON=ON", f"-DPython3_EXECUTABLE={sys.executable}"]
    configure += shlex.split(os.environ.get("CMAKE_ARGS", ""))
    if shutil.which("ninja"):
        configure += ["-G", "Ninja"]
    subprocess.check_call(configure)
    subprocess.check_call(["cmake", "--build", str(into), "--target", "charm_python", "-j", str(os.cpu_count() or 1)])
    built = sorted((into / "python" / "charm").glob("_core*.so"))
    if not built:
        raise RuntimeError("charm: the CMake build made no charm/_core*.so (is pybind11-dev installed?)")
    return built[0]


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _metadata(name, version, summary, requires):
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", f"Summary: {summary}"]
    if requires:
        lines.append(f"Requires-Python: {requires}")
    return ("\n".join(lines) + "\n").encode()


def _write_wheel(path, files, dist_info, meta, tag):
    record = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for arcname, data in files + [
            (f"{dist_info}/METADATA", meta),
            (f"{dist_info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: charm_backend\nRoot-Is-Purelib: false\n"
                                   f"Tag: {tag}\n".encode()),
        ]:
            z.writestr(arcname, data)
            record.append(_record_line(arcname, data))
        record.append(f"{dist_info}/RECORD,,")
        z.writestr(f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode())


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    """The dist-info without building anything (pip asks for it before the wheel)."""
    name, version, summary, requires = _project()
    dist_info = f"{name.replace('-', '_')}-{version}.dist-info"
    path = pathlib.Path(metadata_directory) / dist_info
    path.mkdir(parents=True, exist_ok=True)
    (path / "METADATA").write_bytes(_metadata(name, version, summary, requires))
    (path / "WHEEL").write_text(f"Wheel-Version: 1.0\nGenerator: charm_backend\nRoot-Is-Purelib: false\nTag: {_tag()}\n")
    return dist_info


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name, version, summary, requires = _project()
    dist = name.replace("-", "_")
    tag = _tag()
    files = [(f"charm/{p.name}", p.read_bytes()) for p in sorted((ROOT / "charm").glob("*.py"))]
    ext = _built_extension()
    with tempfile.TemporaryDirectory() as tmp:
        if ext is None:
            ext = _build_extension(pathlib.Path(tmp) / "cmake")
        else:
            print(f"charm: packaging the checkout's build of the extension: {ext}", file=sys.stderr)
        files.append((f"charm/{ext.name}", ext.read_bytes()))
    wheel = f"{dist}-{version}-{tag}.whl"
    _write_wheel(os.path.join(wheel_directory, wheel), files, f"{dist}-{version}.dist-info",
                 _metadata(name, version, summary, requires), tag)
    return wheel


def build_sdist(sdist_directory, config_settings=None):
    """The tracked sources (git ls-files; without git, the tree less build outputs) as name-version.tar.gz."""
    name, version, _, _ = _project()
    base = f"{name.replace('-', '_')}-{version}"
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
        paths = [p for p in listed.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        paths = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*")
                 if p.is_file() and not p.relative_to(ROOT).parts[0].startswith(("build", "."))]
    out = os.path.join(sdist_directory, base + ".tar.gz")
    with tarfile.open(out, "w:gz") as tar:
        for p in paths:
            tar.add(ROOT / p, arcname=f"{base}/{p}", recursive=False)
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        meta = _metadata(*_project())
        info.size = len(meta)
        tar.addfile(info, io.BytesIO(meta))
    return os.path.basename(out)
