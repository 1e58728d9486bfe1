#pragma once
// Owners of CUDA streams, events and device memory: each frees its handle in
// its destructor, so an early return (every CHARM_CUDA_TRY) leaks nothing.
// They convert to the raw handle where a CUDA call takes one, and `out()`
// hands the create call (cudaStreamCreate*, cudaEventCreate*, cudaMalloc)
// the address to fill, freeing what was held before:
//   CHARM_CUDA_TRY(cudaStreamCreateWithFlags(s.out(), cudaStreamNonBlocking));
// so the error names the CUDA call itself. `release()` gives the handle up
// without freeing it: for a device that may hold work that never finishes,
// where cudaFree would wait forever (the process is going down anyway).
// Teardown errors cannot leave a destructor; owners synchronise and check first.

#include <cuda_runtime.h>

#include <utility>

namespace charm::rt::cuda {

template <class H, cudaError_t (*Destroy)(H)>
class CudaHandle {
 public:
  CudaHandle() = default;
  ~CudaHandle() { reset(); }
  CudaHandle(CudaHandle&& o) noexcept : h_(std::exchange(o.h_, H{})) {}
  CudaHandle& operator=(CudaHandle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, H{});
    }
    return *this;
  }
  CudaHandle(const CudaHandle&) = delete;
  CudaHandle& operator=(const CudaHandle&) = delete;

  operator H() const { return h_; }  // NOLINT(google-explicit-constructor): passed to CUDA calls as is
  [[nodiscard]] H get() const { return h_; }
  /// Frees what is held, then the address for a create call to fill.
  [[nodiscard]] H* out() {
    reset();
    return &h_;
  }
  void reset() {
    if (h_ != H{}) (void)Destroy(h_);
    h_ = H{};
  }
  /// Gives the handle up without destroying it.
  H release() { return std::exchange(h_, H{}); }

 private:
  H h_{};
};

inline cudaError_t destroy_stream(cudaStream_t s) { return cudaStreamDestroy(s); }
inline cudaError_t destroy_event(cudaEvent_t e) { return cudaEventDestroy(e); }
inline cudaError_t free_device(void* p) { return cudaFree(p); }

using Stream = CudaHandle<cudaStream_t, destroy_stream>;
using Event = CudaHandle<cudaEvent_t, destroy_event>;

/// Device memory of T (cudaMalloc / cudaFree).
template <class T>
class DeviceMem {
 public:
  DeviceMem() = default;
  ~DeviceMem() { reset(); }
  DeviceMem(DeviceMem&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  DeviceMem& operator=(DeviceMem&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  DeviceMem(const DeviceMem&) = delete;
  DeviceMem& operator=(const DeviceMem&) = delete;

  operator T*() const { return p_; }  // NOLINT(google-explicit-constructor)
  [[nodiscard]] T* get() const { return p_; }
  [[nodiscard]] T** out() {
    reset();
    return &p_;
  }
  void reset() {
    if (p_ != nullptr) (void)free_device(static_cast<void*>(p_));
    p_ = nullptr;
  }
  T* release() { return std::exchange(p_, nullptr); }

 private:
  T* p_ = nullptr;
};

}  // namespace charm::rt::cuda
