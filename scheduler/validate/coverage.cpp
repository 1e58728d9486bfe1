// The coverage check (validator.hpp): symbolic execution per cell (owner, kv head, token part; one
// cell per buffer in a plain plan) in the replay order: every visible (q block, kv block) pair is
// computed exactly once and reaches its owner, backward gradients reach their owners, backward
// bundles are packed from final outputs, and no cell is read before it is written.
#include <fmt/format.h>

#include <array>
#include <variant>

#include "scheduler/ir/op_args.hpp"
#include "scheduler/validate/cell_store.hpp"
#include "scheduler/validate/check.hpp"
#include "scheduler/validate/interval_set.hpp"

namespace charm::sched::checks {

namespace {

class Coverage : Check {
 public:
  explicit Coverage(State& s) : Check(s) {}

  // Symbolic state per *cell* of a root buffer: (owner, kv head, token part)
  // (cell_store.hpp). The head dimension collapses to one cell when every
  // buffer holds all kv heads, the part dimension when Plan::parts is 1, so a
  // plain plan has one cell per buffer and cell = buffer id. Set elements are
  // kv blocks y * parts + part (Out, Dq cells) or query blocks x * parts + part (Dkv).
  /// Cell of (owner x, kv head g, part p) in root rt (region rr).
  std::size_t cell_at(BufferId rt, const Region& rr, std::int32_t x, std::int32_t g, std::int32_t p) const {
    if (!s_.regions) return std::size_t(rt);
    const std::size_t nh = s_.split_heads ? std::size_t(rr.heads()) : 1,
                      gi = s_.split_heads ? std::size_t(g - rr.head_begin) : 0;
    return s_.cell_base[std::size_t(rt)] + (std::size_t(x - rr.owner_begin) * nh + gi) * std::size_t(rr.parts()) +
           std::size_t(p - rr.part_begin);
  }
  /// The cells of b's root: cell(x, g, p) for an owner, head and part of the root's region.
  struct RootCells {
    const Coverage* v;
    BufferId rt;
    Region rr;
    std::size_t operator()(std::int32_t x, std::int32_t g, std::int32_t p) const { return v->cell_at(rt, rr, x, g, p); }
  };
  RootCells root_cells(BufferId b) const {
    const BufferId rt = root_of(b);
    return {this, rt, s_.regions ? reg(rt) : Region{}};
  }
  /// One past the last kv head a loop over region r visits (one head when heads collapse).
  std::int32_t head_end(const Region& r) const { return s_.split_heads ? r.head_end : r.head_begin + 1; }
  /// fn(cell, x, g, p) for every cell of region r (inside buffer b's region), in (owner, head, part) order.
  template <class Fn>
  void for_cells(BufferId b, const Region& r, Fn&& fn) const {
    if (!s_.regions) {
      fn(std::size_t(root_of(b)), r.owner_begin, r.head_begin, r.part_begin);
      return;
    }
    const RootCells cell = root_cells(b);
    for (std::int32_t x = r.owner_begin; x < r.owner_end; ++x)
      for (std::int32_t g = r.head_begin; g < head_end(r); ++g)
        for (std::int32_t p = r.part_begin; p < r.part_end; ++p) fn(cell(x, g, p), x, g, p);
  }
  /// for_cells over the whole of b's region.
  template <class Fn>
  void for_whole(BufferId b, Fn&& fn) const {
    if (!s_.regions)
      fn(std::size_t(b), p_.buffer(b).owner, 0, 0);
    else
      for_cells(b, reg(b), fn);
  }
  /// "buffer 7 (q[0-3]h1) owner 2 head 1 part 0", or "buffer 7 (q2)" in a plain plan.
  std::string cell_name(BufferId b, std::int32_t x, std::int32_t g, std::int32_t p) const {
    std::string s = label(b);
    if (!s_.regions) return s;
    s += fmt::format(" owner {}", x);
    if (s_.split_heads) s += fmt::format(" head {}", g);
    if (p_.parts > 1) s += fmt::format(" part {}", p);
    return s;
  }
  /// Whether (query part p, key part pk) of a shard pair with mask piece m (not
  /// Empty) has a visible pair. Within a pair of shards the answer depends only
  /// on the pair's piece (the order of its chunks), so one table of parts per
  /// piece, from the first pair (x, y) that has it, serves all pairs.
  bool visible(MaskPiece m, std::int32_t p, std::int32_t pk, RankId x, RankId y) {
    if (p_.parts == 1 || m == MaskPiece::Full) return true;
    // Documents and windows: the parts a pair sees depend on the pair itself, not on a shape.
    if (m == MaskPiece::Positions)
      return visible_pairs(p_.workload, p_.ranks, p_.parts, x, p, p + 1, y, pk, pk + 1) > 0;
    auto& t = part_table_[std::size_t(m)];
    const auto P = std::size_t(p_.parts);
    if (t.empty()) {
      t.resize(P * P);
      for (std::size_t a = 0; a < P; ++a)
        for (std::size_t c = 0; c < P; ++c)
          t[a * P + c] = visible_pairs(p_.workload, p_.ranks, p_.parts, x, std::int32_t(a), std::int32_t(a) + 1, y,
                                       std::int32_t(c), std::int32_t(c) + 1) > 0;
    }
    return t[std::size_t(p) * P + std::size_t(pk)] != 0;
  }
  /// Kv blocks (y * parts + pk) visible to query part p of x (Out and Dq cells), memoised.
  const IntervalSet& expected_kv(RankId x, std::int32_t p) { return expected(exp_kv_, x, p, true); }
  /// Query blocks (x * parts + p) that see key part pk of y (Dkv cells), memoised.
  const IntervalSet& expected_q(RankId y, std::int32_t pk) { return expected(exp_q_, y, pk, false); }
  const IntervalSet& expected(std::vector<std::pair<bool, IntervalSet>>& memo, RankId a, std::int32_t pa, bool kv) {
    const auto P = p_.parts;
    if (memo.empty()) memo.resize(std::size_t(p_.ranks) * std::size_t(P));
    auto& [done, s] = memo[std::size_t(a) * std::size_t(P) + std::size_t(pa)];
    if (done) return s;
    done = true;
    for (RankId b = 0; b < p_.ranks; ++b) {
      const MaskPiece m = kv ? p_.workload.mask(a, b, p_.ranks) : p_.workload.mask(b, a, p_.ranks);
      if (m == MaskPiece::Empty) continue;
      if (P == 1 || m == MaskPiece::Full) {
        s.append(b * P, b * P + P);
        continue;
      }
      for (std::int32_t pb = 0; pb < P; ++pb)
        if (kv ? visible(m, pa, pb, a, b) : visible(m, pb, pa, b, a)) s.append(b * P + pb, b * P + pb + 1);
    }
    return s;
  }
  /// Block e: "3", or in parts "3p1" (owner 3, part 1).
  std::string block(std::int32_t e) const {
    return p_.parts == 1 ? fmt::format("{}", e) : fmt::format("{}p{}", e / p_.parts, e % p_.parts);
  }
  /// Blocks of a set, "{0..3}" or, in parts, "{0p1,1p0..2p1}".
  std::string blocks(const IntervalSet& s) const {
    if (p_.parts == 1) return s.str();
    std::string out = "{";
    for (auto [lo, hi] : s.runs()) {
      if (out.size() > 1) out += ",";
      out += hi - lo == 1 ? block(lo) : block(lo) + ".." + block(hi - 1);
    }
    return out + "}";
  }
  std::string describe(const IntervalSet& have, const IntervalSet& want, const char* what) const {
    auto missing = want.minus(have), extra = have.minus(want);
    std::string s;
    if (!missing.empty()) s += fmt::format("missing {} {}", what, blocks(missing));
    if (!extra.empty()) s += fmt::format("{}unexpected {} {}", s.empty() ? "" : ", ", what, blocks(extra));
    return s;
  }

