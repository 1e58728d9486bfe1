#include "scheduler/ir/symmetry.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>
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

Status check_block_symmetry(const RankSymmetry& s, const BlockSymmetry& b, int ranks) {
  if (auto st = check_symmetry_shape(s, ranks); !st) return st;
  const auto refuse = [&](const std::string& why) {
    return Error{"symmetry", fmt::format("topology '{}' cannot run a quotient plan ({} symmetry in blocks of {} "
                                         "rank{}): {}",
                                         b.machine, to_string(s.kind), s.block, s.block == 1 ? "" : "s", why)};
  };
  if (!b.routes_by_block) return refuse("its routes are a GPU-by-GPU table, not copies of one block's");
  if (b.overrides_routes) return refuse("it overrides routes");
  if (s.block % b.gpus != 0 || ranks % b.gpus != 0)
    return refuse(fmt::format("its blocks of {} GPUs do not tile the classes", b.gpus));
  if (s.kind == RankSymmetry::Kind::Xor && !power_of_two(b.gpus))
    return refuse(fmt::format("xor maps blocks of {} GPUs to none", b.gpus));
  // Two blocks of one class would share a representative channel that a route between them crossed twice.
  if (!b.routes_cross_each_channel_once)
    return refuse("a route between two of its blocks crosses one link of both blocks' copies");
  return {};
}

Expected<RankSymmetry> coarsen_to_blocks(const RankSymmetry& plan_sym, const BlockSymmetry& b, int ranks) {
  if (!plan_sym.active()) return plan_sym;  // nothing to coarsen
  RankSymmetry s = plan_sym;
  if (b.gpus >= 1) s.block = std::lcm(plan_sym.block, b.gpus);  // else check refuses: no blocks
  if (auto st = check_block_symmetry(s, b, ranks); !st) return st.error();
  return s;
}

namespace {

/// Where every op and buffer sits on its rank: what check_symmetric compares by.
struct RankIndex {
  std::vector<std::vector<OpId>> lane;      // by rank * kNumStreams + stream: ops in order
  std::vector<std::int32_t> unit;           // by op: its unit in its lane (a group, or the op alone)
  std::vector<std::vector<BufferId>> bufs;  // by rank: buffers in creation order
  std::vector<std::int32_t> local;          // by buffer: its place among its rank's
  [[nodiscard]] const std::vector<OpId>& at(RankId r, int stream) const {
    return lane[std::size_t(r) * kNumStreams + std::size_t(stream)];
  }
};

bool zigzag_half(MaskPiece m) { return m == MaskPiece::ZigzagKvHead || m == MaskPiece::ZigzagQTail; }

bool same_group(const Op& a, const Op& b) { return is_comm(a) && is_comm(b) && a.group >= 0 && a.group == b.group; }

RankIndex index_ranks(const Plan& p) {
  RankIndex x;
  const auto N = std::size_t(p.ranks);
  x.lane.resize(N * kNumStreams);
  x.unit.assign(p.size(), 0);
  for (OpId id = 0; id < OpId(p.size()); ++id) {
    const Op& o = p.op(id);
    auto& lane = x.lane[std::size_t(o.rank) * kNumStreams + std::size_t(o.stream)];
    const bool joins = !lane.empty() && same_group(p.op(lane.back()), o);
    x.unit[std::size_t(id)] = lane.empty() ? 0 : x.unit[std::size_t(lane.back())] + (joins ? 0 : 1);
    lane.push_back(id);
  }
  x.bufs.resize(N);
  x.local.assign(p.buffers().size(), 0);
  for (BufferId b = 0; b < BufferId(p.buffers().size()); ++b) {
    auto& list = x.bufs[std::size_t(p.buffer(b).rank)];
    x.local[std::size_t(b)] = std::int32_t(list.size());
    list.push_back(b);
  }
  return x;
}

/// Compares a representative's plan with another rank's under the element that maps one onto the other.
/// Buffers are paired as the ops, results, views and reuses reach them: a pair must agree in content
/// (mapped), and no buffer pairs with two.
class SymmetryCheck {
 public:
  SymmetryCheck(const Plan& p, const RankSymmetry& s) : p_(p), s_(s), x_(index_ranks(p)) {}

  Status run() {
    for (RankId r = s_.block; r < p_.ranks; ++r) {
      rep_ = s_.rep(r);
      r_ = r;
      g_ = s_.element(r);
      std::string why = start_pairing();
      if (why.empty()) why = results();
      for (int st = 0; st < kNumStreams && why.empty(); ++st) why = lane(st);
      if (why.empty()) why = unpaired();
      if (!why.empty())
        return Error{"symmetry", fmt::format("rank {} is not the image of rank {} under {} symmetry, block {}: {}", r,
                                             rep_, to_string(s_.kind), s_.block, why)};
    }
    return {};
  }

