#include "scheduler/ir/symmetry.hpp"

#include <fmt/format.h>

#include <vector>

#include "scheduler/ir/plan.hpp"

namespace charm::ir {

const char* to_string(RankSymmetry::Kind k) {
  switch (k) {
  case RankSymmetry::Kind::Rotate:
    return "rotate";
  case RankSymmetry::Kind::Xor:
    return "xor";
  default:
    return "none";
  }
}

namespace {
bool power_of_two(std::int64_t n) { return n > 0 && (n & (n - 1)) == 0; }
}  // namespace

Status check_symmetry_shape(const RankSymmetry& s, int ranks) {
  if (!s.active()) return {};
  if (s.block < 1 || ranks % s.block != 0)
    return Error{"symmetry", fmt::format("a block of {} ranks does not divide {} ranks", s.block, ranks)};
  if (s.kind == RankSymmetry::Kind::Xor && (!power_of_two(s.block) || !power_of_two(ranks / s.block)))
    return Error{"symmetry", fmt::format("xor symmetry needs power-of-two blocks and block counts, got {} ranks in "
                                         "blocks of {}",
                                         ranks, s.block)};
  return {};
}

Plan quotient_of(const Plan& full, const RankSymmetry& s) {
  CHARM_ASSERT(s.active() && check_symmetry_shape(s, full.ranks).ok(), "a quotient needs a well-formed symmetry");
  Plan q;
  q.algo = full.algo;
  q.workload = full.workload;
  q.ranks = full.ranks;
  q.domains = full.domains;
  q.parts = full.parts;
  q.symmetry = s;
  const auto kept = [&](RankId r) { return r < s.block; };
  std::vector<BufferId> buf_map(full.buffers().size(), kNone);
  for (std::size_t b = 0; b < full.buffers().size(); ++b) {
    Buffer nb = full.buffers()[b];
    if (!kept(nb.rank)) continue;
    if (nb.parent != kNone) nb.parent = buf_map[std::size_t(nb.parent)];
    if (nb.reuse != kNone) nb.reuse = buf_map[std::size_t(nb.reuse)];
    buf_map[b] = q.add_buffer(nb);
  }
  std::vector<OpId> op_map(full.size(), kNone), deps;
  for (OpId id = 0; id < OpId(full.size()); ++id) {
    Op o = full.op(id);
    if (!kept(o.rank)) continue;
    for (auto& b : o.buf)
      if (b != kNone) b = buf_map[std::size_t(b)];
    deps.clear();
    for (OpId d : full.deps(id)) deps.push_back(op_map[std::size_t(d)]);  // dependencies stay on the rank
    op_map[std::size_t(id)] = q.add_op(o, deps);
  }
  q.results().assign(full.results().size(), RankResults{});
  for (RankId r = 0; r < s.block && r < full.ranks; ++r) {
    const RankResults& from = full.results()[std::size_t(r)];
    auto map = [&](BufferId b) { return b == kNone ? kNone : buf_map[std::size_t(b)]; };
    q.results()[std::size_t(r)] = {map(from.out), map(from.dq), map(from.dkv)};
  }
  return q;
}

}  // namespace charm::ir
