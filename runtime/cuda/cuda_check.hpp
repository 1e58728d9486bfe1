#pragma once
// Checking every CUDA, cuBLAS and NCCL call. A failure becomes an Error value
// whose message names the call, the file and line, the rank and the host, as
// nccl-tests does; the macros return it from the enclosing function (which
// returns Status or Expected<T>). Nothing here exits or throws.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "support/expected.hpp"

namespace charm::rt::cuda {

/// The rank named in error messages: this process's (set_error_rank: every thread sees it;
/// -1: none, e.g. a test), unless an ErrorRankScope of this thread names another.
void set_error_rank(int rank);
[[nodiscard]] int error_rank();
/// While it lives, this thread's errors name `rank` (cuda-local runs every rank in one
/// process: the rank is the one whose op the thread is working on).
class ErrorRankScope {
 public:
  explicit ErrorRankScope(int rank);
  ~ErrorRankScope();
  ErrorRankScope(const ErrorRankScope&) = delete;
  ErrorRankScope& operator=(const ErrorRankScope&) = delete;

 private:
  int saved_;
};
/// This machine's host name (cached).
[[nodiscard]] const std::string& host_name();

[[nodiscard]] Error cuda_error(cudaError_t e, const char* call, const char* file, int line);
[[nodiscard]] Error cublas_error(cublasStatus_t e, const char* call, const char* file, int line);
/// `result` is an ncclResult_t (nccl.h stays out of this header).
[[nodiscard]] Error nccl_error(int result, const char* what, const char* call, const char* file, int line);

}  // namespace charm::rt::cuda

#define CHARM_CUDA_TRY(call)                                                                                           \
  do {                                                                                                                 \
    const cudaError_t charm_e_ = (call);                                                                               \
    if (charm_e_ != cudaSuccess) return ::charm::rt::cuda::cuda_error(charm_e_, #call, __FILE__, __LINE__);            \
  } while (0)

#define CHARM_CUBLAS_TRY(call)                                                                                         \
  do {                                                                                                                 \
    const cublasStatus_t charm_s_ = (call);                                                                            \
    if (charm_s_ != CUBLAS_STATUS_SUCCESS)                                                                             \
      return ::charm::rt::cuda::cublas_error(charm_s_, #call, __FILE__, __LINE__);                                     \
  } while (0)

/// Propagates a Status / Expected error from a helper.
#define CHARM_TRY(expr)                                                                                                \
  do {                                                                                                                 \
    auto charm_st_ = (expr);                                                                                           \
    if (!charm_st_) return charm_st_.error();                                                                          \
  } while (0)
