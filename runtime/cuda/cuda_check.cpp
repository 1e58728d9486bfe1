#include "runtime/cuda/cuda_check.hpp"

#include "runtime/cuda/cublas_loader.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <atomic>

namespace charm::rt::cuda {

namespace {
// The process's rank (backend cuda: the MPI rank), seen by every thread; a scope's rank
// (cuda-local: the plan rank whose op this thread is working on) overrides it.
std::atomic<int> g_rank{-1};
thread_local int t_scope_rank = -1;

std::string where(const char* file, int line) {
  const std::string rank = error_rank() >= 0 ? fmt::format("rank {} ", error_rank()) : std::string();
  return fmt::format("{}on {} at {}:{}", rank, host_name(), file, line);
}
}  // namespace

void set_error_rank(int rank) { g_rank.store(rank); }
int error_rank() { return t_scope_rank >= 0 ? t_scope_rank : g_rank.load(); }

ErrorRankScope::ErrorRankScope(int rank) : saved_(t_scope_rank) { t_scope_rank = rank; }
ErrorRankScope::~ErrorRankScope() { t_scope_rank = saved_; }

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

}  // namespace charm::rt::cuda
