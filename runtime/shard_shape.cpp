#include "runtime/shard_shape.hpp"

namespace charm::rt {

std::vector<std::int64_t> token_positions(const ir::Workload& w, int rank, int ranks) {
  std::vector<std::int64_t> pos;
  pos.reserve(static_cast<std::size_t>(w.seq / ranks));
  for (const auto& r : w.shard_ranges(rank, ranks))
    for (std::int64_t t = 0; t < r.count; ++t) pos.push_back(r.begin + t);
  return pos;
}

RegionLayout region_layout(const ir::Plan& plan, ir::BufferId b) {
  RegionLayout l;
  l.region = plan.region(b);
  l.block = ShardShape::of_region(plan.workload, plan.ranks, plan.parts, l.region);
  l.block_elems = l.block.elems(plan.buffer(b).kind);
  return l;
}

RegionPositions::RegionPositions(const ir::Workload& w, int ranks, int parts)
    : causal_(w.causal), mask_(w), part_tokens_(w.seq / ranks / parts) {
  pos_.reserve(std::size_t(ranks));
  for (int r = 0; r < ranks; ++r) pos_.push_back(token_positions(w, r, ranks));
}

}  // namespace charm::rt
