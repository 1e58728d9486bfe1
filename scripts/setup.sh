#!/usr/bin/env bash
# Installs the build and test dependencies from Debian's packages (idempotent).
# The CUDA toolkit, when present under /usr/local/cuda, is picked up by CMake as it is.
set -euo pipefail
pkgs=(build-essential cmake ninja-build git pkg-config
      libboost-graph-dev nlohmann-json3-dev libfmt-dev libcli11-dev
      libgtest-dev libgmock-dev libbenchmark-dev libnlopt-cxx-dev
      openmpi-bin libopenmpi-dev gnuplot-nox clang clang-format libclang-rt-14-dev
      pybind11-dev python3-dev python3-pytest python3-venv universal-ctags libprotobuf-dev protobuf-compiler)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup: installing ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
