#include "scheduler/validate/validator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/strong_components.hpp>
#include <limits>
#include <map>
#include <tuple>

#include "scheduler/validate/interval_set.hpp"

namespace charm::sched {

using namespace charm::ir;

namespace {

class Validator {
 public:
  Validator(const Plan& p, const ValidateOptions& opt) : p_(p), opt_(opt), n_(p.size()) {}

  ValidationReport run() {
    stats();
    if (!structure()) return std::move(report_);
    build_streams();
    if (!acyclic()) return std::move(report_);
    if (!matching()) return std::move(report_);
    if (!deadlock()) return std::move(report_);
    happens_before();
    lifetime();
    coverage();
    return std::move(report_);
  }

 private:
  // ---------------------------------------------------------------- helpers
  bool full() const { return report_.violations.size() >= opt_.max_violations; }
  void fail(const char* rule, std::string msg, std::vector<OpId> ops = {}) {
    if (full()) return;
    report_.violations.push_back({rule, std::move(msg), std::move(ops)});
    report_.capped = full();
  }
  std::string name(OpId id) const { return fmt::format("op {} (rank {}, {}: {})", id, p_.op(id).rank, to_string(p_.op(id).stream), op_label(p_, id)); }
  std::size_t queue_of(OpId id) const { return std::size_t(p_.op(id).rank) * kNumStreams + std::size_t(p_.op(id).stream); }
  static bool is_comm(const Op& o) { return o.kind == OpKind::Send || o.kind == OpKind::Recv; }

  void stats() {
    report_.ops = n_;
    for (const Op& o : p_.ops()) {
      if (o.kind == OpKind::Compute) { ++report_.computes; report_.flops += o.flops; }
      if (o.kind == OpKind::Send) { ++report_.messages; report_.bytes_moved += double(o.bytes); }
    }
  }

  // -------------------------------------------------------------- structure
  /// A buffer's region, defaults resolved (Plan::region, inline: it runs for every slot of every op).
  Region reg(BufferId b) const {
    const Buffer& x = p_.buffer(b);
    return {x.owner, x.owner + x.owners, x.head_begin, x.heads == 0 ? kv_heads_ : x.head_begin + x.heads,
            x.part_begin, x.parts == 0 ? p_.parts : x.part_begin + x.parts};
  }
  /// The buffer whose storage b is (structure() has made sure a view's parent is no view).
  BufferId root_of(BufferId b) const { return views_ && p_.buffer(b).parent != kNone ? p_.buffer(b).parent : b; }
  /// Equal regions (in a plain plan: the same owner, without computing regions).
  bool same_region(BufferId a, BufferId b) const { return regions_ ? same_region_slow(a, b) : p_.buffer(a).owner == p_.buffer(b).owner; }
  bool same_region_slow(BufferId a, BufferId b) const { return reg(a) == reg(b); }
  std::string label(BufferId b) const { return fmt::format("buffer {} ({})", b, buffer_label(p_, b)); }
  /// A root buffer, or one owner of it (lifetime).
  std::string storage(BufferId b, RankId owner) const { return owner == kNone ? label(b) : fmt::format("{} owner {}", label(b), owner); }
  static bool plain(const Buffer& b) {
    return b.owners == 1 && b.head_begin == 0 && b.heads == 0 && b.part_begin == 0 && b.parts == 0 && b.parent == kNone;
  }

  /// Region and view rules of one buffer; also notes which region features the plan uses.
  void check_buffer(BufferId b, const std::array<Bytes, 7>& shard_bytes) {
    const Buffer& bf = p_.buffer(b);
    const int R = p_.ranks;
    if (bf.rank < 0 || bf.rank >= R || bf.owner < 0 || bf.owner >= R) { fail("structure", fmt::format("buffer {} has rank/owner out of range", b)); return; }
    if (plain(bf)) {
      if (bf.bytes != shard_bytes[std::size_t(bf.kind)])
        fail("structure", fmt::format("{} holds {} bytes but a {} shard is {}", label(b), bf.bytes, to_string(bf.kind), shard_bytes[std::size_t(bf.kind)]));
      if (bf.init == BufInit::Input && bf.owner != bf.rank)
        fail("structure", fmt::format("{}: an input of rank {} must be its own shard", label(b), bf.rank));
      return;
    }
    regions_ = true;
    // Ranges in 64 bits: a hand-written plan may hold any int32 here.
    auto range_ok = [](std::int64_t begin, std::int64_t count, std::int64_t n) { return begin >= 0 && count >= 1 && begin + count <= n; };
    const std::int64_t hk = kv_heads_;
    if (!range_ok(bf.owner, bf.owners, R) || bf.heads < 0 || (bf.heads == 0 && bf.head_begin != 0) ||
        (bf.heads > 0 && !range_ok(bf.head_begin, bf.heads, hk)) || bf.parts < 0 || (bf.parts == 0 && bf.part_begin != 0) ||
        (bf.parts > 0 && !range_ok(bf.part_begin, bf.parts, p_.parts))) {
      fail("structure", fmt::format("buffer {}: region owners {}+{}, kv heads {}+{}, parts {}+{} is empty or outside the workload "
                                    "({} ranks, {} kv heads, {} parts; a count of 0 means all and needs begin 0)",
                                    b, bf.owner, bf.owners, bf.head_begin, bf.heads, bf.part_begin, bf.parts, R, hk, p_.parts));
      return;
    }
    const Region r = reg(b);
    split_heads_ |= r.heads() != kv_heads_;
    if (bf.parent != kNone) {
      views_ = true;
      const BufferId pa = bf.parent;
      if (pa < 0 || pa >= b) { fail("structure", fmt::format("buffer {} is a view of buffer {}, which is not an earlier buffer", b, pa)); return; }
      const Buffer& pb = p_.buffer(pa);
      const Region pr = reg(pa);
      if (pb.parent != kNone || pb.rank != bf.rank || pb.kind != bf.kind || pr.head_begin != r.head_begin || pr.head_end != r.head_end ||
          pr.part_begin != r.part_begin || pr.part_end != r.part_end || r.owner_begin < pr.owner_begin || r.owner_end > pr.owner_end) {
        fail("structure", fmt::format("{} is a view of {} but not an owner sub-range of it (a view keeps the rank, kind, heads "
                                      "and parts of a parent that is no view itself)", label(b), label(pa)));
        return;
      }
      if (bf.init != BufInit::None) fail("structure", fmt::format("{} is a view but has init {} (a view holds what its parent holds)", label(b), to_string(bf.init)));
    }
    if (bf.init == BufInit::Input && (bf.parent != kNone || r != shard_region(bf.rank, p_.workload, p_.parts)))
      fail("structure", fmt::format("{}: an input must be the whole shard of its rank {}, not a region or a view", label(b), bf.rank));
    if (const Bytes want = region_bytes(p_.workload, R, p_.parts, bf.kind, r); bf.bytes != want)
      fail("structure", fmt::format("{} holds {} bytes but its region needs {}", label(b), bf.bytes, want));
  }

