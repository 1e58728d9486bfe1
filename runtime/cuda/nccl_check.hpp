#pragma once
// CHARM_NCCL_TRY: the NCCL counterpart of CHARM_CUDA_TRY (nccl.h included here only).

#include <nccl.h>

#include <string>

#include "runtime/cuda/cuda_check.hpp"

namespace charm::rt::cuda {

/// NCCL's text for `r` plus its last detailed message, if any.
inline std::string nccl_detail(ncclResult_t r) {
  std::string s = ncclGetErrorString(r);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') s += std::string(" (") + last + ")";
  return s;
}

}  // namespace charm::rt::cuda

// ncclInProgress is not a failure: a non-blocking communicator is still working.
#define CHARM_NCCL_TRY(call)                                                                                           \
  do {                                                                                                                 \
    const ncclResult_t charm_r_ = (call);                                                                              \
    if (charm_r_ != ncclSuccess && charm_r_ != ncclInProgress)                                                         \
      return ::charm::rt::cuda::nccl_error(int(charm_r_), ::charm::rt::cuda::nccl_detail(charm_r_).c_str(), #call,     \
                                           __FILE__, __LINE__);                                                        \
  } while (0)
