#include "scheduler/validate/validator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/strong_components.hpp>
#include <limits>
#include <map>
#include <optional>
#include <tuple>
#include <variant>

#include "scheduler/ir/buffer_rules.hpp"
#include "scheduler/ir/op_args.hpp"
#include "scheduler/ir/plan_index.hpp"
#include "scheduler/validate/cell_store.hpp"
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
    build_index();
    if (!acyclic()) return std::move(report_);
    if (!matching()) return std::move(report_);
    msgs_ = {};  // only matching() reads them
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
  std::string name(OpId id) const {
    return fmt::format("op {} (rank {}, {}: {})", id, p_.op(id).rank, to_string(p_.op(id).stream), op_label(p_, id));
  }

  void stats() {
    report_.ops = n_;
    for (const Op& o : p_.ops()) {
      if (o.kind == OpKind::Compute) {
        ++report_.computes;
        report_.flops += o.flops;
      }
      if (o.kind == OpKind::Send) {
        ++report_.messages;
        report_.bytes_moved += double(o.bytes);
      }
    }
  }

  // -------------------------------------------------------------- structure
  /// A buffer's region, defaults resolved (Plan::region, inline: it runs for every slot of every op).
  Region reg(BufferId b) const {
    const Buffer& x = p_.buffer(b);
    return {x.owner,      x.owner + x.owners,
            x.head_begin, x.heads == 0 ? kv_heads_ : x.head_begin + x.heads,
            x.part_begin, x.parts == 0 ? p_.parts : x.part_begin + x.parts};
  }
  /// The buffer whose storage b is (structure() has made sure a view's parent is no view).
  BufferId root_of(BufferId b) const { return views_ && p_.buffer(b).parent != kNone ? p_.buffer(b).parent : b; }
  /// Equal regions (in a plain plan: the same owner, without computing regions).
  bool same_region(BufferId a, BufferId b) const {
    return regions_ ? same_region_slow(a, b) : p_.buffer(a).owner == p_.buffer(b).owner;
  }
  bool same_region_slow(BufferId a, BufferId b) const { return reg(a) == reg(b); }
  std::string label(BufferId b) const { return fmt::format("buffer {} ({})", b, buffer_label(p_, b)); }
  /// A root buffer, or one owner of it (lifetime).
  std::string storage(BufferId b, RankId owner) const {
    return owner == kNone ? label(b) : fmt::format("{} owner {}", label(b), owner);
  }
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
    regions_ = true;
    split_heads_ |= reg(b).heads() != kv_heads_;
    views_ |= bf.parent != kNone;
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

  bool structure() {
    if (!check_plan_shape()) return false;
    kv_heads_ = static_cast<std::int32_t>(p_.workload.kv_heads);
    regions_ = p_.parts != 1;
    for (BufferId b = 0; b < BufferId(p_.buffers().size()); ++b) check_buffer(b);
    if (!report_.ok()) return false;  // the op rules below read regions and follow views
    if (regions_ && !count_cells()) return false;
    for (OpId id = 0; id < OpId(n_); ++id) check_op(id);
    check_results();
    if (report_.ok()) check_reuse_structure();
    return report_.ok();
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
                     if (regions_ ? !reg(c.src).contains(reg(c.dst)) && !reg(c.dst).contains(reg(c.src))
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
    if (regions_ && (bq.head_begin != bk.head_begin || reg(q).head_end != reg(kv).head_end)) {
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
      reuses_ = true;
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

  // ----------------------------------------------------- streams and groups
  /// Lanes, groups, partners and dependents (ir::PlanIndex); the sorted messages stay for matching().
  void build_index() { idx_.emplace(p_, &msgs_); }
  /// Places (in the index's stream order) of the group before `id`'s group on its stream (empty at the front).
  std::pair<std::uint32_t, std::uint32_t> prev_group(OpId id) const {
    const std::uint32_t start = idx_->group_begin(id);
    if (start == idx_->lane_begin(idx_->lane_of(id))) return {start, start};
    return {idx_->group_begin(idx_->at(start - 1)), start};
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
      for (std::uint32_t k = b; k < e; ++k) fn(idx_->at(k));
    };
    succ_begin_.assign(n_ + 1, 0);
    for (OpId id = 0; id < OpId(n_); ++id)
      for_preds(id, [&](OpId d) {
        ++succ_begin_[std::size_t(d) + 1];
        ++indeg[std::size_t(id)];
      });
    for (std::size_t i = 0; i < n_; ++i) succ_begin_[i + 1] += succ_begin_[i];
    succ_.assign(succ_begin_[n_], 0);
    {
      auto fillpos = succ_begin_;
      for (OpId id = 0; id < OpId(n_); ++id) for_preds(id, [&](OpId d) { succ_[fillpos[std::size_t(d)]++] = id; });
    }
    std::vector<OpId> stack;
    for (OpId id = 0; id < OpId(n_); ++id)
      if (indeg[std::size_t(id)] == 0) stack.push_back(id);
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
      if (indeg[v] > 0 && size[std::size_t(comp[v])] > 1 && (cyc.empty() || comp[v] == comp[std::size_t(cyc[0])]))
        cyc.push_back(OpId(v));
    std::string names;
    for (OpId c : cyc) names += (names.empty() ? "" : "; ") + name(c);
    fail("acyclic", fmt::format("dependencies and stream order form a cycle through {}", names), cyc);
    return false;
  }

  // --------------------------------------------------------------- matching
  bool matching() {
    // The index sorted both lists by (stream, src, dst, tag, id) and paired them
    // the same way; here every pair is judged and every leftover reported.
    const auto& sends = msgs_.sends;
    const auto& recvs = msgs_.recvs;
    auto key = [](const Message& m) { return m.key(); };
    std::size_t i = 0, j = 0;
    while ((i < sends.size() || j < recvs.size()) && !full()) {
      if (j == recvs.size() || (i < sends.size() && key(sends[i]) < key(recvs[j]))) {
        fail("matching", fmt::format("{} has no matching receive on rank {}", name(sends[i].id), sends[i].dst),
             {sends[i].id});
        ++i;
      } else if (i == sends.size() || key(recvs[j]) < key(sends[i])) {
        fail("matching", fmt::format("{} has no matching send on rank {}", name(recvs[j].id), recvs[j].src),
             {recvs[j].id});
        ++j;
      } else {
        const OpId s = sends[i].id, r = recvs[j].id;
        if (i + 1 < sends.size() && key(sends[i + 1]) == key(sends[i]))
          fail("matching", fmt::format("{} and {} use the same tag", name(s), name(sends[i + 1].id)),
               {s, sends[i + 1].id});
        if (j + 1 < recvs.size() && key(recvs[j + 1]) == key(recvs[j]))
          fail("matching", fmt::format("{} and {} use the same tag", name(r), name(recvs[j + 1].id)),
               {r, recvs[j + 1].id});
        const Op &so = p_.op(s), &ro = p_.op(r);
        const BufferId sbuf = std::get<SendArgs>(args(so)).src, rbuf = std::get<RecvArgs>(args(ro)).dst;
        const Buffer &sb = p_.buffer(sbuf), &rb = p_.buffer(rbuf);
        if (so.bytes != ro.bytes)
          fail("matching", fmt::format("{} sends {} bytes but {} expects {}", name(s), so.bytes, name(r), ro.bytes),
               {s, r});
        else if (so.bytes != sb.bytes)
          fail("matching", fmt::format("{} sends {} bytes of a {}-byte buffer", name(s), so.bytes, sb.bytes), {s});
        if (sb.kind != rb.kind || sb.bytes != rb.bytes || !same_region(sbuf, rbuf))
          fail("matching",
               fmt::format("{} sends {} into {} at {}", name(s), buffer_label(p_, sbuf), buffer_label(p_, rbuf),
                           name(r)),
               {s, r});
        ++i, ++j;
      }
    }
    if (!report_.ok()) return false;
    // Issue order: the k-th send of a (stream, src, dst) must meet the k-th receive.
    // Tags are unique per (stream, src, dst) by now, so if ids rise with tags
    // in every group of both sorted lists, tags rise in issue order: nothing to report.
    auto in_issue_order = [&](const std::vector<Message>& v) {
      for (std::size_t k = 0; k + 1 < v.size(); ++k)
        if (v[k].stream == v[k + 1].stream && v[k].src == v[k + 1].src && v[k].dst == v[k + 1].dst &&
            v[k].id > v[k + 1].id)
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
      if (o.tag <= prev)
        fail("matching",
             fmt::format("{} is issued after a message with a later tag: NCCL pairs messages in issue order", name(id)),
             {id});
      prev = o.tag;
    }
    return report_.ok();
  }

  // --------------------------------------------------------------- deadlock
  // Completion order under NCCL semantics; also the order the later checks replay.
  bool deadlock() {
    std::vector<std::uint32_t> pending_deps(n_);
    for (OpId id = 0; id < OpId(n_); ++id) pending_deps[std::size_t(id)] = std::uint32_t(p_.deps(id).size());
    const std::size_t lanes = idx_->lanes();
    std::vector<std::uint32_t> head(lanes);  // per lane: the place of its first op not done
    for (std::size_t l = 0; l < lanes; ++l) head[l] = idx_->lane_begin(l);
    std::vector<char> posted(n_, 0), done(n_, 0);
    order_.clear();
    order_.reserve(n_);
    // FIFO of lanes to look at; a lane is in it at most once, so a ring of
    // lanes + 1 slots never overflows.
    std::vector<std::uint32_t> work(lanes + 1);
    std::size_t work_head = 0, work_tail = 0;
    auto push_work = [&](std::size_t l) {
      work[work_tail] = std::uint32_t(l);
      work_tail = (work_tail + 1) % work.size();
    };
    for (std::size_t l = 0; l < lanes; ++l)
      if (head[l] < idx_->lane_end(l)) push_work(l);
    std::vector<char> queued(lanes, 1);
    auto wake = [&](std::size_t l) {
      if (!queued[l]) {
        queued[l] = 1;
        push_work(l);
      }
    };
    auto complete = [&](OpId id) {
      done[std::size_t(id)] = 1;
      order_.push_back(id);
      for (OpId d : idx_->dependents(id))
        if (--pending_deps[std::size_t(d)] == 0) wake(idx_->lane_of(d));
      wake(idx_->lane_of(id));
    };
    // Posts the ready members of the group [start, end); a send and its receive complete together.
    auto post_group = [&](std::uint32_t start, std::uint32_t end) {
      for (std::uint32_t k = start; k < end; ++k) {
        const OpId id = idx_->at(k);
        if (done[std::size_t(id)] || posted[std::size_t(id)]) continue;
        const Op& o = p_.op(id);
        if (!is_comm(o)) {
          complete(id);
          continue;
        }
        posted[std::size_t(id)] = 1;
        const OpId m = idx_->partner(id);
        if (posted[std::size_t(m)] && !done[std::size_t(m)]) {
          // Rendezvous: the send completes with its receive (send first in the order).
          if (o.kind == OpKind::Send) {
            complete(id);
            complete(m);
          } else {
            complete(m);
            complete(id);
          }
        }
      }
    };
    while (work_head != work_tail) {
      const std::size_t l = work[work_head];
      work_head = (work_head + 1) % work.size();
      queued[l] = 0;
      while (head[l] < idx_->lane_end(l)) {
        const std::uint32_t start = head[l], end = idx_->group_end_at(start);
        bool ready = true;
        for (std::uint32_t k = start; k < end && ready; ++k) ready = pending_deps[std::size_t(idx_->at(k))] == 0;
        if (!ready) break;
        post_group(start, end);
        bool all = true;
        for (std::uint32_t k = start; k < end && all; ++k) all = done[std::size_t(idx_->at(k))];
        if (!all) break;
        head[l] = end;
      }
    }
    if (order_.size() == n_) return true;
    report_deadlock(head, pending_deps);
    return false;
  }
  /// The ops at the head of the first stuck streams and what each waits for.
  void report_deadlock(const std::vector<std::uint32_t>& head, const std::vector<std::uint32_t>& pending_deps) {
    std::vector<OpId> stuck;
    std::string names;
    for (std::size_t l = 0; l < idx_->lanes() && stuck.size() < 6; ++l) {
      if (head[l] >= idx_->lane_end(l)) continue;
      const OpId id = idx_->at(head[l]);
      const Op& o = p_.op(id);
      std::string why;
      if (pending_deps[std::size_t(id)] > 0)
        why = "waits for its dependencies";
      else if (is_comm(o))
        why = fmt::format("waits for rank {} to post the matching {}", o.peer,
                          o.kind == OpKind::Send ? "receive" : "send");
      else
        why = "waits for its group";
      stuck.push_back(id);
      names += fmt::format("{}{} {}", names.empty() ? "" : "; ", name(id), why);
    }
    fail("deadlock",
         fmt::format("{} of {} ops can never run under NCCL point-to-point semantics: {}", n_ - order_.size(), n_,
                     names),
         stuck);
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
      for (std::uint32_t k = b; k < e; ++k) absorb(idx_->at(k));
      auto& mine = v[std::size_t(p_.op(id).stream)];
      mine = std::max(mine, idx_->pos(id) + 1);
    }
  }
  /// a happens before b; both on one rank (the accesses of one buffer).
  bool hb(OpId a, OpId b) const {
    if (a == b) return true;
    // One stream: a is in an earlier group than b (members of one ncclGroup
    // may complete in any order; a lone op is a group of its own).
    if (p_.op(a).stream == p_.op(b).stream) return idx_->pos(a) < idx_->group_begin(b);
    return vc_[std::size_t(b)][std::size_t(p_.op(a).stream)] >= idx_->pos(a) + 1;
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
    for (OpId id : order_)
      for_each_access(p_.op(id), [&](BufferId b, int s, bool w) {
        ac.all[fill[std::size_t(root_of(b))]++] = {id, std::uint8_t(s), w};
      });
    return ac;
  }

  void lifetime() {
    const Accesses ac = accesses();
    if (reuses_) check_reuse_order(ac);
    std::vector<std::uint32_t> obegin;  // per owner of one root: its accesses, in time order
    std::vector<Access> by_owner;
    for (BufferId b = 0; b < BufferId(p_.buffers().size()) && !full(); ++b) {
      const std::span<const Access> a = ac.of(b);
      if (a.empty()) continue;
      const Buffer& rb = p_.buffer(b);
      if (!regions_ || rb.owners == 1) {
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

  // --------------------------------------------------------------- coverage
  // Symbolic state per *cell* of a root buffer: (owner, kv head, token part)
  // (cell_store.hpp). The head dimension collapses to one cell when every
  // buffer holds all kv heads, the part dimension when Plan::parts is 1, so a
  // plain plan has one cell per buffer and cell = buffer id. Set elements are
  // kv blocks y * parts + part (Out, Dq cells) or query blocks x * parts + part (Dkv).
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
        fail("structure",
             fmt::format("the buffers hold more than {} (owner, kv head, part) cells, more than the validator tracks",
                         kMaxCells));
        return false;
      }
    }
    cell_base_[nb] = std::uint32_t(total);
    return true;
  }
  /// Cell of (owner x, kv head g, part p) in root rt (region rr).
  std::size_t cell_at(BufferId rt, const Region& rr, std::int32_t x, std::int32_t g, std::int32_t p) const {
    if (!regions_) return std::size_t(rt);
    const std::size_t nh = split_heads_ ? std::size_t(rr.heads()) : 1,
                      gi = split_heads_ ? std::size_t(g - rr.head_begin) : 0;
    return cell_base_[std::size_t(rt)] + (std::size_t(x - rr.owner_begin) * nh + gi) * std::size_t(rr.parts()) +
           std::size_t(p - rr.part_begin);
  }
  /// The cells of b's root: cell(x, g, p) for an owner, head and part of the root's region.
  struct RootCells {
    const Validator* v;
    BufferId rt;
    Region rr;
    std::size_t operator()(std::int32_t x, std::int32_t g, std::int32_t p) const { return v->cell_at(rt, rr, x, g, p); }
  };
  RootCells root_cells(BufferId b) const {
    const BufferId rt = root_of(b);
    return {this, rt, regions_ ? reg(rt) : Region{}};
  }
  /// One past the last kv head a loop over region r visits (one head when heads collapse).
  std::int32_t head_end(const Region& r) const { return split_heads_ ? r.head_end : r.head_begin + 1; }
  /// fn(cell, x, g, p) for every cell of region r (inside buffer b's region), in (owner, head, part) order.
  template <class Fn>
  void for_cells(BufferId b, const Region& r, Fn&& fn) const {
    if (!regions_) {
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
    if (!regions_)
      fn(std::size_t(b), p_.buffer(b).owner, 0, 0);
    else
      for_cells(b, reg(b), fn);
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
  bool reads_all(OpId id, BufferId b) { return (!regions_ && cells_[std::size_t(b)].written) || reads_all_slow(id, b); }
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
  void coverage() {
    if (!report_.ok()) return;  // replaying a racy plan proves nothing
    init_cells();
    // The replay order completes each send immediately before its receive
    // (deadlock()'s rendezvous), so a receive reads the send's buffer as the
    // send left it: nothing needs to be kept per message in flight.
    OpId prev = kNone;
    for (OpId id : order_) {
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
    cells_.reset(regions_ ? cell_base_[nb] : nb, std::size_t(p_.ranks) * std::size_t(p_.parts), regions_);
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
    if (!regions_) {
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
    const OpId s = idx_->partner(id);
    CHARM_ASSERT(s == prev, "the replay completes a send right before its receive");
    const BufferId src = std::get<SendArgs>(args(p_.op(s))).src;
    if (!regions_) {
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
      auto overlap = regions_ ? cells_.merge(cells_[c], part) : cells_[c].set.merge(part.set);
      if (!overlap.empty() && !reported) {
        reported = true;
        fail("coverage",
             fmt::format("{} combines pairs already present: {} of {} counted twice", name(id), blocks(overlap),
                         regions_ ? cell_name(acc, x, g, p) : buffer_label(p_, acc)),
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
                         regions_ ? " (" + cell_name(k.out, x, g, p) + ")" : "",
                         describe(cells_.blocks_of(have), want, "kv blocks")),
             {id});
      }
      cells_[c].bundle_ok = ok;
      cells_[c].written = true;
    });
  }

  /// A plain copy moves the overlap of the two regions.
  void cover_copy(OpId id, BufferId src, BufferId dst) {
    if (!regions_) {
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
      if (split_heads_) where += fmt::format(" head {}", g);
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

  const Plan& p_;
  ValidateOptions opt_;
  std::size_t n_;
  ValidationReport report_;
  std::optional<PlanIndex> idx_;  // built once structure() holds
  MessageOrder msgs_;             // the index's sorted sends and receives
  std::vector<std::uint32_t> succ_begin_;
  std::vector<OpId> succ_, order_;
  std::vector<std::array<std::uint32_t, kNumStreams>> vc_;
  // Regions (structure): which features the plan uses, so a plain plan pays for none.
  std::int32_t kv_heads_ = 1;
  bool regions_ = false;                  // some buffer is not one whole shard, or parts > 1
  bool views_ = false;                    // some buffer is a view
  bool split_heads_ = false;              // some buffer holds part of the kv heads
  bool reuses_ = false;                   // some buffer takes over the storage of another
  std::vector<std::uint32_t> cell_base_;  // per buffer: its first cell (roots; regions_ only)
  CellStore cells_;
  // Per mask piece of a shape (Positions is computed pair by pair): visible (q part, kv part).
  std::array<std::vector<char>, std::size_t(MaskPiece::Positions)> part_table_;
  std::vector<std::pair<bool, IntervalSet>> exp_kv_, exp_q_;
};

}  // namespace

std::string ValidationReport::summary(const Plan& plan) const {
  if (!ok()) {
    const auto& v = violations.front();
    const std::string more = !capped ? fmt::format(" (and {} more)", violations.size() - 1)
                             : violations.size() > 1
                                 ? fmt::format(" (and {} more before the validator stopped looking; "
                                               "charm validate --all lists every one)",
                                               violations.size() - 1)
                                 : " (the validator stopped looking; charm validate --all lists every one)";
    return fmt::format("invalid: [{}] {}{}", v.rule, v.message, violations.size() > 1 || capped ? more : "");
  }
  return fmt::format(
      "valid: {} {} {} ranks x {} domain(s), {} ops ({} compute, {} messages, {:.3g} GB moved, {:.3g} TFLOP)",
      plan.algo, to_string(plan.workload.pass), plan.ranks, plan.domains, ops, computes, messages, bytes_moved / 1e9,
      flops / 1e12);
}

ValidationReport validate(const Plan& plan, const ValidateOptions& opt) {
  CHARM_ASSERT(!plan.symmetry.active(), "the validator proves full plans (a quotient's symmetry: ir::check_symmetric)");
  return Validator(plan, opt).run();
}

}  // namespace charm::sched
