#!/usr/bin/env bash
# The MPI transport against MPICH as well as Open MPI: compiles runtime/mpi_*.cpp
# (and the cuda backend's MPI code, when CUDA and NCCL headers are there) with
# MPICH's compiler wrapper, syntax only. MPICH's handles are integers where Open
# MPI's are pointers, so a cast that holds for one may not compile for the other.
#   scripts/mpich-check.sh        # installs libmpich-dev when mpicxx.mpich is missing (root, apt)
# Exit 0 when every file compiles. Not in .ci/run (the install alone takes about a minute).
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
CXX=${MPICH_CXX:-mpicxx.mpich}
if [[ -z "$(command -v "$CXX" || true)" ]]; then
  echo "mpich-check: $CXX not found: installing libmpich-dev" >&2
  # Installing MPICH must not take mpirun / mpicxx away from Open MPI: keep the alternatives as they were.
  before=$(readlink -f "$(command -v mpirun || echo none)" || true)
  apt-get install -y -q libmpich-dev >&2
  if [[ -n "$before" && "$before" != none && "$(readlink -f "$(command -v mpirun)")" != "$before" ]]; then
    for alt in mpi mpirun; do
      cur=$(update-alternatives --query "$alt" 2>&1 | grep -i -m1 openmpi | sed 's/^Alternative: //' || true)
      [[ -n "$cur" ]] && update-alternatives --set "$alt" "$cur" >&2 || true
    done
  fi
fi
"$CXX" -show | grep -q -i mpich || { echo "mpich-check: $CXX is not MPICH's wrapper" >&2; exit 1; }
echo "mpich-check: $("$CXX" -show | cut -d' ' -f1) with $( (mpichversion 2>&1 || echo MPICH) | head -n 1)" >&2
files=(runtime/mpi_check.cpp runtime/mpi_transport.cpp runtime/mpi_context.cpp)
extra=()
if [[ -f /usr/local/cuda/include/cuda_runtime.h && ( -f /usr/include/nccl.h || -f /usr/local/cuda/include/nccl.h ) ]]; then
  files+=(runtime/cuda/nccl_backend.cpp)
  extra+=(-I/usr/local/cuda/include)
fi
fails=0
for f in "${files[@]}"; do
  if "$CXX" -std=c++20 -fsyntax-only -Wall -Wextra -Werror -Wno-unused-parameter -DCHARM_RT_HAVE_MPI=1 -I. "${extra[@]}" "$f"; then
    echo "mpich-check: ok   $f" >&2
  else
    echo "mpich-check: FAIL $f" >&2
    fails=$((fails + 1))
  fi
done
echo "mpich-check: ${#files[@]} files, $fails failed, $((SECONDS - t0)) s" >&2
exit "$fails"