  // Reads of cells nothing wrote (head or part slices: owners are lifetime's).
  // One message per op and buffer.
  /// Reads cells r of b; false (and reported) if one was never written.
  bool reads(OpId id, BufferId b, const Region& r) {
    bool ok = true;
    for_cells(b, r, [&](std::size_t c, std::int32_t x, std::int32_t g, std::int32_t p) {
      ok = ok && written(id, b, c, x, g, p);
    });
    return ok;
  }
  /// Reads every cell of b (a plain plan's one cell inline).
  bool reads_all(OpId id, BufferId b) {
    return (!s_.regions && cells_[std::size_t(b)].written) || reads_all_slow(id, b);
  }
  bool reads_all_slow(OpId id, BufferId b) {
    bool ok = true;
    for_whole(b, [&](std::size_t c, std::int32_t x, std::int32_t g, std::int32_t p) {
      ok = ok && written(id, b, c, x, g, p);
    });
    return ok;
  }
  bool written(OpId id, BufferId b, std::size_t c, std::int32_t x, std::int32_t g, std::int32_t p) {
    if (cells_[c].written) return true;
    fail("coverage", fmt::format("{} reads {}, which nothing wrote", name(id), cell_name(b, x, g, p)), {id});
    return false;
  }

  /// Symbolic execution in the replay order of deadlock(), then every result cell judged.
  void run() {
    if (!ok()) return;  // replaying a racy plan proves nothing
    init_cells();
    // The replay order completes each send immediately before its receive
    // (deadlock()'s rendezvous), so a receive reads the send's buffer as the
    // send left it: nothing needs to be kept per message in flight.
    OpId prev = kNone;
    for (OpId id : s_.order) {
      if (full()) return;
      std::visit(Overloaded{
                     [&](const ComputeFwdArgs& c) { cover_compute(id, c.q, c.kv, c.out, kNone); },
                     [&](const ComputeBwdArgs& c) { cover_compute(id, c.qbundle, c.kv, c.dq, c.dkv); },
                     [&](const SendArgs& m) { (void)reads_all(id, m.src); },
                     [&](const RecvArgs& m) { cover_recv(id, m.dst, prev); },
                     [&](const MergeArgs& m) { cover_combine(id, m.partial, m.acc); },
                     [&](const AccumulateArgs& m) { cover_combine(id, m.partial, m.acc); },
                     [&](const PackArgs& k) { cover_pack(id, k); },
                     [&](const CopyArgs& c) { cover_copy(id, c.src, c.dst); },
                 },
                 args(p_.op(id)));
      prev = id;
    }
    final_checks();
  }