  bool structure() {
    const auto nb = static_cast<BufferId>(p_.buffers().size());
    const int R = p_.ranks;
    if (R < 1) { fail("structure", "plan has no ranks"); return false; }
    if (p_.results().size() != std::size_t(R)) { fail("structure", fmt::format("results list {} ranks, plan has {}", p_.results().size(), R)); return false; }
    // The workload and the parts first: region sizes, masks and cells are computed from them.
    if (auto s = p_.workload.check(R); !s) { fail("structure", "workload: " + s.error().message()); return false; }
    const std::int64_t shard = p_.workload.seq / R;
    if (p_.parts < 1 || shard % p_.parts != 0 || std::int64_t(R) * p_.parts > std::numeric_limits<std::int32_t>::max()) {
      fail("structure", fmt::format("plan counts {} token parts per shard, which must be >= 1 and divide the shard's {} tokens", p_.parts, shard));
      return false;
    }
    kv_heads_ = static_cast<std::int32_t>(p_.workload.kv_heads);
    regions_ = p_.parts != 1;
    std::array<Bytes, 7> shard_bytes{};
    for (std::size_t k = 0; k < shard_bytes.size(); ++k)
      shard_bytes[k] = region_bytes(p_.workload, R, p_.parts, BufKind(k), shard_region(0, p_.workload, p_.parts));
    for (BufferId b = 0; b < nb; ++b) check_buffer(b, shard_bytes);
    if (!report_.ok()) return false;  // the op rules below read regions and follow views
    if (regions_ && !count_cells()) return false;
    auto buf_ok = [&](OpId id, int slot, std::initializer_list<BufKind> kinds) {
      const Op& o = p_.op(id);
      const BufferId b = o.buf[slot];
      if (b < 0 || b >= nb) { fail("structure", fmt::format("{} lacks its buffer #{}", name(id), slot), {id}); return false; }
      const Buffer& bf = p_.buffer(b);
      if (bf.rank != o.rank) { fail("structure", fmt::format("{} touches buffer {} of rank {}", name(id), b, bf.rank), {id}); return false; }
      if (kinds.size() && std::find(kinds.begin(), kinds.end(), bf.kind) == kinds.end()) {
        fail("structure", fmt::format("{}: buffer {} is a {} buffer, not allowed in slot {}", name(id), b, to_string(bf.kind), slot), {id});
        return false;
      }
      return true;
    };
    auto same = [&](OpId id, BufferId a, BufferId b, const char* what) {
      if (same_region(a, b)) return true;
      fail("structure", fmt::format("{}: {} {} and {} differ", name(id), what, buffer_label(p_, a), buffer_label(p_, b)), {id});
      return false;
    };
    for (OpId id = 0; id < OpId(n_); ++id) {
      const Op& o = p_.op(id);
      if (o.rank < 0 || o.rank >= R) { fail("structure", fmt::format("op {} has rank {} out of range", id, o.rank), {id}); continue; }
      for (OpId d : p_.deps(id)) {
        if (d < 0 || d >= OpId(n_)) { fail("structure", fmt::format("op {} depends on missing op {}", id, d), {id}); continue; }
        if (d == id) fail("structure", fmt::format("{} depends on itself", name(id)), {id});
        else if (p_.op(d).rank != o.rank) fail("structure", fmt::format("{} depends on {} of another rank (ranks meet only through messages)", name(id), name(d)), {id, d});
      }
      switch (o.kind) {
        case OpKind::Compute: {
          const bool fwd = o.phase == Phase::Fwd;
          bool ok = fwd ? buf_ok(id, 0, {BufKind::Q}) && buf_ok(id, 1, {BufKind::Kv}) && buf_ok(id, 2, {BufKind::Out})
                        : buf_ok(id, 0, {BufKind::QBundle}) && buf_ok(id, 1, {BufKind::Kv}) && buf_ok(id, 2, {BufKind::Dq}) &&
                              buf_ok(id, 3, {BufKind::Dkv});
          if (!ok) break;
          const Buffer &bq = p_.buffer(o.buf[0]), &bk = p_.buffer(o.buf[1]);
          if (o.q_owner != bq.owner || o.kv_owner != bk.owner)
            fail("structure", fmt::format("{}: q/kv blocks do not match its buffers' owners", name(id)), {id});
          if (!same_region(o.buf[2], o.buf[0]) || (!fwd && !same_region(o.buf[3], o.buf[1]))) {
            fail("structure", fmt::format("{}: accumulates into a buffer of another region (q {}, kv {}, accumulators {}{}{})", name(id),
                                          buffer_label(p_, o.buf[0]), buffer_label(p_, o.buf[1]), buffer_label(p_, o.buf[2]),
                                          fwd ? "" : ", ", fwd ? "" : buffer_label(p_, o.buf[3])), {id});
            break;
          }
          if (regions_ && (bq.head_begin != bk.head_begin || reg(o.buf[0]).head_end != reg(o.buf[1]).head_end)) {
            fail("structure", fmt::format("{}: q {} and kv {} cover different kv heads", name(id), buffer_label(p_, o.buf[0]), buffer_label(p_, o.buf[1])), {id});
            break;
          }
          const MaskPiece want = bq.owners == 1 && bk.owners == 1 ? p_.workload.mask(o.q_owner, o.kv_owner, R) : MaskPiece::Mixed;
          if (o.mask != want)
            fail("structure", fmt::format("{}: mask piece {} but the workload gives {}", name(id), to_string(o.mask), to_string(want)), {id});
          break;
        }
        case OpKind::Send:
        case OpKind::Recv:
          if (o.peer < 0 || o.peer >= R || o.peer == o.rank) fail("structure", fmt::format("{}: bad peer {}", name(id), o.peer), {id});
          else buf_ok(id, 0, {});
          if (o.stream == Stream::Compute) fail("structure", fmt::format("{}: messages travel on comm streams, not compute", name(id)), {id});
          break;
        case OpKind::Merge:
          if (buf_ok(id, 0, {BufKind::Out}) && buf_ok(id, 1, {BufKind::Out})) same(id, o.buf[0], o.buf[1], "merges outputs");
          break;
        case OpKind::Accumulate:
          if (buf_ok(id, 0, {BufKind::Dq, BufKind::Dkv}) && buf_ok(id, 1, {BufKind::Dq, BufKind::Dkv})) {
            if (p_.buffer(o.buf[0]).kind != p_.buffer(o.buf[1]).kind || !same_region(o.buf[0], o.buf[1]))
              fail("structure", fmt::format("{}: accumulates a {} into a {}", name(id), buffer_label(p_, o.buf[0]), buffer_label(p_, o.buf[1])), {id});
          }
          break;
        case OpKind::Copy:
          if (o.buf[3] != kNone) {
            if (buf_ok(id, 0, {BufKind::Q}) && buf_ok(id, 1, {BufKind::Dout}) && buf_ok(id, 2, {BufKind::Out}) && buf_ok(id, 3, {BufKind::QBundle}))
              for (int k = 1; k < 4; ++k)
                if (!same(id, o.buf[0], o.buf[k], "packs tensors of different regions:")) break;
          } else if (buf_ok(id, 0, {}) && buf_ok(id, 1, {})) {
            if (p_.buffer(o.buf[0]).kind != p_.buffer(o.buf[1]).kind) fail("structure", fmt::format("{}: copies between buffer kinds", name(id)), {id});
            else if (regions_ ? !reg(o.buf[0]).contains(reg(o.buf[1])) && !reg(o.buf[1]).contains(reg(o.buf[0])) : !same_region(o.buf[0], o.buf[1]))
              fail("structure", fmt::format("{}: neither region of {} and {} contains the other", name(id), buffer_label(p_, o.buf[0]), buffer_label(p_, o.buf[1])), {id});
          }
          break;
      }
    }
    const auto pass = p_.workload.pass;
    for (int r = 0; r < R; ++r) {
      const auto& res = p_.results()[std::size_t(r)];
      auto check = [&](BufferId b, BufKind kind, const char* what) {
        if (b < 0 || b >= nb) { fail("structure", fmt::format("rank {} names no {} result buffer", r, what)); return; }
        const Buffer& bf = p_.buffer(b);
        if (bf.rank != r || bf.owner != r || bf.kind != kind)
          fail("structure", fmt::format("rank {}: its {} result is buffer {} ({} of {} on rank {})", r, what, b, to_string(bf.kind), bf.owner, bf.rank));
        else if (!plain(bf) && (bf.parent != kNone || reg(b) != shard_region(r, p_.workload, p_.parts)))
          fail("structure", fmt::format("rank {}: its {} result is {}, not the whole shard of rank {}", r, what, label(b), r));
      };
      if (pass != PassKind::Bwd) check(res.out, BufKind::Out, "out");
      if (pass != PassKind::Fwd) { check(res.dq, BufKind::Dq, "dq"); check(res.dkv, BufKind::Dkv, "dkv"); }
    }
    if (report_.ok()) check_reuse_structure();
    return report_.ok();
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
      reuses_ = true;
      const BufferId a = bf.reuse;
      if (a < 0 || a >= b) { fail("structure", fmt::format("{} reuses buffer {}, which is not an earlier buffer", label(b), a)); continue; }
      const Buffer& ab = p_.buffer(a);
      const char* why = ab.rank != bf.rank                         ? "of another rank"
                        : ab.parent != kNone || bf.parent != kNone ? "a view (only whole storage is reused)"
                        : ab.init == BufInit::Input || bf.init == BufInit::Input ? "an input (inputs live for the whole plan)"
                        : is_result[std::size_t(a)]                ? "a result (results live to the end)"
                        : p_.buffer(first[std::size_t(a)]).bytes < bf.bytes ? "in a storage smaller than the buffer that reuses it"
                        : reused[std::size_t(a)]                   ? "reused twice (storage passes along one chain)"
                                                                   : nullptr;
      if (why != nullptr) fail("structure", fmt::format("{} reuses {}, which is {}", label(b), label(a), why));
      reused[std::size_t(a)] = 1;
    }
  }

