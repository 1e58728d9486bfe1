// Large allocations of the `charm` process ask for transparent huge pages.
//
// A simulation at cluster scale lives in a few arrays of tens to hundreds of MB
// (ops, dependencies, per-op times) written once and walked in replay order; with
// 4 KB pages a third of its time went to page faults and TLB misses (perf, 512 to
// 1,024 ranks). Where the kernel leaves huge pages to madvise (the common
// default), every block of 2 MB or more that operator new hands out is advised
// so; smaller ones, and every byte's contents, are as before. Only the CLI does
// this: the libraries leave the allocator to the program that links them.
//
// A sweep runs thousands of small simulations per second on worker threads: with
// glibc's defaults each freed plan let the thread's arena hand its top back to
// the kernel (madvise DONTNEED and a TLB flush) and the next plan fault it in again,
// a third of the sweep's time (perf). Freed memory now stays with the process,
// and every block comes from a heap, not from mmap and munmap per block: a block
// over 32 MB (glibc's ceiling for its moving threshold) used to be mapped fresh and
// unmapped when freed, so the next one (the simulator's arrays after the planner's
// scratch, peak memory's tables after the replay state) faulted in and zeroed its
// pages again: at 1,024 ranks a causal run faulted 1.44 GB for a peak of 1.13 GB
// (ring zigzag 1.87 GB for 1.43 GB); now about its peak. The process gives nothing
// back before it exits, which a command line run can afford.
#include <malloc.h>
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <new>

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define CHARM_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CHARM_SANITIZED 1
#endif

#ifndef CHARM_SANITIZED  // sanitizers bring their own operator new

namespace {

constexpr std::size_t kHugePage = std::size_t(2) << 20;  // x86-64 and arm64 with 4 KB pages
constexpr std::size_t kAdviseFrom = kHugePage;

void* allocate(std::size_t n) {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  if (n >= kAdviseFrom) {
    // The whole huge pages inside the block; a hint only, so its failure changes nothing.
    const auto from = (reinterpret_cast<std::uintptr_t>(p) + kHugePage - 1) & ~std::uintptr_t(kHugePage - 1);
    const auto to = (reinterpret_cast<std::uintptr_t>(p) + n) & ~std::uintptr_t(kHugePage - 1);
    if (to > from) (void)madvise(reinterpret_cast<void*>(from), to - from, MADV_HUGEPAGE);
  }
  return p;
}

const bool kMallocTuned = [] {
#if defined(M_TRIM_THRESHOLD) && defined(M_MMAP_THRESHOLD)
  (void)mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
  (void)mallopt(M_MMAP_THRESHOLD, 32 << 20);
  (void)mallopt(M_MMAP_MAX, 0);
#endif
  return true;
}();

}  // namespace

void* operator new(std::size_t n) { return allocate(n); }
void* operator new[](std::size_t n) { return allocate(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

#endif
