#pragma once
// The GPU runner's host decisions that need no device, made once per plan and
// unit tested on the CPU (tests/cuda_host_test.cpp):
//   DeviceBuffers  where each buffer lives: a root is one allocation of one
//                  block per owner (DeviceLayout of its region's block shape),
//                  a view is its owners' sub-span of its root (as in
//                  runtime/buffer_store.hpp); Out buffers in a half dtype that
//                  travel also get a wire staging area (O in the dtype).
//   region_copies  the overlap of two regions as 2-D byte copies (one per
//                  owner, section and batch), the walk of runtime/region_copy.cpp.
//   compute_blocks the (q owner, kv owner) blocks a ranged compute runs (pairs
//                  the causal mask hides are left out), each with its mask in a
//                  MaskTable: query i of the block sees the first counts[i] keys.

#include <cstddef>
#include <map>
#include <span>
#include <tuple>
#include <vector>

#include "runtime/cuda/block_attention.hpp"
#include "runtime/cuda/device_layout.hpp"
#include "scheduler/ir/op_args.hpp"

namespace charm::rt::cuda {

struct DeviceBuffer {
  ir::BufferId root = ir::kNone;  // the allocation it lives in (itself unless a view); kNone: not here
  ir::Region region;
  ShardShape block;             // the shape of one owner's block
  DeviceLayout layout;          // one owner's block in memory
  DeviceLayout wire;            // one owner's block as it travels
  bool staged = false;          // the wire form differs from memory (Out, half dtype): converted on send/receive
  std::size_t offset = 0;       // bytes from the root's start
  std::size_t wire_offset = 0;  // bytes from the start of the root's wire staging area
  [[nodiscard]] std::size_t bytes() const { return layout.bytes * std::size_t(region.owners()); }
  [[nodiscard]] std::size_t wire_bytes() const { return wire.bytes * std::size_t(region.owners()); }
  /// Bytes from this buffer's start to owner x's block.
  [[nodiscard]] std::size_t block_at(ir::RankId x) const { return std::size_t(x - region.owner_begin) * layout.bytes; }
};

struct DeviceBuffers {
  std::vector<DeviceBuffer> buf;  // by BufferId
  std::vector<char> wire_root;    // by BufferId: a root whose wire staging area is allocated
  /// Every buffer of the ranks marked in `local` (by rank), checked against the region rules.
  [[nodiscard]] static Expected<DeviceBuffers> of(const ir::Plan& plan, const std::vector<char>& local);
  [[nodiscard]] const DeviceBuffer& operator[](ir::BufferId b) const { return buf[std::size_t(b)]; }
};

/// One strided copy of bytes: `height` rows of `width` bytes.
struct Copy2D {
  std::size_t src = 0, dst = 0;              // bytes from each buffer's start
  std::size_t src_pitch = 0, dst_pitch = 0;  // bytes from one row to the next
  std::size_t width = 0, height = 0;
};

/// The copies that move the elements of `s` that lie in both regions to their places in `d`
/// (buffers of one kind, memory layouts); none when the regions do not overlap.
[[nodiscard]] std::vector<Copy2D> region_copies(const ir::Workload& w, int ranks, int parts, ir::BufKind kind,
                                                const DeviceBuffer& s, const DeviceBuffer& d);

class MaskTable {
 public:
  MaskTable(const ir::Workload& w, int ranks, int parts);
  /// The offset in counts() of the block (owner x's tokens of rq's parts) x (owner y's tokens of
  /// rk's parts), added when new.
  std::size_t add(ir::RankId x, const ir::Region& rq, ir::RankId y, const ir::Region& rk);
  /// Whether the block has a visible pair (the CPU executor's rule).
  [[nodiscard]] bool visible(ir::RankId x, const ir::Region& rq, ir::RankId y, const ir::Region& rk) const;
  [[nodiscard]] const std::vector<int>& counts() const { return counts_; }

 private:
  bool causal_ = false;
  RegionPositions positions_;
  std::map<std::tuple<int, int, int, int, int, int>, std::size_t> at_;
  std::vector<int> counts_;
};

struct ComputeBlock {
  ir::RankId x = 0, y = 0;  // q owner, kv owner
  std::size_t mask = 0;     // offset of its counts in the MaskTable
};
struct ComputeBlocks {
  BlockDims dims;  // of every block of the op
  std::vector<ComputeBlock> blocks;
};

/// The blocks of Compute op `id` (forward or backward), its buffers checked as the CPU executor
/// checks them (owners named by the op, one kv-head range, the accumulators' regions).
[[nodiscard]] Expected<ComputeBlocks> compute_blocks(const ir::Plan& plan, ir::OpId id, const DeviceBuffers& bufs,
                                                     MaskTable& masks);

}  // namespace charm::rt::cuda