  // ----------------------------------------------------- streams and groups
  void build_streams() {
    queues_.assign(std::size_t(p_.ranks) * kNumStreams, {});
    pos_.assign(n_, 0);
    for (OpId id = 0; id < OpId(n_); ++id) {
      auto& q = queues_[queue_of(id)];
      pos_[std::size_t(id)] = std::uint32_t(q.size());
      q.push_back(id);
    }
    // group_start_[id]: index in its queue of the first member of its group.
    group_start_.assign(n_, 0);
    for (auto& q : queues_)
      for (std::size_t i = 0; i < q.size(); ++i) {
        const Op& o = p_.op(q[i]);
        const bool joins = i > 0 && is_comm(o) && o.group != kNone && is_comm(p_.op(q[i - 1])) && p_.op(q[i - 1]).group == o.group;
        group_start_[std::size_t(q[i])] = joins ? group_start_[std::size_t(q[i - 1])] : std::uint32_t(i);
      }
  }
  /// Ops of the group before `id`'s group on its stream (empty at the front).
  std::pair<std::size_t, std::size_t> prev_group(OpId id) const {
    const auto& q = queues_[queue_of(id)];
    const std::size_t start = group_start_[std::size_t(id)];
    if (start == 0) return {0, 0};
    const std::size_t pstart = group_start_[std::size_t(q[start - 1])];
    return {pstart, start};
  }

  // ---------------------------------------------------------------- acyclic
  bool acyclic() {
    // Stream order always runs from lower to higher ids (queues are filled in
    // id order), so when every dependency points to a lower id as well, id
    // order is a topological order. Planners only ever emit such plans; the
    // Kahn pass (random access over all ops) is for the others.
    bool forward = true;
    for (OpId id = 0; id < OpId(n_) && forward; ++id)
      for (OpId d : p_.deps(id)) forward &= d < id;
    if (forward) return true;
    // Kahn over deps and stream order between consecutive groups.
    std::vector<std::uint32_t> indeg(n_, 0);
    std::vector<std::vector<OpId>> extra_succ;  // only for the cycle report
    auto for_preds = [&](OpId id, auto&& fn) {
      for (OpId d : p_.deps(id)) fn(d);
      auto [b, e] = prev_group(id);
      const auto& q = queues_[queue_of(id)];
      for (std::size_t i = b; i < e; ++i) fn(q[i]);
    };
    succ_begin_.assign(n_ + 1, 0);
    for (OpId id = 0; id < OpId(n_); ++id) for_preds(id, [&](OpId d) { ++succ_begin_[std::size_t(d) + 1]; ++indeg[std::size_t(id)]; });
    for (std::size_t i = 0; i < n_; ++i) succ_begin_[i + 1] += succ_begin_[i];
    succ_.assign(succ_begin_[n_], 0);
    {
      auto fillpos = succ_begin_;
      for (OpId id = 0; id < OpId(n_); ++id) for_preds(id, [&](OpId d) { succ_[fillpos[std::size_t(d)]++] = id; });
    }
    std::vector<OpId> stack;
    for (OpId id = 0; id < OpId(n_); ++id) if (indeg[std::size_t(id)] == 0) stack.push_back(id);
    std::size_t seen = 0;
    while (!stack.empty()) {
      const OpId v = stack.back();
      stack.pop_back();
      ++seen;
      for (auto k = succ_begin_[std::size_t(v)]; k < succ_begin_[std::size_t(v) + 1]; ++k)
        if (--indeg[std::size_t(succ_[k])] == 0) stack.push_back(succ_[k]);
    }
    if (seen == n_) return true;
    // Name one cycle: a strongly connected component with more than one op (Boost.Graph).
    using G = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;
    G g(n_);
    for (OpId v = 0; v < OpId(n_); ++v)
      if (indeg[std::size_t(v)] > 0)
        for (auto k = succ_begin_[std::size_t(v)]; k < succ_begin_[std::size_t(v) + 1]; ++k)
          if (indeg[std::size_t(succ_[k])] > 0) boost::add_edge(std::size_t(v), std::size_t(succ_[k]), g);
    std::vector<int> comp(n_);
    const int ncomp = boost::strong_components(g, comp.data());
    std::vector<int> size(std::size_t(ncomp), 0);
    for (std::size_t v = 0; v < n_; ++v) ++size[std::size_t(comp[v])];
    std::vector<OpId> cyc;
    for (std::size_t v = 0; v < n_ && cyc.size() < 8; ++v)
      if (indeg[v] > 0 && size[std::size_t(comp[v])] > 1 && (cyc.empty() || comp[v] == comp[std::size_t(cyc[0])])) cyc.push_back(OpId(v));
    std::string names;
    for (OpId c : cyc) names += (names.empty() ? "" : "; ") + name(c);
    fail("acyclic", fmt::format("dependencies and stream order form a cycle through {}", names), cyc);
    return false;
  }