 private:
  [[nodiscard]] RankId map(RankId x) const { return x == kNone ? kNone : s_.apply(g_, x, p_.ranks); }
  [[nodiscard]] std::size_t local(BufferId b) const { return std::size_t(x_.local[std::size_t(b)]); }

  /// Whether owners [a, a + n) map onto [b, b + n) as a set.
  [[nodiscard]] bool owners_map(RankId a, RankId b, std::int32_t n) const {
    if (n == 1) return map(a) == b;
    for (RankId o = a; o < a + n; ++o)
      if (const RankId m = map(o); m < b || m >= b + n) return false;
    return true;
  }

  /// What differs between buffer b and the image of a, parent and reuse aside ("" if nothing).
  [[nodiscard]] std::string content_differs(const Buffer& a, const Buffer& b) const {
    if (a.kind != b.kind || a.init != b.init || a.bytes != b.bytes) return "kind, init or bytes";
    if (a.owners != b.owners || !owners_map(a.owner, b.owner, a.owners)) return "owners";
    if ((a.head_begin != b.head_begin && !s_.heads_are_labels) || a.heads != b.heads || a.part_begin != b.part_begin ||
        a.parts != b.parts)
      return "heads or parts";
    if ((a.parent == kNone) != (b.parent == kNone) || (a.reuse == kNone) != (b.reuse == kNone))
      return "parent or reuse";
    return {};
  }

  std::string start_pairing() {
    const auto na = x_.bufs[std::size_t(rep_)].size(), nb = x_.bufs[std::size_t(r_)].size();
    if (na != nb) return fmt::format("{} buffers, not {}", nb, na);
    image_.assign(na, kNone);
    preimage_.assign(nb, kNone);
    return {};
  }

  /// Pairs the representative's buffer a with b (and their parents and reuses), or says why not.
  std::string pair(BufferId a, BufferId b) {
    while (a != kNone || b != kNone) {
      if (a == kNone || b == kNone) return "a buffer where the image has none, or none where it has one";
      BufferId& ia = image_[local(a)];
      if (ia == b) return {};
      if (ia != kNone || preimage_[local(b)] != kNone)
        return fmt::format("{} stands for two buffers of rank {}", buffer_label(p_, ia != kNone ? a : b), rep_);
      ia = b;
      preimage_[local(b)] = a;
      const Buffer &ba = p_.buffer(a), &bb = p_.buffer(b);
      if (auto why = content_differs(ba, bb); !why.empty())
        return fmt::format("{} differs in {} from the image of {}", buffer_label(p_, b), why, buffer_label(p_, a));
      if (auto why = pair(ba.parent, bb.parent); !why.empty()) return why;
      a = ba.reuse;  // a reuse chain can be long: followed in the loop
      b = bb.reuse;
    }
    return {};
  }

  std::string results() {
    const RankResults &a = p_.results()[std::size_t(rep_)], &b = p_.results()[std::size_t(r_)];
    for (auto [x, y] : {std::pair{a.out, b.out}, std::pair{a.dq, b.dq}, std::pair{a.dkv, b.dkv}})
      if (auto why = pair(x, y); !why.empty()) return "results: " + why;
    return {};
  }

  /// Buffers no op, result, view or reuse reaches: the same contents (mapped) on both ranks.
  std::string unpaired() {
    using Key = std::tuple<int, int, Bytes, std::int32_t, RankId, std::int32_t, std::int32_t, std::int32_t,
                           std::int32_t, bool, bool>;
    auto key = [&](const Buffer& b, bool mapped) {
      RankId first = b.owner;
      if (mapped) {
        first = map(b.owner);
        for (RankId o = b.owner; o < b.owner + b.owners; ++o) first = std::min(first, map(o));
      }
      const std::int32_t head_begin = s_.heads_are_labels ? 0 : b.head_begin;
      return Key{int(b.kind), int(b.init),  b.bytes, b.owners,          first,           head_begin,
                 b.heads,     b.part_begin, b.parts, b.parent != kNone, b.reuse != kNone};
    };
    std::vector<Key> ka, kb;
    for (BufferId a : x_.bufs[std::size_t(rep_)])
      if (image_[local(a)] == kNone) ka.push_back(key(p_.buffer(a), true));
    for (BufferId b : x_.bufs[std::size_t(r_)])
      if (preimage_[local(b)] == kNone) kb.push_back(key(p_.buffer(b), false));
    std::sort(ka.begin(), ka.end());
    std::sort(kb.begin(), kb.end());
    return ka == kb ? std::string() : std::string("its buffers that no op uses differ");
  }

  /// Dependencies as (stream, unit) on their rank, sorted.
  [[nodiscard]] std::vector<std::pair<int, std::int32_t>> deps(OpId id) const {
    std::vector<std::pair<int, std::int32_t>> d;
    for (OpId x : p_.deps(id)) d.emplace_back(int(p_.op(x).stream), x_.unit[std::size_t(x)]);
    std::sort(d.begin(), d.end());
    d.erase(std::unique(d.begin(), d.end()), d.end());
    return d;
  }

