#pragma once
// cuBLAS, loaded when the first GPU block kernel needs it.
//
// Linking libcublas makes every process that carries the GPU backends pay for
// cuBLASLt's static initialisation at start: about 0.7 s and 220 MB of touched
// pages for `charm --version`, for `charm simulate`, for every test that runs
// the command line. Only `run --backend cuda|cuda-local` multiplies matrices on
// a GPU, so the library is opened (dlopen) on first use instead: the five entry
// points below are all the backend calls. NCCL and the CUDA runtime stay linked:
// they start in about 10 ms.

#include <cublas_v2.h>

#include "support/expected.hpp"

namespace charm::rt::cuda::blas {

/// Opens libcublas (once per process; thread-safe). The error names the library
/// and what the dynamic loader said, e.g. when the CUDA toolkit is not installed.
[[nodiscard]] Status load();

/// The cuBLAS calls of the block kernels, forwarded to the loaded library. Each
/// returns CUBLAS_STATUS_NOT_INITIALIZED when load() failed.
cublasStatus_t create(cublasHandle_t* handle);
cublasStatus_t destroy(cublasHandle_t handle);
cublasStatus_t set_stream(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t gemm_strided_batched(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                    int k, const void* alpha, const void* a, cudaDataType_t a_type, int lda,
                                    long long stride_a, const void* b, cudaDataType_t b_type, int ldb,
                                    long long stride_b, const void* beta, void* c, cudaDataType_t c_type, int ldc,
                                    long long stride_c, int batch, cublasComputeType_t compute, cublasGemmAlgo_t algo);
/// cublasGetStatusString, or a fixed text when the library is not loaded.
const char* status_string(cublasStatus_t s);

}  // namespace charm::rt::cuda::blas