  // --------------------------------------------------------------- matching
  bool matching() {
    struct Msg { int stream, src, dst, tag; OpId id; };
    std::vector<Msg> sends, recvs;
    for (OpId id = 0; id < OpId(n_); ++id) {
      const Op& o = p_.op(id);
      if (o.kind == OpKind::Send) sends.push_back({int(o.stream), o.rank, o.peer, o.tag, id});
      if (o.kind == OpKind::Recv) recvs.push_back({int(o.stream), o.peer, o.rank, o.tag, id});
    }
    auto key = [](const Msg& m) { return std::tie(m.stream, m.src, m.dst, m.tag); };
    auto less = [&](const Msg& a, const Msg& b) { return key(a) < key(b) || (key(a) == key(b) && a.id < b.id); };
    // Sorted by (stream, src, dst, tag, id): a stable counting sort on (stream,
    // src) and a sort of each small bucket by the rest, skipped when the
    // bucket is already in order (planners issue tags in id order).
    const std::size_t R = std::size_t(p_.ranks);
    auto sort_msgs = [&](std::vector<Msg>& v) {
      std::vector<std::uint32_t> b(kNumStreams * R + 1, 0);
      for (const Msg& m : v) ++b[std::size_t(m.stream) * R + std::size_t(m.src) + 1];
      for (std::size_t k = 0; k + 1 < b.size(); ++k) b[k + 1] += b[k];
      std::vector<Msg> out(v.size());
      {
        auto fill = b;
        for (const Msg& m : v) out[fill[std::size_t(m.stream) * R + std::size_t(m.src)]++] = m;
      }
      for (std::size_t k = 0; k + 1 < b.size(); ++k) {
        auto first = out.begin() + std::ptrdiff_t(b[k]), last = out.begin() + std::ptrdiff_t(b[k + 1]);
        if (!std::is_sorted(first, last, less)) std::sort(first, last, less);
      }
      v = std::move(out);
    };
    sort_msgs(sends);
    sort_msgs(recvs);
    peer_.assign(n_, kNone);
    std::size_t i = 0, j = 0;
    while ((i < sends.size() || j < recvs.size()) && !full()) {
      if (j == recvs.size() || (i < sends.size() && key(sends[i]) < key(recvs[j]))) {
        fail("matching", fmt::format("{} has no matching receive on rank {}", name(sends[i].id), sends[i].dst), {sends[i].id});
        ++i;
      } else if (i == sends.size() || key(recvs[j]) < key(sends[i])) {
        fail("matching", fmt::format("{} has no matching send on rank {}", name(recvs[j].id), recvs[j].src), {recvs[j].id});
        ++j;
      } else {
        const OpId s = sends[i].id, r = recvs[j].id;
        if (i + 1 < sends.size() && key(sends[i + 1]) == key(sends[i])) fail("matching", fmt::format("{} and {} use the same tag", name(s), name(sends[i + 1].id)), {s, sends[i + 1].id});
        if (j + 1 < recvs.size() && key(recvs[j + 1]) == key(recvs[j])) fail("matching", fmt::format("{} and {} use the same tag", name(r), name(recvs[j + 1].id)), {r, recvs[j + 1].id});
        const Op &so = p_.op(s), &ro = p_.op(r);
        const Buffer &sb = p_.buffer(so.buf[0]), &rb = p_.buffer(ro.buf[0]);
        if (so.bytes != ro.bytes) fail("matching", fmt::format("{} sends {} bytes but {} expects {}", name(s), so.bytes, name(r), ro.bytes), {s, r});
        else if (so.bytes != sb.bytes) fail("matching", fmt::format("{} sends {} bytes of a {}-byte buffer", name(s), so.bytes, sb.bytes), {s});
        if (sb.kind != rb.kind || sb.bytes != rb.bytes || !same_region(so.buf[0], ro.buf[0]))
          fail("matching", fmt::format("{} sends {} into {} at {}", name(s), buffer_label(p_, so.buf[0]), buffer_label(p_, ro.buf[0]), name(r)), {s, r});
        peer_[std::size_t(s)] = r;
        peer_[std::size_t(r)] = s;
        ++i, ++j;
      }
    }
    if (!report_.ok()) return false;
    // Issue order: the k-th send of a (stream, src, dst) must meet the k-th receive.
    // Tags are unique per (stream, src, dst) by now, so if ids rise with tags
    // in every group of both sorted lists, tags rise in issue order: nothing to report.
    auto in_issue_order = [&](const std::vector<Msg>& v) {
      for (std::size_t k = 0; k + 1 < v.size(); ++k)
        if (v[k].stream == v[k + 1].stream && v[k].src == v[k + 1].src && v[k].dst == v[k + 1].dst && v[k].id > v[k + 1].id)
          return false;
      return true;
    };
    if (in_issue_order(sends) && in_issue_order(recvs)) return true;
    std::vector<std::int32_t> seen_tag;
    std::map<std::tuple<int, int, int>, std::pair<int, int>> last;  // -> last send tag, last recv tag
    for (OpId id = 0; id < OpId(n_); ++id) {
      const Op& o = p_.op(id);
      if (!is_comm(o)) continue;
      const bool send = o.kind == OpKind::Send;
      auto& l = last.try_emplace({int(o.stream), send ? o.rank : o.peer, send ? o.peer : o.rank}, -1, -1).first->second;
      int& prev = send ? l.first : l.second;
      if (o.tag <= prev) fail("matching", fmt::format("{} is issued after a message with a later tag: NCCL pairs messages in issue order", name(id)), {id});
      prev = o.tag;
    }
    return report_.ok();
  }

  // --------------------------------------------------------------- deadlock
  // Completion order under NCCL semantics; also the order the later checks replay.
  bool deadlock() {
    std::vector<std::uint32_t> pending_deps(n_);
    for (OpId id = 0; id < OpId(n_); ++id) pending_deps[std::size_t(id)] = std::uint32_t(p_.deps(id).size());
    std::vector<std::vector<OpId>> dependents(0);
    // Reverse deps in CSR.
    std::vector<std::uint32_t> rb(n_ + 1, 0);
    for (OpId id = 0; id < OpId(n_); ++id) for (OpId d : p_.deps(id)) ++rb[std::size_t(d) + 1];
    for (std::size_t i = 0; i < n_; ++i) rb[i + 1] += rb[i];
    std::vector<OpId> rdeps(rb[n_]);
    {
      auto fill = rb;
      for (OpId id = 0; id < OpId(n_); ++id) for (OpId d : p_.deps(id)) rdeps[fill[std::size_t(d)]++] = id;
    }
    std::vector<std::uint32_t> head(queues_.size(), 0);
    std::vector<char> posted(n_, 0), done(n_, 0);
    order_.clear();
    order_.reserve(n_);
    // FIFO of queues to look at; a queue is in it at most once, so a ring of
    // queues_.size() slots never overflows.
    std::vector<std::uint32_t> work(queues_.size() + 1);
    std::size_t work_head = 0, work_tail = 0;
    auto push_work = [&](std::size_t q) { work[work_tail] = std::uint32_t(q); work_tail = (work_tail + 1) % work.size(); };
    for (std::size_t q = 0; q < queues_.size(); ++q) if (!queues_[q].empty()) push_work(q);
    std::vector<char> queued(queues_.size(), 1);
    auto wake = [&](std::size_t q) { if (!queued[q]) { queued[q] = 1; push_work(q); } };
    auto complete = [&](OpId id) {
      done[std::size_t(id)] = 1;
      order_.push_back(id);
      for (auto k = rb[std::size_t(id)]; k < rb[std::size_t(id) + 1]; ++k) {
        const OpId d = rdeps[k];
        if (--pending_deps[std::size_t(d)] == 0) wake(queue_of(d));
      }
      wake(queue_of(id));
    };
    while (work_head != work_tail) {
      const std::size_t qi = work[work_head];
      work_head = (work_head + 1) % work.size();
      queued[qi] = 0;
      auto& q = queues_[qi];
      bool progress = true;
      while (progress && head[qi] < q.size()) {
        progress = false;
        const std::size_t start = head[qi];
        std::size_t end = start + 1;
        while (end < q.size() && group_start_[std::size_t(q[end])] == start) ++end;
        bool ready = true;
        for (std::size_t i = start; i < end && ready; ++i) ready = pending_deps[std::size_t(q[i])] == 0;
        if (!ready) break;
        for (std::size_t i = start; i < end; ++i) {
          const OpId id = q[i];
          if (done[std::size_t(id)] || posted[std::size_t(id)]) continue;
          const Op& o = p_.op(id);
          if (!is_comm(o)) { complete(id); continue; }
          posted[std::size_t(id)] = 1;
          const OpId m = peer_[std::size_t(id)];
          if (posted[std::size_t(m)] && !done[std::size_t(m)]) {
            // Rendezvous: the send completes with its receive (send first in the order).
            if (o.kind == OpKind::Send) { complete(id); complete(m); }
            else { complete(m); complete(id); }
          }
        }
        bool all = true;
        for (std::size_t i = start; i < end && all; ++i) all = done[std::size_t(q[i])];
        if (all) { head[qi] = std::uint32_t(end); progress = true; }
      }
    }
    if (order_.size() == n_) return true;
    std::vector<OpId> stuck;
    std::string names;
    for (std::size_t qi = 0; qi < queues_.size() && stuck.size() < 6; ++qi) {
      if (head[qi] >= queues_[qi].size()) continue;
      const OpId id = queues_[qi][head[qi]];
      const Op& o = p_.op(id);
      std::string why;
      if (pending_deps[std::size_t(id)] > 0) why = "waits for its dependencies";
      else if (is_comm(o)) why = fmt::format("waits for rank {} to post the matching {}", o.peer, o.kind == OpKind::Send ? "receive" : "send");
      else why = "waits for its group";
      stuck.push_back(id);
      names += fmt::format("{}{} {}", names.empty() ? "" : "; ", name(id), why);
    }
    fail("deadlock", fmt::format("{} of {} ops can never run under NCCL point-to-point semantics: {}", n_ - order_.size(), n_, names), stuck);
    return false;
  }

