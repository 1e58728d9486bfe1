// The lifetime check (validator.hpp): on its rank, every write to a buffer's storage is ordered
// against every other access to the same owners of it, nothing is read before it is written, and
// reused storage is free when it is taken over. Ordering is happens-before over the replay order.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <span>

#include "scheduler/ir/op_args.hpp"
#include "scheduler/validate/check.hpp"

namespace charm::sched::checks {

namespace {

class Lifetime : Check {
 public:
  explicit Lifetime(State& s) : Check(s) {}

  void run() {
    happens_before();
    lifetime();
  }

 private:
  /// A root buffer, or one owner of it.
  std::string storage(BufferId b, RankId owner) const {
    return owner == kNone ? label(b) : fmt::format("{} owner {}", label(b), owner);
  }

  // ---------------------------------------------------------- happens-before
  // Per-op vector clocks over the streams of its own rank: vc[s] = how many
  // ops of stream s are known to have completed when the op has completed.
  void happens_before() {
    vc_.assign(n_, {});
    for (OpId id : s_.order) {
      auto& v = vc_[std::size_t(id)];
      auto absorb = [&](OpId d) {
        const auto& dv = vc_[std::size_t(d)];
        for (int s = 0; s < kNumStreams; ++s) v[std::size_t(s)] = std::max(v[std::size_t(s)], dv[std::size_t(s)]);
      };
      for (OpId d : p_.deps(id)) absorb(d);
      auto [b, e] = prev_group(id);
      for (std::uint32_t k = b; k < e; ++k) absorb(s_.index->at(k));
      auto& mine = v[std::size_t(p_.op(id).stream)];
      mine = std::max(mine, s_.index->pos(id) + 1);
    }
  }
  /// a happens before b; both on one rank (the accesses of one buffer).
  bool hb(OpId a, OpId b) const {
    if (a == b) return true;
    // One stream: a is in an earlier group than b (members of one ncclGroup
    // may complete in any order; a lone op is a group of its own).
    if (p_.op(a).stream == p_.op(b).stream) return s_.index->pos(a) < s_.index->group_begin(b);
    return vc_[std::size_t(b)][std::size_t(p_.op(a).stream)] >= s_.index->pos(a) + 1;
  }

  // --------------------------------------------------------------- lifetime
  // Accesses per storage (root buffer: a view's accesses are its root's) in
  // CSR form, filled in replay order, so each root's list is already sorted by
  // time (one op's own accesses in slot order) and no buffer needs a vector
  // of its own. A root over several owners is checked owner by owner: ops
  // touching disjoint owner ranges of it (receives into different views)
  // never conflict.
  struct Access {
    OpId op;
    std::uint8_t slot;
    bool write;
  };
  struct Accesses {
    std::vector<std::uint32_t> begin;  // per buffer (roots only hold any)
    std::vector<Access> all;
    [[nodiscard]] std::span<const Access> of(BufferId b) const {
      return {all.data() + begin[std::size_t(b)], all.data() + begin[std::size_t(b) + 1]};
    }
  };
  Accesses accesses() const {
    const std::size_t nb = p_.buffers().size();
    Accesses ac;
    ac.begin.assign(nb + 1, 0);
    for (const Op& o : p_.ops())
      for_each_access(o, [&](BufferId b, int, bool) { ++ac.begin[std::size_t(root_of(b)) + 1]; });
    for (std::size_t b = 0; b < nb; ++b) ac.begin[b + 1] += ac.begin[b];
    ac.all.resize(ac.begin[nb]);
    auto fill = ac.begin;
    for (OpId id : s_.order)
      for_each_access(p_.op(id), [&](BufferId b, int s, bool w) {
        ac.all[fill[std::size_t(root_of(b))]++] = {id, std::uint8_t(s), w};
      });
    return ac;
  }