  /// Initialised buffers' cells are written; an Out input holds every kv block it sees.
  void init_cells() {
    const std::size_t nb = p_.buffers().size();
    cells_.reset(s_.regions ? s_.cell_base[nb] : nb, std::size_t(p_.ranks) * std::size_t(p_.parts), s_.regions);
    for (BufferId b = 0; b < BufferId(nb); ++b) {
      const Buffer& bf = p_.buffer(b);
      if (bf.init == BufInit::None) continue;  // views included: their cells are their root's
      for_whole(b, [&](std::size_t c, std::int32_t x, std::int32_t, std::int32_t p) {
        cells_[c].written = true;
        if (bf.init == BufInit::Input && bf.kind == BufKind::Out) cells_[c].set = expected_kv(x, p);
      });
    }
  }

  /// A compute (dkv is kNone forward): every pair it covers lands once in its accumulators.
  void cover_compute(OpId id, BufferId q, BufferId kv, BufferId acc, BufferId dkv) {
    const bool bwd = dkv != kNone;
    if (!reads_all(id, q) || !reads_all(id, kv) || !reads_all(id, acc) || (bwd && !reads_all(id, dkv))) return;
    if (!s_.regions) {
      cover_compute_plain(id, q, acc, dkv);
      return;
    }
    const Region rq = reg(q), rk = reg(kv);
    bool any = false, bundle_ok = true, twice = false;
    const RootCells qc = root_cells(q), ac = root_cells(acc);
    const auto P = p_.parts;
    for_visible_pairs<false>(rq, rk, [&](RankId x, RankId y, std::int32_t p, std::int32_t pk) {
      any = true;
      for (std::int32_t g = rq.head_begin; g < head_end(rq); ++g) {
        bundle_ok &= cells_[qc(x, g, p)].bundle_ok;
        if (!cells_.add(cells_[ac(x, g, p)], y * P + pk) && !twice) {
          twice = true;
          fail("coverage",
               fmt::format("pair (Q{}, KV{}) of {} is computed twice (again by {})", block(x * P + p),
                           block(y * P + pk), cell_name(acc, x, g, p), name(id)),
               {id});
        }
      }
    });
    if (!any) {
      fail("coverage", fmt::format("{} computes no pair the mask leaves visible", name(id)), {id});
      return;
    }
    if (bwd && !bundle_ok)
      fail("coverage", fmt::format("{} uses a backward bundle packed from an incomplete output", name(id)), {id});
    if (!bwd) return;
    const RootCells kc = root_cells(dkv);
    for_visible_pairs<true>(rq, rk, [&](RankId x, RankId y, std::int32_t p, std::int32_t pk) {
      for (std::int32_t g = rk.head_begin; g < head_end(rk); ++g)
        if (!cells_.add(cells_[kc(y, g, pk)], x * P + p) && !twice) {
          twice = true;
          fail("coverage",
               fmt::format("dK/dV pair (Q{}, KV{}) of {} is accumulated twice (again by {})", block(x * P + p),
                           block(y * P + pk), cell_name(dkv, y, g, pk), name(id)),
               {id});
        }
    });
  }
  /// Plain plans: one cell per buffer, the pair (q_owner, kv_owner).
  void cover_compute_plain(OpId id, BufferId q, BufferId acc, BufferId dkv) {
    const Op& o = p_.op(id);
    if (o.mask == MaskPiece::Empty) {
      fail("coverage", fmt::format("{} computes a pair the mask empties", name(id)), {id});
      return;
    }
    if (!cells_[std::size_t(q)].bundle_ok)
      fail("coverage", fmt::format("{} uses a backward bundle packed from an incomplete output", name(id)), {id});
    if (!cells_[std::size_t(acc)].set.insert(o.kv_owner))
      fail("coverage", fmt::format("pair (Q{}, KV{}) is computed twice (again by {})", o.q_owner, o.kv_owner, name(id)),
           {id});
    if (dkv != kNone && !cells_[std::size_t(dkv)].set.insert(o.q_owner))
      fail("coverage",
           fmt::format("dK/dV pair (Q{}, KV{}) is accumulated twice (again by {})", o.q_owner, o.kv_owner, name(id)),
           {id});
  }
  /// fn(x, y, p, pk) for every (query owner x part p, kv owner y part pk) pair of regions
  /// rq x rk the mask leaves visible: query side outer, or kv side outer (`kv_outer`, fixed per call site).
  template <bool kv_outer, class Fn>
  void for_visible_pairs(const Region& rq, const Region& rk, Fn&& fn) {
    const Region &ra = kv_outer ? rk : rq, &rb = kv_outer ? rq : rk;
    for (std::int32_t a = ra.owner_begin; a < ra.owner_end; ++a)
      for (std::int32_t b = rb.owner_begin; b < rb.owner_end; ++b) {
        const RankId x = kv_outer ? b : a, y = kv_outer ? a : b;
        const MaskPiece m = p_.workload.mask(x, y, p_.ranks);
        if (m == MaskPiece::Empty) continue;
        for (std::int32_t pa = ra.part_begin; pa < ra.part_end; ++pa)
          for (std::int32_t pb = rb.part_begin; pb < rb.part_end; ++pb) {
            const std::int32_t p = kv_outer ? pb : pa, pk = kv_outer ? pa : pb;
            if (visible(m, p, pk, x, y)) fn(x, y, p, pk);
          }
      }
  }