  // ---------------------------------------------------------- happens-before
  // Per-op vector clocks over the streams of its own rank: vc[s] = how many
  // ops of stream s are known to have completed when the op has completed.
  void happens_before() {
    vc_.assign(n_, {});
    for (OpId id : order_) {
      auto& v = vc_[std::size_t(id)];
      auto absorb = [&](OpId d) {
        const auto& dv = vc_[std::size_t(d)];
        for (int s = 0; s < kNumStreams; ++s) v[std::size_t(s)] = std::max(v[std::size_t(s)], dv[std::size_t(s)]);
      };
      for (OpId d : p_.deps(id)) absorb(d);
      auto [b, e] = prev_group(id);
      const auto& q = queues_[queue_of(id)];
      for (std::size_t i = b; i < e; ++i) absorb(q[i]);
      auto& mine = v[std::size_t(p_.op(id).stream)];
      mine = std::max(mine, pos_[std::size_t(id)] + 1);
    }
  }
  /// a happens before b; both on one rank (the accesses of one buffer).
  bool hb(OpId a, OpId b) const {
    if (a == b) return true;
    // One stream: a is in an earlier group than b (members of one ncclGroup
    // may complete in any order; a lone op is a group of its own).
    if (p_.op(a).stream == p_.op(b).stream) return pos_[std::size_t(a)] < group_start_[std::size_t(b)];
    return vc_[std::size_t(b)][std::size_t(p_.op(a).stream)] >= pos_[std::size_t(a)] + 1;
  }

  // --------------------------------------------------------------- lifetime
  void lifetime() {
    // Accesses per storage (root buffer: a view's accesses are its root's) in
    // CSR form, filled in replay order, so each root's list is already sorted by
    // time (one op's own accesses in slot order) and no buffer needs a vector
    // of its own. A root over several owners is checked owner by owner: ops
    // touching disjoint owner ranges of it (receives into different views)
    // never conflict.
    struct Access { OpId op; std::uint8_t slot; bool write; };
    const std::size_t nb = p_.buffers().size();
    auto for_accesses = [&](OpId id, auto&& fn) {
      const Op& o = p_.op(id);
      auto rd = [&](int s) { fn(root_of(o.buf[s]), s, false); };
      auto wr = [&](int s) { fn(root_of(o.buf[s]), s, true); };
      switch (o.kind) {
        case OpKind::Compute: rd(0); rd(1); wr(2); if (o.phase == Phase::Bwd) wr(3); break;
        case OpKind::Send: rd(0); break;
        case OpKind::Recv: wr(0); break;
        case OpKind::Merge: case OpKind::Accumulate: rd(0); wr(1); break;
        case OpKind::Copy: if (o.buf[3] != kNone) { rd(0); rd(1); rd(2); wr(3); } else { rd(0); wr(1); } break;
      }
    };
    std::vector<std::uint32_t> begin(nb + 1, 0);
    for (OpId id = 0; id < OpId(n_); ++id) for_accesses(id, [&](BufferId b, int, bool) { ++begin[std::size_t(b) + 1]; });
    for (std::size_t b = 0; b < nb; ++b) begin[b + 1] += begin[b];
    std::vector<Access> all(begin[nb]);
    {
      auto fill = begin;
      for (OpId id : order_) for_accesses(id, [&](BufferId b, int s, bool w) { all[fill[std::size_t(b)]++] = {id, std::uint8_t(s), w}; });
    }
    // Storage reuse: every access of the reused buffer happens before the
    // first access of the buffer that takes its storage over, which writes it
    // or, for an accumulator, finds it zeroed (the others are ordered after
    // that first access by the checks below).
    for (BufferId b = 0; reuses_ && b < BufferId(nb) && !full(); ++b) {
      const BufferId a = p_.buffer(b).reuse;
      if (a == kNone) continue;
      const std::span<const Access> later(all.data() + begin[std::size_t(b)], all.data() + begin[std::size_t(b) + 1]);
      if (later.empty()) continue;
      if (!later.front().write && p_.buffer(b).init != BufInit::Zero) {
        fail("lifetime", fmt::format("{} reads {} before anything writes the storage it took over from {}", name(later.front().op), label(b), label(a)), {later.front().op});
        continue;
      }
      for (std::uint32_t k = begin[std::size_t(a)]; k < begin[std::size_t(a) + 1]; ++k)
        if (!hb(all[k].op, later.front().op)) {
          fail("lifetime", fmt::format("{} writes {} into the storage of {} while {} may still use it", name(later.front().op), label(b), label(a), name(all[k].op)),
               {all[k].op, later.front().op});
          break;
        }
    }
    // One storage's (or one owner's of it) accesses in time order; false once it reported.
    auto check = [&](BufferId b, RankId owner, std::span<const Access> a) {
      const bool initialised = p_.buffer(b).init != BufInit::None;
      OpId writer = kNone;
      std::size_t seg_begin = 0;  // first access after `writer`
      for (std::size_t i = 0; i < a.size() && !full(); ++i) {
        if (writer == kNone && !initialised && !a[i].write) {
          auto w = std::find_if(a.begin() + std::ptrdiff_t(i), a.end(), [](const Access& x) { return x.write; });
          if (w == a.end()) fail("lifetime", fmt::format("{} reads {} that nothing writes", name(a[i].op), storage(b, owner)), {a[i].op});
          else fail("lifetime", fmt::format("{} reads {} without waiting for {} that writes it", name(a[i].op), storage(b, owner), name(w->op)), {w->op, a[i].op});
          return false;
        }
        if (writer != kNone && !hb(writer, a[i].op)) {
          fail("lifetime", fmt::format("{} touches {} without waiting for {} that writes it", name(a[i].op), storage(b, owner), name(writer)), {writer, a[i].op});
          return false;
        }
        if (a[i].write) {
          for (std::size_t k = seg_begin; k < i; ++k)
            if (!hb(a[k].op, a[i].op)) {
              fail("lifetime", fmt::format("{} overwrites {} while {} may still read it", name(a[i].op), storage(b, owner), name(a[k].op)), {a[k].op, a[i].op});
              return false;
            }
          writer = a[i].op;
          seg_begin = i + 1;
        }
      }
      return true;
    };
    std::vector<std::uint32_t> obegin;  // per owner of one root: its accesses, in time order
    std::vector<Access> by_owner;
    for (BufferId b = 0; b < BufferId(nb) && !full(); ++b) {
      const std::span<const Access> a(all.data() + begin[std::size_t(b)], all.data() + begin[std::size_t(b) + 1]);
      if (a.empty()) continue;
      const Buffer& rb = p_.buffer(b);
      const bool split = regions_ && rb.owners > 1;
      if (split) {
        auto range = [&](const Access& x) { const Buffer& v = p_.buffer(p_.op(x.op).buf[x.slot]); return std::pair{v.owner - rb.owner, v.owner - rb.owner + v.owners}; };
        obegin.assign(std::size_t(rb.owners) + 1, 0);
        for (const Access& x : a) for (auto [o0, o1] = range(x); o0 < o1; ++o0) ++obegin[std::size_t(o0) + 1];
        for (std::size_t k = 0; k + 1 < obegin.size(); ++k) obegin[k + 1] += obegin[k];
        by_owner.resize(obegin.back());
        auto fill = obegin;
        for (const Access& x : a) for (auto [o0, o1] = range(x); o0 < o1; ++o0) by_owner[fill[std::size_t(o0)]++] = x;
      }
      for (std::int32_t k = 0; k < (split ? rb.owners : 1); ++k) {
        const auto seg = split ? std::span<const Access>(by_owner.data() + obegin[std::size_t(k)], by_owner.data() + obegin[std::size_t(k) + 1]) : a;
        if (!check(b, split ? rb.owner + k : kNone, seg)) break;
      }
    }
  }

