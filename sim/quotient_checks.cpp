// Whether a plan fits a topology: its placement, and the quotient (rank-symmetry) checks and channel map.

#include <fmt/format.h>

#include <numeric>
#include <string>
#include <vector>

#include "sim/simulator.hpp"

namespace charm::sim {

using namespace charm::ir;

Status check_topology_symmetry(const RankSymmetry& s, const topo::Topology& t, int ranks) {
  if (auto st = check_symmetry_shape(s, ranks); !st) return st;
  const topo::BlockLayout& b = t.blocks;
  const auto refuse = [&](const std::string& why) {
    return Error{"symmetry", fmt::format("topology '{}' cannot run a quotient plan ({} symmetry in blocks of {} "
                                         "rank{}): {}",
                                         t.name, to_string(s.kind), s.block, s.block == 1 ? "" : "s", why)};
  };
  if (!t.routes_by_block()) return refuse("its routes are a GPU-by-GPU table, not copies of one block's");
  if (!t.route_overrides.empty()) return refuse("it overrides routes");
  if (s.block % b.gpus != 0 || ranks % b.gpus != 0)
    return refuse(fmt::format("its blocks of {} GPUs do not tile the classes", b.gpus));
  if (s.kind == RankSymmetry::Kind::Xor && (b.gpus & (b.gpus - 1)) != 0)
    return refuse(fmt::format("xor maps blocks of {} GPUs to none", b.gpus));
  // Two blocks of one class would share a representative channel that a route between them crossed twice.
  if (!t.block_routes_cross_each_channel_once())
    return refuse("a route between two of its blocks crosses one link of both blocks' copies");
  return {};
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
  CHARM_ASSERT(plan_sym.active(), "a quotient coarsens a plan's symmetry");
  RankSymmetry s = plan_sym;
  if (t.blocks.gpus >= 1) s.block = std::lcm(plan_sym.block, t.blocks.gpus);  // else check refuses: no blocks
  if (auto st = check_topology_symmetry(s, t, ranks); !st) return st.error();
  return s;
}

RankSymmetry quotient_symmetry(const RankSymmetry& plan_sym, const topo::Topology& t, int ranks) {
  if (!plan_sym.active()) return {};
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
