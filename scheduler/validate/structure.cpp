// The structure check (validator.hpp): ops, buffers and results are well formed, and the region
// rules of plan.hpp hold. It also learns which region features the plan uses (State), so that the
// later checks of a plain plan pay for none.
#include <fmt/format.h>

#include <limits>
#include <variant>

#include "scheduler/ir/buffer_rules.hpp"
#include "scheduler/ir/op_args.hpp"
#include "scheduler/validate/check.hpp"

namespace charm::sched::checks {

namespace {

class Structure : Check {
 public:
  explicit Structure(State& s) : Check(s) {}

  static bool plain(const Buffer& b) {
    return b.owners == 1 && b.head_begin == 0 && b.heads == 0 && b.part_begin == 0 && b.parts == 0 && b.parent == kNone;
  }

  /// The rules of one buffer (ir::check_buffer); also notes which region features the plan uses.
  void check_buffer(BufferId b) {
    if (auto st = ir::check_buffer(p_, b); !st) {
      fail("structure", st.error().message());
      return;
    }
    const Buffer& bf = p_.buffer(b);
    if (plain(bf)) return;
    s_.regions = true;
    s_.split_heads |= reg(b).heads() != s_.kv_heads;
    s_.views |= bf.parent != kNone;
  }

  /// Ranks, results list, workload and parts: region sizes, masks and cells are computed from them.
  bool check_plan_shape() {
    const int R = p_.ranks;
    if (R < 1) {
      fail("structure", "plan has no ranks");
      return false;
    }
    if (p_.results().size() != std::size_t(R)) {
      fail("structure", fmt::format("results list {} ranks, plan has {}", p_.results().size(), R));
      return false;
    }
    if (auto s = p_.workload.check(R); !s) {
      fail("structure", "workload: " + s.error().message());
      return false;
    }
    const std::int64_t shard = p_.workload.seq / R;
    if (p_.parts < 1 || shard % p_.parts != 0 ||
        std::int64_t(R) * p_.parts > std::numeric_limits<std::int32_t>::max()) {
      fail("structure",
           fmt::format("plan counts {} token parts per shard, which must be >= 1 and divide the shard's {} tokens",
                       p_.parts, shard));
      return false;
    }
    return true;
  }

  bool run() {
    if (!check_plan_shape()) return false;
    s_.kv_heads = static_cast<std::int32_t>(p_.workload.kv_heads);
    s_.regions = p_.parts != 1;
    for (BufferId b = 0; b < BufferId(p_.buffers().size()); ++b) check_buffer(b);
    if (!ok()) return false;  // the op rules below read regions and follow views
    if (s_.regions && !count_cells()) return false;
    for (OpId id = 0; id < OpId(n_); ++id) check_op(id);
    check_results();
    if (ok()) check_reuse_structure();
    return ok();
  }

  /// Equal regions of a and b, else a structure violation of op id naming `what`.
  bool same(OpId id, BufferId a, BufferId b, const char* what) {
    if (same_region(a, b)) return true;
    fail("structure", fmt::format("{}: {} {} and {} differ", name(id), what, buffer_label(p_, a), buffer_label(p_, b)),
         {id});
    return false;
  }

