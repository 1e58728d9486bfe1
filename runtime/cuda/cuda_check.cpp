#include "runtime/cuda/cuda_check.hpp"

#include "runtime/cuda/cublas_loader.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <array>

namespace charm::rt::cuda {

namespace {
thread_local int g_rank = -1;

std::string where(const char* file, int line) {
  const std::string rank = error_rank() >= 0 ? fmt::format("rank {} ", error_rank()) : std::string();
  return fmt::format("{}on {} at {}:{}", rank, host_name(), file, line);
}
} // namespace

void set_error_rank(int rank) { g_rank = rank; }
int error_rank() { return g_rank; }

const std::string& host_name() {
  static const std::string name = [] {
    std::array<char, 256> buf{};
    if (gethostname(buf.data(), buf.size() - 1) != 0) return std::string("unknown-host");
    return std::string(buf.data());
  }();
  return name;
}

Error cuda_error(cudaError_t e, const char* call, const char* file, int line) {
  return Error{where(file, line), fmt::format("{} failed: {} ({})", call, cudaGetErrorString(e), cudaGetErrorName(e))};
}

Error cublas_error(cublasStatus_t e, const char* call, const char* file, int line) {
  return Error{where(file, line), fmt::format("{} failed: {} ({})", call, blas::status_string(e), int(e))};
}

Error nccl_error(int result, const char* what, const char* call, const char* file, int line) {
  return Error{where(file, line), fmt::format("{} failed: {} (ncclResult {})", call, what, result)};
}

} // namespace charm::rt::cuda
