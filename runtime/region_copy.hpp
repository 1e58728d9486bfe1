#pragma once
// Copying between region buffers: the overlap of two regions of one kind
// (scheduler/ir/region.hpp), in the storage layout of shard_shape.hpp (one
// block per owner, each block a shard of the region's tokens and heads).
//
// Token-major components ([B, T, H, D] and [B, T, Hkv, D]) move one contiguous
// head slice per token row; row components (LSE and D, [B, H, T]) move one
// contiguous token run per head. This slices heads or parts out of a shard,
// places a slice back into one, and picks owners out of a gathered buffer.

#include <span>

#include "runtime/shard_shape.hpp"

namespace charm::rt {

/// One tensor of a block: token-major [B, T, group * hkv, D], or rows [B, group * hkv, T].
struct RegionComponent {
  bool rows = false;
  std::int64_t group = 1;  // heads per kv head in this component
};
/// The tensors of a block of `kind`, in storage order (shard_shape.hpp); `g` = heads / kv heads.
/// Returns their count (at most 4). The GPU's region copies walk the same list.
int region_components(ir::BufKind kind, std::int64_t g, RegionComponent (&out)[4]);

/// Copies the elements of `src` (the whole storage of region `rs`) that lie in
/// rs ∩ rd to their places in `dst` (the whole storage of `rd`); nothing when the
/// regions do not overlap. Regions count parts out of `parts` per shard. Errors
/// when a span is not the size of its region's storage.
[[nodiscard]] Status copy_region(const ir::Workload& w, int ranks, int parts, ir::BufKind kind, const ir::Region& rs,
                                 std::span<const float> src, const ir::Region& rd, std::span<float> dst);

}  // namespace charm::rt