  // --------------------------------------------------------------- coverage
  // Symbolic state per *cell* of a root buffer: (owner, kv head, token part).
  // The head dimension collapses to one cell when every buffer holds all kv
  // heads, the part dimension when Plan::parts is 1, so a plain plan has one
  // cell per buffer and cell = buffer id. Set elements are kv blocks
  // y * parts + part (Out, Dq cells) or query blocks x * parts + part (Dkv).
  struct Cell {
    IntervalSet set;         // blocks merged in (unless dense)
    std::int32_t dense = -1; // region plans: index of its bitmap in dense_ once the runs fragment
    bool written = false;
    bool bundle_ok = true;  // QBundle: packed from a final output
  };
  static constexpr std::int64_t kMaxCells = std::int64_t{1} << 25;

  /// Cell offsets of the roots (regions_ only); false (structure) past kMaxCells.
  bool count_cells() {
    const auto nb = p_.buffers().size();
    cell_base_.assign(nb + 1, 0);
    std::int64_t total = 0;
    for (std::size_t b = 0; b < nb; ++b) {
      cell_base_[b] = std::uint32_t(total);
      if (p_.buffer(BufferId(b)).parent != kNone) continue;
      const Region r = reg(BufferId(b));
      total += std::int64_t(r.owners()) * (split_heads_ ? r.heads() : 1) * r.parts();
      if (total > kMaxCells) {
        fail("structure", fmt::format("the buffers hold more than {} (owner, kv head, part) cells, more than the validator tracks", kMaxCells));
        return false;
      }
    }
    cell_base_[nb] = std::uint32_t(total);
    return true;
  }
  /// Cell of (owner x, kv head g, part p) in root rt (region rr).
  std::size_t cell_at(BufferId rt, const Region& rr, std::int32_t x, std::int32_t g, std::int32_t p) const {
    if (!regions_) return std::size_t(rt);
    const std::size_t nh = split_heads_ ? std::size_t(rr.heads()) : 1, gi = split_heads_ ? std::size_t(g - rr.head_begin) : 0;
    return cell_base_[std::size_t(rt)] + (std::size_t(x - rr.owner_begin) * nh + gi) * std::size_t(rr.parts()) + std::size_t(p - rr.part_begin);
  }
  /// fn(cell, x, g, p) for every cell of region r (inside buffer b's region), in (owner, head, part) order.
  template <class Fn>
  void for_cells(BufferId b, const Region& r, Fn&& fn) const {
    const BufferId rt = root_of(b);
    if (!regions_) { fn(std::size_t(rt), r.owner_begin, r.head_begin, r.part_begin); return; }
    const Region rr = reg(rt);
    const std::int32_t g1 = split_heads_ ? r.head_end : r.head_begin + 1;
    for (std::int32_t x = r.owner_begin; x < r.owner_end; ++x)
      for (std::int32_t g = r.head_begin; g < g1; ++g)
        for (std::int32_t p = r.part_begin; p < r.part_end; ++p) fn(cell_at(rt, rr, x, g, p), x, g, p);
  }
  /// for_cells over the whole of b's region.
  template <class Fn>
  void for_whole(BufferId b, Fn&& fn) const {
    if (!regions_) fn(std::size_t(b), p_.buffer(b).owner, 0, 0);
    else for_cells(b, reg(b), fn);
  }
  // A region plan's cell set may fragment: TASP brings each KV part from another
  // owner, so a query cell gathers blocks in a scattered order and its runs grow
  // to thousands (each insert a memmove). Past 32 runs, once a bitmap over the
  // blocks [0, ranks * parts) is no larger than its runs, the set becomes that
  // bitmap. Plain plans never do.
  std::size_t dense_words() const { return (std::size_t(p_.ranks) * std::size_t(p_.parts) + 63) / 64; }
  void densify(Cell& c) {
    std::int32_t slot;
    if (!free_dense_.empty()) { slot = free_dense_.back(); free_dense_.pop_back(); dense_[std::size_t(slot)].assign(dense_words(), 0); }
    else { slot = std::int32_t(dense_.size()); dense_.emplace_back(dense_words(), 0); }
    auto& w = dense_[std::size_t(slot)];
    for (auto [lo, hi] : c.set.runs())
      for (std::int32_t e = lo; e < hi; ++e) w[std::size_t(e) / 64] |= std::uint64_t{1} << (e % 64);
    c.set = IntervalSet{};
    c.dense = slot;
  }
  void undensify(Cell& c) {
    if (c.dense < 0) return;
    free_dense_.push_back(c.dense);
    c.dense = -1;
  }
  /// Adds block e to a cell; false if it was there.
  bool add(Cell& c, std::int32_t e) {
    if (c.dense >= 0) {
      auto& w = dense_[std::size_t(c.dense)][std::size_t(e) / 64];
      const std::uint64_t bit = std::uint64_t{1} << (e % 64);
      if (w & bit) return false;
      w |= bit;
      return true;
    }
    const bool fresh = c.set.insert(e);
    if (c.set.runs().size() > std::max<std::size_t>(32, dense_words())) densify(c);
    return fresh;
  }
  /// A cell's blocks as runs.
  IntervalSet blocks_of(const Cell& c) const {
    if (c.dense < 0) return c.set;
    IntervalSet s;
    const auto& w = dense_[std::size_t(c.dense)];
    for (std::size_t k = 0; k < w.size(); ++k)
      for (std::uint64_t x = w[k]; x != 0; x &= x - 1) {
        const auto e = std::int32_t(k * 64 + std::size_t(std::countr_zero(x)));
        s.append(e, e + 1);
      }
    return s;
  }
  bool same_blocks(const Cell& c, const IntervalSet& want) const { return c.dense < 0 ? c.set == want : blocks_of(c) == want; }
  /// d := s (a receive or a copy), bitmaps copied, not shared.
  void assign(Cell& d, const Cell& s) {
    if (s.dense < 0) {
      undensify(d);
      d.set = s.set;
    } else {
      if (d.dense < 0) { d.set = IntervalSet{}; densify(d); }
      dense_[std::size_t(d.dense)] = dense_[std::size_t(s.dense)];
    }
    d.written = s.written;
    d.bundle_ok = s.bundle_ok;
  }
  /// acc += part; returns the blocks both held.
  IntervalSet merge(Cell& acc, const Cell& part) {
    if (acc.dense < 0 && part.dense < 0) {
      auto overlap = acc.set.merge(part.set);
      if (regions_ && acc.set.runs().size() > std::max<std::size_t>(32, dense_words())) densify(acc);
      return overlap;
    }
    if (acc.dense < 0) densify(acc);
    auto& w = dense_[std::size_t(acc.dense)];
    IntervalSet overlap;
    if (part.dense >= 0) {
      const auto& v = dense_[std::size_t(part.dense)];
      for (std::size_t k = 0; k < w.size(); ++k) {
        for (std::uint64_t x = w[k] & v[k]; x != 0; x &= x - 1) {
          const auto e = std::int32_t(k * 64 + std::size_t(std::countr_zero(x)));
          overlap.append(e, e + 1);
        }
        w[k] |= v[k];
      }
    } else {
      for (auto [lo, hi] : part.set.runs())
        for (std::int32_t e = lo; e < hi; ++e) {
          const std::uint64_t bit = std::uint64_t{1} << (e % 64);
          if (w[std::size_t(e) / 64] & bit) overlap.append(e, e + 1);
          w[std::size_t(e) / 64] |= bit;
        }
    }
    return overlap;
  }
  /// "buffer 7 (q[0-3]h1) owner 2 head 1 part 0", or "buffer 7 (q2)" in a plain plan.
  std::string cell_name(BufferId b, std::int32_t x, std::int32_t g, std::int32_t p) const {
    std::string s = label(b);
    if (!regions_) return s;
    s += fmt::format(" owner {}", x);
    if (split_heads_) s += fmt::format(" head {}", g);
    if (p_.parts > 1) s += fmt::format(" part {}", p);
    return s;
  }

