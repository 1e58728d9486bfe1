"""Builds charm._core with the project's CMake (pyproject.toml holds the metadata).

Only the extension's target is built, without tests, benchmarks, executors, MPI or CUDA. The build folder is
setuptools' temporary one; CMAKE_ARGS in the environment adds configure arguments.
"""

import os
import pathlib
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        src = pathlib.Path(__file__).parent.resolve()
        build = pathlib.Path(self.build_temp).resolve() / "cmake"
        configure = ["cmake", "-S", str(src), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                     "-DCHARM_BUILD_TESTS=OFF", "-DCHARM_BUILD_BENCH=OFF", "-DCHARM_BUILD_RUNTIME=OFF",
                     "-DCHARM_WITH_MPI=OFF", "-DCHARM_WITH_CUDA=OFF", "-DCHARM_PYTHON=ON",
                     f"-DPython3_EXECUTABLE={sys.executable}"]
        configure += shlex.split(os.environ.get("CMAKE_ARGS", ""))  # e.g. -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        subprocess.check_call(configure)
        subprocess.check_call(["cmake", "--build", str(build), "--target", "charm_python", "-j",
                               str(os.cpu_count() or 1)])
        built = sorted((build / "python" / "charm").glob("_core*.so"))
        if not built:
            raise RuntimeError("charm: the CMake build made no charm/_core*.so (is pybind11-dev installed?)")
        target = pathlib.Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built[0], target)


setup(ext_modules=[CMakeExtension("charm._core")], cmdclass={"build_ext": CMakeBuild})
