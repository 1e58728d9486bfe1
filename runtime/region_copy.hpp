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

/// Copies the elements of `src` (the whole storage of region `rs`) that lie in
/// rs ∩ rd to their places in `dst` (the whole storage of `rd`); nothing when the
/// regions do not overlap. Regions count parts out of `parts` per shard. Errors
/// when a span is not the size of its region's storage.
[[nodiscard]] Status copy_region(const ir::Workload& w, int ranks, int parts, ir::BufKind kind, const ir::Region& rs,
                                 std::span<const float> src, const ir::Region& rd, std::span<float> dst);

}  // namespace charm::rt
