#include "runtime/cuda/cublas_loader.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>
#include <string>

namespace charm::rt::cuda::blas {
namespace {

// The soname of the cuBLAS these headers describe; the toolkit's library folder
// (CHARM_CUDA_LIBRARY_DIR, from CMake) is the fallback when the dynamic loader's
// search path (the executable's RUNPATH, LD_LIBRARY_PATH, ld.so.cache) misses it.
#define CHARM_STR2(x) #x
#define CHARM_STR(x) CHARM_STR2(x)
constexpr const char* kSoname = "libcublas.so." CHARM_STR(CUBLAS_VER_MAJOR);
#undef CHARM_STR
#undef CHARM_STR2

struct Api {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  // Spelled out: C++ sees an overload set (the 64-bit-index variant) under this name.
  cublasStatus_t (*gemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*,
                         cudaDataType_t, int, long long, const void*, cudaDataType_t, int, long long, const void*,
                         void*, cudaDataType_t, int, long long, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
  std::string error;  // empty once loaded
};

void* open_library(std::string& why) {
  if (void* h = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL)) return h;
  why = dlerror();
#ifdef CHARM_CUDA_LIBRARY_DIR
  const std::string full = std::string(CHARM_CUDA_LIBRARY_DIR) + "/" + kSoname;
  if (void* h = dlopen(full.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
#endif
  return nullptr;
}

template <class F>
bool resolve(void* lib, const char* name, F& f, std::string& error) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  if (f == nullptr && error.empty()) error = fmt::format("{} has no symbol {}", kSoname, name);
  return f != nullptr;
}

const Api& api() {
  static Api a;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string why;
    void* lib = open_library(why);
    if (lib == nullptr) {
      a.error = fmt::format("cannot load cuBLAS ({}): {}", kSoname, why);
      return;
    }
    // The library stays open for the life of the process, as a linked one would.
    resolve(lib, "cublasCreate_v2", a.create, a.error);
    resolve(lib, "cublasDestroy_v2", a.destroy, a.error);
    resolve(lib, "cublasSetStream_v2", a.set_stream, a.error);
    resolve(lib, "cublasGemmStridedBatchedEx", a.gemm, a.error);
    resolve(lib, "cublasGetStatusString", a.status_string, a.error);
  });
  return a;
}

bool ready() { return api().error.empty(); }

}  // namespace

Status load() {
  if (const auto& a = api(); !a.error.empty()) return Error{"cuBLAS", a.error};
  return {};
}

cublasStatus_t create(cublasHandle_t* handle) { return ready() ? api().create(handle) : CUBLAS_STATUS_NOT_INITIALIZED; }

cublasStatus_t destroy(cublasHandle_t handle) {
  return ready() ? api().destroy(handle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t set_stream(cublasHandle_t handle, cudaStream_t stream) {
  return ready() ? api().set_stream(handle, stream) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t gemm_strided_batched(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                    int k, const void* alpha, const void* a, cudaDataType_t a_type, int lda,
                                    long long stride_a, const void* b, cudaDataType_t b_type, int ldb,
                                    long long stride_b, const void* beta, void* c, cudaDataType_t c_type, int ldc,
                                    long long stride_c, int batch, cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  if (!ready()) return CUBLAS_STATUS_NOT_INITIALIZED;
  return api().gemm(handle, ta, tb, m, n, k, alpha, a, a_type, lda, stride_a, b, b_type, ldb, stride_b, beta, c, c_type,
                    ldc, stride_c, batch, compute, algo);
}

const char* status_string(cublasStatus_t s) { return ready() ? api().status_string(s) : "cuBLAS not loaded"; }

}  // namespace charm::rt::cuda::blas