  /// Whether (query part p, key part pk) of a shard pair with mask piece m (not
  /// Empty) has a visible pair. Within a pair of shards the answer depends only
  /// on the pair's piece (the order of its chunks), so one table of parts per
  /// piece, from the first pair (x, y) that has it, serves all pairs.
  bool visible(MaskPiece m, std::int32_t p, std::int32_t pk, RankId x, RankId y) {
    if (p_.parts == 1 || m == MaskPiece::Full) return true;
    auto& t = part_table_[std::size_t(m)];
    const auto P = std::size_t(p_.parts);
    if (t.empty()) {
      t.resize(P * P);
      for (std::size_t a = 0; a < P; ++a)
        for (std::size_t c = 0; c < P; ++c)
          t[a * P + c] = visible_pairs(p_.workload, p_.ranks, p_.parts, x, std::int32_t(a), std::int32_t(a) + 1, y, std::int32_t(c), std::int32_t(c) + 1) > 0;
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
      if (P == 1 || m == MaskPiece::Full) { s.append(b * P, b * P + P); continue; }
      for (std::int32_t pb = 0; pb < P; ++pb)
        if (kv ? visible(m, pa, pb, a, b) : visible(m, pb, pa, b, a)) s.append(b * P + pb, b * P + pb + 1);
    }
    return s;
  }
  /// Block e: "3", or in parts "3p1" (owner 3, part 1).
  std::string block(std::int32_t e) const { return p_.parts == 1 ? fmt::format("{}", e) : fmt::format("{}p{}", e / p_.parts, e % p_.parts); }
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
    for_cells(b, r, [&](std::size_t c, std::int32_t x, std::int32_t g, std::int32_t p) { ok = ok && written(id, b, c, x, g, p); });
    return ok;
  }
  /// Reads every cell of b (a plain plan's one cell inline).
  bool reads_all(OpId id, BufferId b) { return (!regions_ && cells_[std::size_t(b)].written) || reads_all_slow(id, b); }
  bool reads_all_slow(OpId id, BufferId b) {
    bool ok = true;
    for_whole(b, [&](std::size_t c, std::int32_t x, std::int32_t g, std::int32_t p) { ok = ok && written(id, b, c, x, g, p); });
    return ok;
  }
  bool written(OpId id, BufferId b, std::size_t c, std::int32_t x, std::int32_t g, std::int32_t p) {
    if (cells_[c].written) return true;
    fail("coverage", fmt::format("{} reads {}, which nothing wrote", name(id), cell_name(b, x, g, p)), {id});
    return false;
  }

