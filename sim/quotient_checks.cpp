// Whether a plan fits a topology: its placement, and the quotient (rank-symmetry) checks and channel map.

#include <fmt/format.h>

#include <vector>

#include "sim/simulator.hpp"

namespace charm::sim {

using namespace charm::ir;

BlockSymmetry block_symmetry(const topo::Topology& t) {
  return {t.name, t.blocks.gpus, t.routes_by_block(), !t.route_overrides.empty(),
          t.block_routes_cross_each_channel_once()};
}

Status check_topology_symmetry(const RankSymmetry& s, const topo::Topology& t, int ranks) {
  return check_block_symmetry(s, block_symmetry(t), ranks);
}

Status check_placement(const Plan& plan, const topo::Topology& t) {
  if (plan.gpus.empty()) return {};
  if (plan.gpus.size() != std::size_t(plan.ranks))
    return Error{"plan", fmt::format("places {} ranks on GPUs, but it has {}", plan.gpus.size(), plan.ranks)};
  std::vector<RankId> rank_at(std::size_t(t.num_gpus()), kNone);
  for (RankId r = 0; r < plan.ranks; ++r) {
    const int g = plan.gpus[std::size_t(r)];
    if (g < 0 || g >= t.num_gpus())
      return Error{Field::Topology, fmt::format("the plan places rank {} on GPU {}, but topology '{}' has {} GPUs", r,
                                                g, t.name, t.num_gpus())};
    if (rank_at[std::size_t(g)] != kNone)
      return Error{"plan", fmt::format("ranks {} and {} are both placed on GPU {}", rank_at[std::size_t(g)], r, g)};
    rank_at[std::size_t(g)] = r;
  }
  // A quotient's classes must be the same GPUs' classes: its rotation moves every rank's GPU alike.
  const RankSymmetry& s = plan.symmetry;
  // Generators: element 1 of a rotation; elements 1, 2, 4, ... of an xor group.
  for (int g = 1; s.active() && g < s.elements(plan.ranks); g = s.kind == RankSymmetry::Kind::Xor ? 2 * g : plan.ranks)
    for (RankId r = 0; r < plan.ranks; ++r)
      if (plan.gpu_of(s.apply(g, r, plan.ranks)) != s.apply(g, plan.gpu_of(r), plan.ranks))
        return Error{"plan", fmt::format("its placement does not have its symmetry ({} of {} ranks): rank {} on GPU {}",
                                         to_string(s.kind), s.block, r, plan.gpu_of(r))};
  return {};
}

Expected<RankSymmetry> topology_quotient(const RankSymmetry& plan_sym, const topo::Topology& t, int ranks) {
  return coarsen_to_blocks(plan_sym, block_symmetry(t), ranks);
}

RankSymmetry quotient_symmetry(const RankSymmetry& plan_sym, const topo::Topology& t, int ranks) {
  auto s = topology_quotient(plan_sym, t, ranks);
  return s ? *s : RankSymmetry{};
}

int representative_channel(const topo::Topology& t, const RankSymmetry& s, int ch) {
  if (!s.active()) return ch;
  const int per_block = 2 * t.blocks.links, blocks_per_class = s.block / t.blocks.gpus;
  const int block = ch / per_block;
  return (block % blocks_per_class) * per_block + ch % per_block;
}

}  // namespace charm::sim