  /// One op: its rank, dependencies, buffer slots (ir::decode) and the rules of its kind.
  void check_op(OpId id) {
    const Op& o = p_.op(id);
    if (o.rank < 0 || o.rank >= p_.ranks) {
      fail("structure", fmt::format("op {} has rank {} out of range", id, o.rank), {id});
      return;
    }
    for (OpId d : p_.deps(id)) {
      if (d < 0 || d >= OpId(n_)) {
        fail("structure", fmt::format("op {} depends on missing op {}", id, d), {id});
        continue;
      }
      if (d == id)
        fail("structure", fmt::format("{} depends on itself", name(id)), {id});
      else if (p_.op(d).rank != o.rank)
        fail("structure",
             fmt::format("{} depends on {} of another rank (ranks meet only through messages)", name(id), name(d)),
             {id, d});
    }
    if (is_comm(o)) {
      if (o.peer < 0 || o.peer >= p_.ranks || o.peer == o.rank)
        fail("structure", fmt::format("{}: bad peer {}", name(id), o.peer), {id});
      if (o.stream == Stream::Compute)
        fail("structure", fmt::format("{}: messages travel on comm streams, not compute", name(id)), {id});
      if (o.peer < 0 || o.peer >= p_.ranks || o.peer == o.rank) return;
    }
    auto a = decode(p_, id);
    if (!a) {
      fail("structure", fmt::format("{}: {}", name(id), a.error().what), {id});
      return;
    }
    std::visit(Overloaded{
                   [&](const ComputeFwdArgs& c) { check_compute(id, c.q, c.kv, c.out, kNone); },
                   [&](const ComputeBwdArgs& c) { check_compute(id, c.qbundle, c.kv, c.dq, c.dkv); },
                   [&](const SendArgs&) {},
                   [&](const RecvArgs&) {},
                   [&](const MergeArgs& m) { same(id, m.partial, m.acc, "merges outputs"); },
                   [&](const AccumulateArgs& m) {
                     if (!same_region(m.partial, m.acc))
                       fail("structure",
                            fmt::format("{}: accumulates a {} into a {}", name(id), buffer_label(p_, m.partial),
                                        buffer_label(p_, m.acc)),
                            {id});
                   },
                   [&](const PackArgs& k) {
                     same(id, k.q, k.dout, "packs tensors of different regions:") &&
                         same(id, k.q, k.out, "packs tensors of different regions:") &&
                         same(id, k.q, k.qbundle, "packs tensors of different regions:");
                   },
                   [&](const CopyArgs& c) {
                     if (s_.regions ? !reg(c.src).contains(reg(c.dst)) && !reg(c.dst).contains(reg(c.src))
                                    : !same_region(c.src, c.dst))
                       fail("structure",
                            fmt::format("{}: neither region of {} and {} contains the other", name(id),
                                        buffer_label(p_, c.src), buffer_label(p_, c.dst)),
                            {id});
                   },
               },
               *a);
  }

  /// A compute's blocks, regions, heads and mask piece (dkv is kNone forward).
  void check_compute(OpId id, BufferId q, BufferId kv, BufferId acc, BufferId dkv) {
    const Op& o = p_.op(id);
    const bool fwd = dkv == kNone;
    const Buffer &bq = p_.buffer(q), &bk = p_.buffer(kv);
    if (o.q_owner != bq.owner || o.kv_owner != bk.owner)
      fail("structure", fmt::format("{}: q/kv blocks do not match its buffers' owners", name(id)), {id});
    if (!same_region(acc, q) || (!fwd && !same_region(dkv, kv))) {
      fail("structure",
           fmt::format("{}: accumulates into a buffer of another region (q {}, kv {}, accumulators {}{}{})", name(id),
                       buffer_label(p_, q), buffer_label(p_, kv), buffer_label(p_, acc), fwd ? "" : ", ",
                       fwd ? "" : buffer_label(p_, dkv)),
           {id});
      return;
    }
    if (s_.regions && (bq.head_begin != bk.head_begin || reg(q).head_end != reg(kv).head_end)) {
      fail("structure",
           fmt::format("{}: q {} and kv {} cover different kv heads", name(id), buffer_label(p_, q),
                       buffer_label(p_, kv)),
           {id});
      return;
    }
    const MaskPiece want =
        bq.owners == 1 && bk.owners == 1 ? p_.workload.mask(o.q_owner, o.kv_owner, p_.ranks) : MaskPiece::Mixed;
    if (o.mask != want)
      fail("structure",
           fmt::format("{}: mask piece {} but the workload gives {}", name(id), to_string(o.mask), to_string(want)),
           {id});
  }