  void coverage() {
    if (!report_.ok()) return;  // replaying a racy plan proves nothing
    const std::size_t nb = p_.buffers().size();
    cells_.assign(regions_ ? cell_base_[nb] : nb, {});
    for (BufferId b = 0; b < BufferId(nb); ++b) {
      const Buffer& bf = p_.buffer(b);
      if (bf.init == BufInit::None) continue;  // views included: their cells are their root's
      for_whole(b, [&](std::size_t c, std::int32_t x, std::int32_t, std::int32_t p) {
        cells_[c].written = true;
        if (bf.init == BufInit::Input && bf.kind == BufKind::Out) cells_[c].set = expected_kv(x, p);
      });
    }
    const auto P = p_.parts;
    // The replay order completes each send immediately before its receive
    // (deadlock()'s rendezvous), so a receive reads the send's buffer as the
    // send left it: nothing needs to be kept per message in flight.
    OpId prev = kNone;
    for (OpId id : order_) {
      if (full()) return;
      const Op& o = p_.op(id);
      switch (o.kind) {
        case OpKind::Compute: {
          const bool bwd = o.phase == Phase::Bwd;
          if (!reads_all(id, o.buf[0]) || !reads_all(id, o.buf[1]) || !reads_all(id, o.buf[2]) || (bwd && !reads_all(id, o.buf[3]))) break;
          if (!regions_) {  // one cell each: the pair (q_owner, kv_owner)
            Cell &q = cells_[std::size_t(o.buf[0])], &acc = cells_[std::size_t(o.buf[2])];
            if (o.mask == MaskPiece::Empty) { fail("coverage", fmt::format("{} computes a pair the mask empties", name(id)), {id}); break; }
            if (!q.bundle_ok) fail("coverage", fmt::format("{} uses a backward bundle packed from an incomplete output", name(id)), {id});
            if (!acc.set.insert(o.kv_owner)) fail("coverage", fmt::format("pair (Q{}, KV{}) is computed twice (again by {})", o.q_owner, o.kv_owner, name(id)), {id});
            if (bwd && !cells_[std::size_t(o.buf[3])].set.insert(o.q_owner))
              fail("coverage", fmt::format("dK/dV pair (Q{}, KV{}) is accumulated twice (again by {})", o.q_owner, o.kv_owner, name(id)), {id});
            break;
          }
          const Region rq = reg(o.buf[0]), rk = reg(o.buf[1]);
          bool any = false, bundle_ok = true, twice = false;
          const BufferId qt = root_of(o.buf[0]), at = root_of(o.buf[2]);
          const Region qr = reg(qt), ar = reg(at);
          for (std::int32_t x = rq.owner_begin; x < rq.owner_end; ++x)
            for (std::int32_t y = rk.owner_begin; y < rk.owner_end; ++y) {
              const MaskPiece m = p_.workload.mask(x, y, p_.ranks);
              if (m == MaskPiece::Empty) continue;
              for (std::int32_t p = rq.part_begin; p < rq.part_end; ++p)
                for (std::int32_t pk = rk.part_begin; pk < rk.part_end; ++pk) {
                  if (!visible(m, p, pk, x, y)) continue;
                  any = true;
                  for (std::int32_t g = rq.head_begin; g < (split_heads_ ? rq.head_end : rq.head_begin + 1); ++g) {
                    bundle_ok &= cells_[cell_at(qt, qr, x, g, p)].bundle_ok;
                    if (!add(cells_[cell_at(at, ar, x, g, p)], y * P + pk) && !twice) {
                      twice = true;
                      fail("coverage", fmt::format("pair (Q{}, KV{}) of {} is computed twice (again by {})", block(x * P + p), block(y * P + pk),
                                                   cell_name(o.buf[2], x, g, p), name(id)), {id});
                    }
                  }
                }
            }
          if (!any) { fail("coverage", fmt::format("{} computes no pair the mask leaves visible", name(id)), {id}); break; }
          if (bwd && !bundle_ok) fail("coverage", fmt::format("{} uses a backward bundle packed from an incomplete output", name(id)), {id});
          if (!bwd) break;
          const BufferId kt = root_of(o.buf[3]);
          const Region kr = reg(kt);
          for (std::int32_t y = rk.owner_begin; y < rk.owner_end; ++y)
            for (std::int32_t x = rq.owner_begin; x < rq.owner_end; ++x) {
              const MaskPiece m = p_.workload.mask(x, y, p_.ranks);
              if (m == MaskPiece::Empty) continue;
              for (std::int32_t pk = rk.part_begin; pk < rk.part_end; ++pk)
                for (std::int32_t p = rq.part_begin; p < rq.part_end; ++p) {
                  if (!visible(m, p, pk, x, y)) continue;
                  for (std::int32_t g = rk.head_begin; g < (split_heads_ ? rk.head_end : rk.head_begin + 1); ++g)
                    if (!add(cells_[cell_at(kt, kr, y, g, pk)], x * P + p) && !twice) {
                      twice = true;
                      fail("coverage", fmt::format("dK/dV pair (Q{}, KV{}) of {} is accumulated twice (again by {})", block(x * P + p),
                                                   block(y * P + pk), cell_name(o.buf[3], y, g, pk), name(id)), {id});
                    }
                }
            }
          break;
        }
        case OpKind::Send: (void)reads_all(id, o.buf[0]); break;
        case OpKind::Recv: {
          const OpId s = peer_[std::size_t(id)];
          CHARM_ASSERT(s == prev, "the replay completes a send right before its receive");
          const BufferId src = p_.op(s).buf[0], st = root_of(src);
          const Region sr = regions_ ? reg(st) : Region{};
          for_whole(o.buf[0], [&](std::size_t c, std::int32_t x, std::int32_t g, std::int32_t p) {
            if (!regions_) cells_[c] = cells_[std::size_t(st)];
            else assign(cells_[c], cells_[cell_at(st, sr, x, g, p)]);  // equal regions (matching)
          });
          break;
        }
        case OpKind::Merge:
        case OpKind::Accumulate: {
          if (!reads_all(id, o.buf[0]) || !reads_all(id, o.buf[1])) break;  // equal regions (structure)
          const BufferId pt = root_of(o.buf[0]);
          const Region pr = regions_ ? reg(pt) : Region{};
          bool reported = false;
          for_whole(o.buf[1], [&](std::size_t c, std::int32_t x, std::int32_t g, std::int32_t p) {
            Cell& part = cells_[cell_at(pt, pr, x, g, p)];
            auto overlap = regions_ ? merge(cells_[c], part) : cells_[c].set.merge(part.set);
            if (!overlap.empty() && !reported) {
              reported = true;
              fail("coverage", fmt::format("{} combines pairs already present: {} of {} counted twice", name(id), blocks(overlap),
                                           regions_ ? cell_name(o.buf[1], x, g, p) : buffer_label(p_, o.buf[1])), {id});
            }
          });
          break;
        }
        case OpKind::Copy:
          if (o.buf[3] != kNone) {
            if (!reads_all(id, o.buf[0]) || !reads_all(id, o.buf[1]) || !reads_all(id, o.buf[2])) break;  // equal regions
            const BufferId ot = root_of(o.buf[2]);
            const Region orr = regions_ ? reg(ot) : Region{};
            bool reported = false;
            for_whole(o.buf[3], [&](std::size_t c, std::int32_t x, std::int32_t g, std::int32_t p) {
              const Cell& have = cells_[cell_at(ot, orr, x, g, p)];
              const auto& want = expected_kv(x, p);
              const bool ok = same_blocks(have, want);
              if (!ok && !reported) {
                reported = true;
                fail("coverage", fmt::format("{} packs the backward bundle from an output that is not final{}: {}", name(id),
                                             regions_ ? " (" + cell_name(o.buf[2], x, g, p) + ")" : "", describe(blocks_of(have), want, "kv blocks")), {id});
              }
              cells_[c].bundle_ok = ok;
              cells_[c].written = true;
            });
          } else {
            if (!regions_) {
              if (reads_all(id, o.buf[0])) cells_[std::size_t(o.buf[1])] = cells_[std::size_t(o.buf[0])];
              break;
            }
            const Region r = reg(o.buf[0]).intersect(reg(o.buf[1]));
            if (!reads(id, o.buf[0], r)) break;
            const BufferId st = root_of(o.buf[0]);
            const Region sr = reg(st);
            for_cells(o.buf[1], r, [&](std::size_t c, std::int32_t x, std::int32_t g, std::int32_t p) { assign(cells_[c], cells_[cell_at(st, sr, x, g, p)]); });
          }
          break;
      }
      prev = id;
    }
    const auto pass = p_.workload.pass;
    // Every cell of every result (whole shards of their rank: structure).
    auto final_check = [&](RankId r, BufferId b, const char* what, const char* of, bool dkv) {
      for_whole(b, [&](std::size_t c, std::int32_t, std::int32_t g, std::int32_t p) {
        if (full()) return;
        std::string where;
        if (split_heads_) where += fmt::format(" head {}", g);
        if (P > 1) where += fmt::format(" part {}", p);
        const auto& want = dkv ? expected_q(r, p) : expected_kv(r, p);
        const Cell& have = cells_[c];
        if (!have.written) fail("coverage", fmt::format("rank {}: final {}{} is never written: {}", r, what, where, describe(have.set, want, of)));
        else if (!same_blocks(have, want)) fail("coverage", fmt::format("rank {}: final {}{}{}", r, what, where.empty() ? " " : where + ": ", describe(blocks_of(have), want, of)));
      });
    };
    for (RankId r = 0; r < p_.ranks && !full(); ++r) {
      const auto& res = p_.results()[std::size_t(r)];
      if (pass == PassKind::Fwd || pass == PassKind::Both) final_check(r, res.out, "output", "kv blocks", false);
      if (pass != PassKind::Fwd) {
        final_check(r, res.dq, "dQ", "kv blocks", false);
        final_check(r, res.dkv, "dK/dV", "query blocks", true);
      }
    }
  }

  const Plan& p_;
  ValidateOptions opt_;
  std::size_t n_;
  ValidationReport report_;
  std::vector<std::vector<OpId>> queues_;
  std::vector<std::uint32_t> pos_, group_start_, succ_begin_;
  std::vector<OpId> succ_, peer_, order_;
  std::vector<std::array<std::uint32_t, kNumStreams>> vc_;
  // Regions (structure): which features the plan uses, so a plain plan pays for none.
  std::int32_t kv_heads_ = 1;
  bool regions_ = false;      // some buffer is not one whole shard, or parts > 1
  bool views_ = false;        // some buffer is a view
  bool split_heads_ = false;  // some buffer holds part of the kv heads
  bool reuses_ = false;       // some buffer takes over the storage of another
  std::vector<std::uint32_t> cell_base_;  // per buffer: its first cell (roots; regions_ only)
  std::vector<Cell> cells_;
  std::array<std::vector<char>, 7> part_table_;  // per mask piece: visible (q part, kv part)
  std::vector<std::pair<bool, IntervalSet>> exp_kv_, exp_q_;
  std::vector<std::vector<std::uint64_t>> dense_;  // bitmaps of fragmented cells
  std::vector<std::int32_t> free_dense_;
};

} // namespace

std::string ValidationReport::summary(const Plan& plan) const {
  if (!ok()) {
    const auto& v = violations.front();
    const std::string more = !capped               ? fmt::format(" (and {} more)", violations.size() - 1)
                             : violations.size() > 1 ? fmt::format(" (and {} more before the validator stopped looking; "
                                                                   "charm validate --all lists every one)",
                                                                   violations.size() - 1)
                                                     : " (the validator stopped looking; charm validate --all lists every one)";
    return fmt::format("invalid: [{}] {}{}", v.rule, v.message, violations.size() > 1 || capped ? more : "");
  }
  return fmt::format("valid: {} {} {} ranks x {} domain(s), {} ops ({} compute, {} messages, {:.3g} GB moved, {:.3g} TFLOP)",
                     plan.algo, to_string(plan.workload.pass), plan.ranks, plan.domains, ops, computes, messages,
                     bytes_moved / 1e9, flops / 1e12);
}

ValidationReport validate(const Plan& plan, const ValidateOptions& opt) { return Validator(plan, opt).run(); }

} // namespace charm::sched
