#pragma once
// BufferStore: fp32 storage for one rank's plan buffers. A buffer is allocated
// and initialised (Input: the rank's tensor; Zero: an empty accumulator) by
// the first op that touches it, and freed after the last op that uses it,
// unless it holds a result. Safe to use from every worker of the rank: the
// plan orders every write against every other access (validator rule
// `lifetime`), so only allocation and the use count need synchronising.

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "runtime/shard_shape.hpp"

namespace charm::rt {

class BufferStore {
 public:
  /// Fills a buffer whose init is Input with the rank's own tensor.
  using FillInput = std::function<Status(const ir::Buffer&, std::span<float>)>;

  BufferStore(const ir::Plan& plan, ir::RankId rank, FillInput fill);

  /// The storage of `b`, allocated and initialised on first use.
  [[nodiscard]] Expected<std::span<float>> get(ir::BufferId b);
  /// One op using `b` finished; the last one frees it (results are kept).
  void release(ir::BufferId b);
  [[nodiscard]] std::size_t peak_bytes() const { return peak_.load(); }

 private:
  struct Slot {
    std::once_flag once;
    std::vector<float> data;
    Status init;
    std::atomic<int> uses{0};
    bool keep = false;
  };
  Status init(ir::BufferId b, Slot& s);

  const ir::Plan& plan_;
  ShardShape shape_;
  FillInput fill_;
  std::vector<std::unique_ptr<Slot>> slots_;  // by BufferId; null for other ranks' buffers
  std::atomic<std::size_t> live_{0}, peak_{0};
};

} // namespace charm::rt
