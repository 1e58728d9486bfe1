#pragma once
// Region: the slice of the attention data one buffer holds.
//
// A plain buffer holds one whole shard of one owner: all kv heads, all tokens.
// The baselines that cut data finer (Ulysses and USP cut heads and gather many
// owners' shards on one rank; TASP sends each shard in token parts) use
// buffers over a region:
//   owners [owner_begin, owner_end)  whole shards, stored owner after owner
//   kv heads [head_begin, head_end)  query heads follow their kv head (GQA group)
//   parts [part_begin, part_end)     token parts of each shard, out of Plan::parts
//                                    equal parts in the shard's local token order
// Storage: one block per owner, each block laid out like a shard of
// (tokens of the parts, heads of the range) (runtime/shard_shape.hpp), so an
// owner sub-range of a region is contiguous and can be a view (Buffer::parent).

#include <cstdint>
#include <string>

#include "scheduler/ir/workload.hpp"

namespace charm::ir {

struct Region {
  std::int32_t owner_begin = 0, owner_end = 1;
  std::int32_t head_begin = 0, head_end = 1;
  std::int32_t part_begin = 0, part_end = 1;

  [[nodiscard]] std::int32_t owners() const { return owner_end - owner_begin; }
  [[nodiscard]] std::int32_t heads() const { return head_end - head_begin; }
  [[nodiscard]] std::int32_t parts() const { return part_end - part_begin; }
  [[nodiscard]] bool empty() const { return owners() <= 0 || heads() <= 0 || parts() <= 0; }
  [[nodiscard]] bool contains(const Region& o) const {
    return owner_begin <= o.owner_begin && o.owner_end <= owner_end && head_begin <= o.head_begin &&
           o.head_end <= head_end && part_begin <= o.part_begin && o.part_end <= part_end;
  }
  [[nodiscard]] Region intersect(const Region& o) const;
  friend bool operator==(const Region&, const Region&) = default;
};

/// The region of one whole shard of `owner` (every kv head, every part).
[[nodiscard]] Region shard_region(std::int32_t owner, const Workload& w, int parts);
/// Visible (query, key) pairs between token parts of two shards.
[[nodiscard]] double visible_pairs(const Workload& w, int ranks, int parts, std::int32_t q_owner,
                                   std::int32_t q_part_begin, std::int32_t q_part_end, std::int32_t kv_owner,
                                   std::int32_t kv_part_begin, std::int32_t kv_part_end);
/// "[0-7]" / "3", then "h2-3" and "p1/4" where the region is not the whole of them.
[[nodiscard]] std::string region_suffix(const Region& r, const Workload& w, int parts);

}  // namespace charm::ir