  /// A receive takes the state its send left (equal regions: matching).
  void cover_recv(OpId id, BufferId dst, OpId prev) {
    const OpId s = s_.index->partner(id);
    CHARM_ASSERT(s == prev, "the replay completes a send right before its receive");
    const BufferId src = std::get<SendArgs>(args(p_.op(s))).src;
    if (!s_.regions) {
      cells_[std::size_t(dst)] = cells_[std::size_t(root_of(src))];
      return;
    }
    const RootCells sc = root_cells(src);
    for_whole(dst, [&](std::size_t c, std::int32_t x, std::int32_t g, std::int32_t p) {
      cells_.assign(cells_[c], cells_[sc(x, g, p)]);
    });
  }

  /// Merge and Accumulate: acc gains the partial's blocks, none twice (equal regions: structure).
  void cover_combine(OpId id, BufferId partial, BufferId acc) {
    if (!reads_all(id, partial) || !reads_all(id, acc)) return;
    const RootCells pc = root_cells(partial);
    bool reported = false;
    for_whole(acc, [&](std::size_t c, std::int32_t x, std::int32_t g, std::int32_t p) {
      Cell& part = cells_[pc(x, g, p)];
      auto overlap = s_.regions ? cells_.merge(cells_[c], part) : cells_[c].set.merge(part.set);
      if (!overlap.empty() && !reported) {
        reported = true;
        fail("coverage",
             fmt::format("{} combines pairs already present: {} of {} counted twice", name(id), blocks(overlap),
                         s_.regions ? cell_name(acc, x, g, p) : buffer_label(p_, acc)),
             {id});
      }
    });
  }