  /// Each rank's result buffers: its own whole shards of the kinds its pass produces.
  void check_results() {
    const auto nb = static_cast<BufferId>(p_.buffers().size());
    const auto pass = p_.workload.pass;
    for (int r = 0; r < p_.ranks; ++r) {
      const auto& res = p_.results()[std::size_t(r)];
      auto check = [&](BufferId b, BufKind kind, const char* what) {
        if (b < 0 || b >= nb) {
          fail("structure", fmt::format("rank {} names no {} result buffer", r, what));
          return;
        }
        const Buffer& bf = p_.buffer(b);
        if (bf.rank != r || bf.owner != r || bf.kind != kind)
          fail("structure", fmt::format("rank {}: its {} result is buffer {} ({} of {} on rank {})", r, what, b,
                                        to_string(bf.kind), bf.owner, bf.rank));
        else if (!is_whole_shard(p_, b, r))
          fail("structure",
               fmt::format("rank {}: its {} result is {}, not the whole shard of rank {}", r, what, label(b), r));
      };
      if (pass != PassKind::Bwd) check(res.out, BufKind::Out, "out");
      if (pass != PassKind::Fwd) {
        check(res.dq, BufKind::Dq, "dq");
        check(res.dkv, BufKind::Dkv, "dkv");
      }
    }
  }

  /// Storage reuse: a chain of plain-or-region root buffers of one rank, each
  /// reused at most once, never an Input, a view or a result, none larger than
  /// the storage (the chain's first buffer).
  void check_reuse_structure() {
    const auto nb = static_cast<BufferId>(p_.buffers().size());
    std::vector<char> is_result(std::size_t(nb), 0), reused(std::size_t(nb), 0);
    std::vector<BufferId> first(static_cast<std::size_t>(nb));  // each buffer's storage: its chain's first buffer
    for (BufferId b = 0; b < nb; ++b) {
      const BufferId a = p_.buffer(b).reuse;
      first[std::size_t(b)] = a >= 0 && a < b ? first[std::size_t(a)] : b;  // a bad link is reported below
    }
    for (const auto& res : p_.results())
      for (BufferId b : {res.out, res.dq, res.dkv})
        if (b >= 0 && b < nb) is_result[std::size_t(b)] = 1;
    for (BufferId b = 0; b < nb && !full(); ++b) {
      const Buffer& bf = p_.buffer(b);
      if (bf.reuse == kNone) continue;
      s_.reuses = true;
      const BufferId a = bf.reuse;
      if (a < 0 || a >= b) {
        fail("structure", fmt::format("{} reuses buffer {}, which is not an earlier buffer", label(b), a));
        continue;
      }
      const Buffer& ab = p_.buffer(a);
      const char* why =
          ab.rank != bf.rank                                       ? "of another rank"
          : ab.parent != kNone || bf.parent != kNone               ? "a view (only whole storage is reused)"
          : ab.init == BufInit::Input || bf.init == BufInit::Input ? "an input (inputs live for the whole plan)"
          : is_result[std::size_t(a)]                              ? "a result (results live to the end)"
          : p_.buffer(first[std::size_t(a)]).bytes < bf.bytes ? "in a storage smaller than the buffer that reuses it"
          : reused[std::size_t(a)]                            ? "reused twice (storage passes along one chain)"
                                                              : nullptr;
      if (why != nullptr) fail("structure", fmt::format("{} reuses {}, which is {}", label(b), label(a), why));
      reused[std::size_t(a)] = 1;
    }
  }

  // The cells the coverage check tracks: (owner, kv head, token part) of every root buffer
  // (cell_store.hpp); a plan with more than the validator can track is refused here.
  static constexpr std::int64_t kMaxCells = std::int64_t{1} << 25;

  /// Cell offsets of the roots (s_.regions only); false (structure) past kMaxCells.
  bool count_cells() {
    const auto nb = p_.buffers().size();
    s_.cell_base.assign(nb + 1, 0);
    std::int64_t total = 0;
    for (std::size_t b = 0; b < nb; ++b) {
      s_.cell_base[b] = std::uint32_t(total);
      if (p_.buffer(BufferId(b)).parent != kNone) continue;
      const Region r = reg(BufferId(b));
      total += std::int64_t(r.owners()) * (s_.split_heads ? r.heads() : 1) * r.parts();
      if (total > kMaxCells) {
        fail("structure",
             fmt::format("the buffers hold more than {} (owner, kv head, part) cells, more than the validator tracks",
                         kMaxCells));
        return false;
      }
    }
    s_.cell_base[nb] = std::uint32_t(total);
    return true;
  }
};

}  // namespace

bool check_structure(State& s) { return Structure(s).run(); }

}  // namespace charm::sched::checks