  void lifetime() {
    const Accesses ac = accesses();
    if (s_.reuses) check_reuse_order(ac);
    std::vector<std::uint32_t> obegin;  // per owner of one root: its accesses, in time order
    std::vector<Access> by_owner;
    for (BufferId b = 0; b < BufferId(p_.buffers().size()) && !full(); ++b) {
      const std::span<const Access> a = ac.of(b);
      if (a.empty()) continue;
      const Buffer& rb = p_.buffer(b);
      if (!s_.regions || rb.owners == 1) {
        check_storage(b, kNone, a);
        continue;
      }
      auto range = [&](const Access& x) {
        const Buffer& v = p_.buffer(p_.op(x.op).buf[x.slot]);
        return std::pair{v.owner - rb.owner, v.owner - rb.owner + v.owners};
      };
      obegin.assign(std::size_t(rb.owners) + 1, 0);
      for (const Access& x : a)
        for (auto [o0, o1] = range(x); o0 < o1; ++o0) ++obegin[std::size_t(o0) + 1];
      for (std::size_t k = 0; k + 1 < obegin.size(); ++k) obegin[k + 1] += obegin[k];
      by_owner.resize(obegin.back());
      auto fill = obegin;
      for (const Access& x : a)
        for (auto [o0, o1] = range(x); o0 < o1; ++o0) by_owner[fill[std::size_t(o0)]++] = x;
      for (std::int32_t k = 0; k < rb.owners; ++k)
        if (!check_storage(b, rb.owner + k,
                           std::span<const Access>(by_owner.data() + obegin[std::size_t(k)],
                                                   by_owner.data() + obegin[std::size_t(k) + 1])))
          break;
    }
  }

  // Storage reuse: every access of the reused buffer happens before the
  // first access of the buffer that takes its storage over, which writes it
  // or, for an accumulator, finds it zeroed (the others are ordered after
  // that first access by check_storage).
  void check_reuse_order(const Accesses& ac) {
    for (BufferId b = 0; b < BufferId(p_.buffers().size()) && !full(); ++b) {
      const BufferId a = p_.buffer(b).reuse;
      if (a == kNone) continue;
      const std::span<const Access> later = ac.of(b);
      if (later.empty()) continue;
      if (!later.front().write && p_.buffer(b).init != BufInit::Zero) {
        fail("lifetime",
             fmt::format("{} reads {} before anything writes the storage it took over from {}", name(later.front().op),
                         label(b), label(a)),
             {later.front().op});
        continue;
      }
      for (const Access& x : ac.of(a))
        if (!hb(x.op, later.front().op)) {
          fail("lifetime",
               fmt::format("{} writes {} into the storage of {} while {} may still use it", name(later.front().op),
                           label(b), label(a), name(x.op)),
               {x.op, later.front().op});
          break;
        }
    }
  }

  /// One storage's (or one owner's of it) accesses in time order; false once it reported.
  bool check_storage(BufferId b, RankId owner, std::span<const Access> a) {
    const bool initialised = p_.buffer(b).init != BufInit::None;
    OpId writer = kNone;
    std::size_t seg_begin = 0;  // first access after `writer`
    for (std::size_t i = 0; i < a.size() && !full(); ++i) {
      if (writer == kNone && !initialised && !a[i].write) {
        auto w = std::find_if(a.begin() + std::ptrdiff_t(i), a.end(), [](const Access& x) { return x.write; });
        if (w == a.end())
          fail("lifetime", fmt::format("{} reads {} that nothing writes", name(a[i].op), storage(b, owner)), {a[i].op});
        else
          fail("lifetime",
               fmt::format("{} reads {} without waiting for {} that writes it", name(a[i].op), storage(b, owner),
                           name(w->op)),
               {w->op, a[i].op});
        return false;
      }
      if (writer != kNone && !hb(writer, a[i].op)) {
        fail("lifetime",
             fmt::format("{} touches {} without waiting for {} that writes it", name(a[i].op), storage(b, owner),
                         name(writer)),
             {writer, a[i].op});
        return false;
      }
      if (!a[i].write) continue;
      for (std::size_t k = seg_begin; k < i; ++k)
        if (!hb(a[k].op, a[i].op)) {
          fail("lifetime",
               fmt::format("{} overwrites {} while {} may still read it", name(a[i].op), storage(b, owner),
                           name(a[k].op)),
               {a[k].op, a[i].op});
          return false;
        }
      writer = a[i].op;
      seg_begin = i + 1;
    }
    return true;
  }

  std::vector<std::array<std::uint32_t, kNumStreams>> vc_;  // per op: its vector clock over its rank's streams
};

}  // namespace

void check_lifetime(State& s) { Lifetime(s).run(); }

}  // namespace charm::sched::checks