  /// The first field in which op b is not the image of the representative's op a ("" if none).
  std::string op_differs(OpId ia, OpId ib) {
    const Op &a = p_.op(ia), &b = p_.op(ib);
    if (a.kind != b.kind || a.phase != b.phase) return "kind or phase";
    if (a.mask != b.mask && !(s_.zigzag_halves_alike && zigzag_half(a.mask) && zigzag_half(b.mask))) return "mask";
    if (is_comm(a) && (map(a.peer) != b.peer || a.tag != b.tag)) return "peer or tag";
    if ((a.group == kNone) != (b.group == kNone)) return "group";
    if (a.kind == OpKind::Compute ? a.flops != b.flops : a.bytes != b.bytes) return "bytes or flops";
    for (int k = 0; k < 4; ++k)
      if (auto why = pair(a.buf[k], b.buf[k]); !why.empty()) return fmt::format("buffer {}: {}", k, why);
    // A region's first owner need not map to the image's first: its buffer's owner set is compared instead.
    auto owner_ok = [&](RankId oa, RankId ob, BufferId buf) {
      return buf == kNone || p_.buffer(buf).owners != 1 || map(oa) == ob;
    };
    if (a.kind == OpKind::Compute &&
        (!owner_ok(a.q_owner, b.q_owner, a.buf[0]) || !owner_ok(a.kv_owner, b.kv_owner, a.buf[1])))
      return "q or kv owner";
    if (deps(ia) != deps(ib)) return "dependencies";
    return {};
  }

  /// Compares the units [ua, ua + n) and [ub, ub + n) of the two lanes: a group as a set.
  std::string unit_differs(const std::vector<OpId>& la, std::size_t ua, const std::vector<OpId>& lb, std::size_t ub,
                           std::size_t n) {
    if (n == 1) return op_differs(la[ua], lb[ub]);
    std::vector<bool> used(n, false);
    for (std::size_t i = 0; i < n; ++i) {
      const Op& a = p_.op(la[ua + i]);
      std::size_t j = 0;
      while (j < n && (used[j] || p_.op(lb[ub + j]).kind != a.kind || p_.op(lb[ub + j]).peer != map(a.peer) ||
                       p_.op(lb[ub + j]).tag != a.tag))
        ++j;
      if (j == n) return fmt::format("its group holds no image of {}", op_label(p_, la[ua + i]));
      used[j] = true;
      if (auto why = op_differs(la[ua + i], lb[ub + j]); !why.empty())
        return fmt::format("{}: {} (image of {})", op_label(p_, lb[ub + j]), why, op_label(p_, la[ua + i]));
    }
    return {};
  }

  std::string lane(int st) {
    const auto &la = x_.at(rep_, st), &lb = x_.at(r_, st);
    const auto stream = to_string(Stream(st));
    auto unit_size = [&](const std::vector<OpId>& l, std::size_t i) {  // the unit at i: the op, or its group
      std::size_t n = 1;
      while (i + n < l.size() && x_.unit[std::size_t(l[i + n])] == x_.unit[std::size_t(l[i])]) ++n;
      return n;
    };
    std::size_t i = 0;
    for (; i < la.size() && i < lb.size();) {
      const std::size_t n = unit_size(la, i);
      if (unit_size(lb, i) != n)
        return fmt::format("stream {} op {} ({}): a group of {}, not {}", stream, i, op_label(p_, lb[i]),
                           unit_size(lb, i), n);
      if (auto why = unit_differs(la, i, lb, i, n); !why.empty())
        return fmt::format("stream {} op {} ({}): {}", stream, i, n == 1 ? op_label(p_, lb[i]) : "a group", why);
      i += n;
    }
    if (i < lb.size())
      return fmt::format("stream {} op {} ({}): rank {} has no op there", stream, i, op_label(p_, lb[i]), rep_);
    if (i < la.size())
      return fmt::format("stream {} op {}: none where the image of {} would be", stream, i, op_label(p_, la[i]));
    return {};
  }

  const Plan& p_;
  RankSymmetry s_;
  RankIndex x_;
  RankId rep_ = 0, r_ = 0, g_ = 0;
  std::vector<BufferId> image_;     // by the representative's buffer (local): its pair on r_
  std::vector<BufferId> preimage_;  // by r_'s buffer (local): its pair on the representative
};

}  // namespace

Status check_symmetric(const Plan& full, const RankSymmetry& s) {
  if (full.symmetry.active()) return Error{"symmetry", "the plan is a quotient already"};
  if (!s.active()) return Error{"symmetry", "no symmetry to check"};
  if (auto st = check_symmetry_shape(s, full.ranks); !st) return st;
  if (full.results().size() != std::size_t(full.ranks)) return Error{"symmetry", "the plan has no result per rank"};
  return SymmetryCheck(full, s).run();
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
  q.groups = full.groups;
  q.gpus = full.gpus;
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