  /// The backward bundle is packed from a final output (equal regions: structure).
  void cover_pack(OpId id, const PackArgs& k) {
    if (!reads_all(id, k.q) || !reads_all(id, k.dout) || !reads_all(id, k.out)) return;
    const RootCells oc = root_cells(k.out);
    bool reported = false;
    for_whole(k.qbundle, [&](std::size_t c, std::int32_t x, std::int32_t g, std::int32_t p) {
      const Cell& have = cells_[oc(x, g, p)];
      const auto& want = expected_kv(x, p);
      const bool ok = cells_.same_blocks(have, want);
      if (!ok && !reported) {
        reported = true;
        fail("coverage",
             fmt::format("{} packs the backward bundle from an output that is not final{}: {}", name(id),
                         s_.regions ? " (" + cell_name(k.out, x, g, p) + ")" : "",
                         describe(cells_.blocks_of(have), want, "kv blocks")),
             {id});
      }
      cells_[c].bundle_ok = ok;
      cells_[c].written = true;
    });
  }

  /// A plain copy moves the overlap of the two regions.
  void cover_copy(OpId id, BufferId src, BufferId dst) {
    if (!s_.regions) {
      if (reads_all(id, src)) cells_[std::size_t(dst)] = cells_[std::size_t(src)];
      return;
    }
    const Region r = reg(src).intersect(reg(dst));
    if (!reads(id, src, r)) return;
    const RootCells sc = root_cells(src);
    for_cells(dst, r, [&](std::size_t c, std::int32_t x, std::int32_t g, std::int32_t p) {
      cells_.assign(cells_[c], cells_[sc(x, g, p)]);
    });
  }

  /// Every cell of every result (whole shards of their rank: structure).
  void final_checks() {
    const auto pass = p_.workload.pass;
    for (RankId r = 0; r < p_.ranks && !full(); ++r) {
      const auto& res = p_.results()[std::size_t(r)];
      if (pass == PassKind::Fwd || pass == PassKind::Both) final_check(r, res.out, "output", "kv blocks", false);
      if (pass != PassKind::Fwd) {
        final_check(r, res.dq, "dQ", "kv blocks", false);
        final_check(r, res.dkv, "dK/dV", "query blocks", true);
      }
    }
  }
  void final_check(RankId r, BufferId b, const char* what, const char* of, bool dkv) {
    for_whole(b, [&](std::size_t c, std::int32_t, std::int32_t g, std::int32_t p) {
      if (full()) return;
      std::string where;
      if (s_.split_heads) where += fmt::format(" head {}", g);
      if (p_.parts > 1) where += fmt::format(" part {}", p);
      const auto& want = dkv ? expected_q(r, p) : expected_kv(r, p);
      const Cell& have = cells_[c];
      if (!have.written)
        fail("coverage",
             fmt::format("rank {}: final {}{} is never written: {}", r, what, where, describe(have.set, want, of)));
      else if (!cells_.same_blocks(have, want))
        fail("coverage", fmt::format("rank {}: final {}{}{}", r, what, where.empty() ? " " : where + ": ",
                                     describe(cells_.blocks_of(have), want, of)));
    });
  }

 private:
  CellStore cells_;
  // Per mask piece of a shape (Positions is computed pair by pair): visible (q part, kv part).
  std::array<std::vector<char>, std::size_t(MaskPiece::Positions)> part_table_;
  std::vector<std::pair<bool, IntervalSet>> exp_kv_, exp_q_;
};

}  // namespace

void check_coverage(State& s) { Coverage(s).run(); }

}  // namespace charm::sched::checks
