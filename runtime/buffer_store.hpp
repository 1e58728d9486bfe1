#pragma once
// BufferStore: fp32 storage for one rank's plan buffers (the peak counts the plan's bytes). A buffer is allocated
// and initialised (Input: the rank's tensor; Zero: an empty accumulator) by
// the first op that touches it, and freed after the last op that uses it,
// unless it holds a result. Safe to use from every worker of the rank: the
// plan orders every write against every other access (validator rule
// `lifetime`), so only allocation and the use count need synchronising.
//
// Region buffers (scheduler/ir/region.hpp) store one block per owner
// (shard_shape.hpp). A view owns no storage: it is the sub-span of its root's
// storage that holds its owners, so allocation, use counts and the peak count
// roots only, and a view's uses keep its root alive.

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "runtime/shard_shape.hpp"

namespace charm::rt {

/// A compute's Q and KV buffers (regions rq, rk) against the op: they hold the owners it names
/// (first owners q_owner, kv_owner) and one kv-head range. The error names the op.
[[nodiscard]] Status check_compute_blocks(const ir::Plan& plan, ir::OpId id, ir::BufferId q, const ir::Region& rq,
                                          ir::BufferId kv, const ir::Region& rk);

/// The largest over ranks of what a rank's buffers hold at most when it runs its ops one at a time in plan order,
/// by BufferStore's rules (a storage counted from its first use to its last, results to the end; Buffer::bytes).
/// A threaded run's measured peak depends on how its streams interleave; this figure does not.
[[nodiscard]] std::size_t op_order_peak_bytes(const ir::Plan& plan);

class BufferStore {
 public:
  /// Fills a buffer whose init is Input (always a whole shard) with the rank's own tensor.
  using FillInput = std::function<Status(const ir::Buffer&, std::span<float>)>;

  BufferStore(const ir::Plan& plan, ir::RankId rank, FillInput fill);

  /// The storage of `b` (of a view: its owners' span of the root), the root
  /// allocated and initialised on first use. An error names a buffer that breaks
  /// the plan's region rules.
  [[nodiscard]] Expected<std::span<float>> get(ir::BufferId b);
  /// The region and block shape of `b`; only after get(b) succeeded.
  [[nodiscard]] const RegionLayout& layout(ir::BufferId b) const { return slots_[std::size_t(b)]->layout; }
  /// `op` finished: every storage it touched loses one use; the last frees it (results are kept).
  void release(const ir::Op& op);
  [[nodiscard]] std::size_t peak_bytes() const { return peak_.load(); }

 private:
  struct Slot {
    ir::BufferId root = ir::kNone;       // the buffer whose storage this one is (itself unless a view)
    std::int64_t offset = 0, count = 0;  // this buffer's span of the root's storage
    RegionLayout layout;
    Status valid;  // the buffer's own rule violations, reported by get()
    // Storage, used on roots only.
    std::once_flag once;
    std::vector<float> data;
    Status init;
    std::atomic<int> uses{0};
    bool keep = false;
    std::size_t counted = 0;  // bytes this storage adds to the peak (the plan's, in the workload dtype)
  };
  Status init(ir::BufferId b, Slot& s);
  /// The distinct root storages of this rank that `op` touches.
  int roots_of(const ir::Op& op, ir::BufferId (&out)[4]) const;

  const ir::Plan& plan_;
  ir::RankId rank_;
  FillInput fill_;
  std::vector<std::unique_ptr<Slot>> slots_;  // by BufferId; null for other ranks' buffers
  std::atomic<std::size_t> live_{0}, peak_{0};
};

}  // namespace charm::rt
