#!/usr/bin/env bash
# Prepares .gpu-bundle/ on a build machine (CUDA toolkit plus the Debian -dev
# packages of scripts/setup.sh, no GPU needed) for scripts/gpu-check.sh on a
# GPU machine whose image lacks those packages (the lent H200's image has nvcc,
# CMake, ninja, cuBLAS and NCCL, but not fmt, CLI11, GoogleTest, Boost,
# Google Benchmark or OpenMPI): the binaries, built for sm_90, and every shared
# library they need beyond glibc, the driver, cuBLAS and NCCL (the CUDA runtime
# travels: 0.7 MB against NCCL's 218 MB, which the machine's Python wheels hold). Carry the folder with
# the device tool (carry: [".gpu-bundle"]); gpu-check.sh then skips its build.
set -euo pipefail
cd "$(dirname "$0")/.."
# BUILD_DIR=build reuses the README's build (its CUDA architectures 80;90 hold sm_90) as it is configured.
B=${BUILD_DIR:-build-gpu-bundle}
[ -f $B/CMakeCache.txt ] ||
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DCHARM_BUILD_BENCH=ON >/dev/null
cmake --build $B -j"$(nproc)" --target charm cuda_host_test cuda_kernels_test cuda_local_test cuda_cli_test \
  cuda_attention_bench
rm -rf .gpu-bundle
mkdir -p .gpu-bundle/bin .gpu-bundle/lib .gpu-bundle/lib-fallback
cp $B/tools/charm $B/tests/cuda_host_test $B/tests/cuda_kernels_test $B/tests/cuda_local_test $B/tests/cuda_cli_test \
  $B/runtime/cuda/cuda_attention_bench .gpu-bundle/bin/
for f in .gpu-bundle/bin/*; do ldd "$f"; done | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | ld-linux* | libcuda.so* | libcublas* | libnccl*) ;;
    # The C++ runtime of the GPU machine is newer and serves this build too (and the CUDA libraries
    # it loads may need its newer symbols): gpu-check.sh adds these only when the machine has none.
    libstdc++.so* | libgcc_s.so*) cp -L "$lib" .gpu-bundle/lib-fallback/ ;;
    *) cp -L "$lib" .gpu-bundle/lib/ ;;
  esac
done
grep -qx '/.gpu-bundle/' .git/info/exclude 2>/dev/null || echo '/.gpu-bundle/' >>.git/info/exclude
git rev-parse --short HEAD >.gpu-bundle/COMMIT
nvcc=$(sed -n 's/^CUDAToolkit_NVCC_EXECUTABLE:FILEPATH=//p' $B/CMakeCache.txt)
"$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p' >.gpu-bundle/CUDART
du -sh .gpu-bundle
