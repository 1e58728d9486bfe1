#include "scheduler/validate/validator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/strong_components.hpp>
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
  bool structure() {
    const auto nb = static_cast<BufferId>(p_.buffers().size());
    const int R = p_.ranks;
    if (R < 1) { fail("structure", "plan has no ranks"); return false; }
    if (p_.results().size() != std::size_t(R)) { fail("structure", fmt::format("results list {} ranks, plan has {}", p_.results().size(), R)); return false; }
    for (BufferId b = 0; b < nb; ++b) {
      const Buffer& bf = p_.buffer(b);
      if (bf.rank < 0 || bf.rank >= R || bf.owner < 0 || bf.owner >= R) fail("structure", fmt::format("buffer {} has rank/owner out of range", b));
    }
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
          if (o.q_owner != p_.buffer(o.buf[0]).owner || o.kv_owner != p_.buffer(o.buf[1]).owner)
            fail("structure", fmt::format("{}: q/kv blocks do not match its buffers' owners", name(id)), {id});
          if (p_.buffer(o.buf[2]).owner != o.q_owner || (!fwd && p_.buffer(o.buf[3]).owner != o.kv_owner))
            fail("structure", fmt::format("{}: accumulates into a buffer of another owner", name(id)), {id});
          if (o.mask != p_.workload.mask(o.q_owner, o.kv_owner, R))
            fail("structure", fmt::format("{}: mask piece {} but the workload gives {}", name(id), to_string(o.mask),
                                          to_string(p_.workload.mask(o.q_owner, o.kv_owner, R))), {id});
          break;
        }
        case OpKind::Send:
        case OpKind::Recv:
          if (o.peer < 0 || o.peer >= R || o.peer == o.rank) fail("structure", fmt::format("{}: bad peer {}", name(id), o.peer), {id});
          else buf_ok(id, 0, {});
          if (o.stream == Stream::Compute) fail("structure", fmt::format("{}: messages travel on comm streams, not compute", name(id)), {id});
          break;
        case OpKind::Merge:
          if (buf_ok(id, 0, {BufKind::Out}) && buf_ok(id, 1, {BufKind::Out}) && p_.buffer(o.buf[0]).owner != p_.buffer(o.buf[1]).owner)
            fail("structure", fmt::format("{}: merges outputs of different owners", name(id)), {id});
          break;
        case OpKind::Accumulate:
          if (buf_ok(id, 0, {BufKind::Dq, BufKind::Dkv}) && buf_ok(id, 1, {BufKind::Dq, BufKind::Dkv})) {
            const Buffer &a = p_.buffer(o.buf[0]), &b = p_.buffer(o.buf[1]);
            if (a.kind != b.kind || a.owner != b.owner) fail("structure", fmt::format("{}: accumulates a {}{} into a {}{}", name(id), to_string(a.kind), a.owner, to_string(b.kind), b.owner), {id});
          }
          break;
        case OpKind::Copy:
          if (o.buf[3] != kNone) {
            if (buf_ok(id, 0, {BufKind::Q}) && buf_ok(id, 1, {BufKind::Dout}) && buf_ok(id, 2, {BufKind::Out}) && buf_ok(id, 3, {BufKind::QBundle})) {
              const RankId own = p_.buffer(o.buf[0]).owner;
              for (int k = 1; k < 4; ++k)
                if (p_.buffer(o.buf[k]).owner != own) fail("structure", fmt::format("{}: packs tensors of different owners", name(id)), {id});
            }
          } else if (buf_ok(id, 0, {}) && buf_ok(id, 1, {})) {
            if (p_.buffer(o.buf[0]).kind != p_.buffer(o.buf[1]).kind) fail("structure", fmt::format("{}: copies between buffer kinds", name(id)), {id});
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
      };
      if (pass != PassKind::Bwd) check(res.out, BufKind::Out, "out");
      if (pass != PassKind::Fwd) { check(res.dq, BufKind::Dq, "dq"); check(res.dkv, BufKind::Dkv, "dkv"); }
    }
    if (auto s = p_.workload.check(R); !s) fail("structure", "workload: " + s.error().message());
    return report_.ok();
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
        if (sb.kind != rb.kind || sb.owner != rb.owner || sb.bytes != rb.bytes)
          fail("matching", fmt::format("{} sends {}{} into {}{} at {}", name(s), to_string(sb.kind), sb.owner, to_string(rb.kind), rb.owner, name(r)), {s, r});
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
  bool hb(OpId a, OpId b) const {
    if (a == b) return true;
    return vc_[std::size_t(b)][std::size_t(p_.op(a).stream)] >= pos_[std::size_t(a)] + 1 &&
           !(p_.op(a).stream == p_.op(b).stream && pos_[std::size_t(b)] < pos_[std::size_t(a)]);
  }

  // --------------------------------------------------------------- lifetime
  void lifetime() {
    // Accesses per buffer in CSR form, filled in replay order, so each
    // buffer's list is already sorted by time (one op's own accesses in slot
    // order) and no buffer needs a vector of its own.
    struct Access { OpId op; bool write; };
    const std::size_t nb = p_.buffers().size();
    auto for_accesses = [&](OpId id, auto&& fn) {
      const Op& o = p_.op(id);
      auto rd = [&](int s) { fn(o.buf[s], false); };
      auto wr = [&](int s) { fn(o.buf[s], true); };
      switch (o.kind) {
        case OpKind::Compute: rd(0); rd(1); wr(2); if (o.phase == Phase::Bwd) wr(3); break;
        case OpKind::Send: rd(0); break;
        case OpKind::Recv: wr(0); break;
        case OpKind::Merge: case OpKind::Accumulate: rd(0); wr(1); break;
        case OpKind::Copy: if (o.buf[3] != kNone) { rd(0); rd(1); rd(2); wr(3); } else { rd(0); wr(1); } break;
      }
    };
    std::vector<std::uint32_t> begin(nb + 1, 0);
    for (OpId id = 0; id < OpId(n_); ++id) for_accesses(id, [&](BufferId b, bool) { ++begin[std::size_t(b) + 1]; });
    for (std::size_t b = 0; b < nb; ++b) begin[b + 1] += begin[b];
    std::vector<Access> all(begin[nb]);
    {
      auto fill = begin;
      for (OpId id : order_) for_accesses(id, [&](BufferId b, bool w) { all[fill[std::size_t(b)]++] = {id, w}; });
    }
    for (BufferId b = 0; b < BufferId(nb) && !full(); ++b) {
      const std::span<const Access> a(all.data() + begin[std::size_t(b)], all.data() + begin[std::size_t(b) + 1]);
      if (a.empty()) continue;
      const bool initialised = p_.buffer(b).init != BufInit::None;
      OpId writer = kNone;
      std::size_t seg_begin = 0;  // first access after `writer`
      for (std::size_t i = 0; i < a.size() && !full(); ++i) {
        if (writer == kNone && !initialised && !a[i].write) {
          auto w = std::find_if(a.begin() + std::ptrdiff_t(i), a.end(), [](const Access& x) { return x.write; });
          if (w == a.end()) fail("lifetime", fmt::format("{} reads buffer {} ({}{}) that nothing writes", name(a[i].op), b, to_string(p_.buffer(b).kind), p_.buffer(b).owner), {a[i].op});
          else fail("lifetime", fmt::format("{} reads buffer {} ({}{}) without waiting for {} that writes it", name(a[i].op), b,
                                            to_string(p_.buffer(b).kind), p_.buffer(b).owner, name(w->op)), {w->op, a[i].op});
          break;
        }
        if (writer != kNone && !hb(writer, a[i].op)) {
          fail("lifetime", fmt::format("{} touches buffer {} ({}{}) without waiting for {} that writes it", name(a[i].op), b,
                                       to_string(p_.buffer(b).kind), p_.buffer(b).owner, name(writer)), {writer, a[i].op});
          break;
        }
        if (a[i].write) {
          for (std::size_t k = seg_begin; k < i; ++k)
            if (!hb(a[k].op, a[i].op)) {
              fail("lifetime", fmt::format("{} overwrites buffer {} ({}{}) while {} may still read it", name(a[i].op), b,
                                           to_string(p_.buffer(b).kind), p_.buffer(b).owner, name(a[k].op)), {a[k].op, a[i].op});
              break;
            }
          writer = a[i].op;
          seg_begin = i + 1;
        }
      }
    }
  }

  // --------------------------------------------------------------- coverage
  struct Sym {
    bool written = false;
    IntervalSet set;  // pairs merged in: kv owners (Out, Dq) or query owners (Dkv)
    bool bundle_ok = true;
  };

  IntervalSet expected_kv_for(RankId q) const {
    IntervalSet s;
    for (RankId y = 0; y < p_.ranks; ++y) if (p_.workload.mask(q, y, p_.ranks) != MaskPiece::Empty) (void)s.insert(y);
    return s;
  }
  IntervalSet expected_q_for(RankId kv) const {
    IntervalSet s;
    for (RankId x = 0; x < p_.ranks; ++x) if (p_.workload.mask(x, kv, p_.ranks) != MaskPiece::Empty) (void)s.insert(x);
    return s;
  }
  std::string describe(const IntervalSet& have, const IntervalSet& want, const char* what) const {
    auto missing = want.minus(have), extra = have.minus(want);
    std::string s;
    if (!missing.empty()) s += fmt::format("missing {} {}", what, missing.str());
    if (!extra.empty()) s += fmt::format("{}unexpected {} {}", s.empty() ? "" : ", ", what, extra.str());
    return s;
  }

  void coverage() {
    if (!report_.ok()) return;  // replaying a racy plan proves nothing
    std::vector<Sym> sym(p_.buffers().size());
    for (BufferId b = 0; b < BufferId(sym.size()); ++b) {
      const Buffer& bf = p_.buffer(b);
      if (bf.init == BufInit::None) continue;
      sym[std::size_t(b)].written = true;
      if (bf.init == BufInit::Input && bf.kind == BufKind::Out) sym[std::size_t(b)].set = expected_kv_for(bf.owner);
    }
    // The replay order completes each send immediately before its receive
    // (deadlock()'s rendezvous), so a receive reads the send's buffer as the
    // send left it: nothing needs to be kept per message in flight.
    OpId prev = kNone;
    for (OpId id : order_) {
      if (full()) return;
      const Op& o = p_.op(id);
      auto S = [&](int slot) -> Sym& { return sym[std::size_t(o.buf[slot])]; };
      switch (o.kind) {
        case OpKind::Compute: {
          if (o.mask == MaskPiece::Empty) { fail("coverage", fmt::format("{} computes a pair the mask empties", name(id)), {id}); break; }
          if (!S(0).bundle_ok) fail("coverage", fmt::format("{} uses a backward bundle packed from an incomplete output", name(id)), {id});
          if (!S(2).set.insert(o.kv_owner)) fail("coverage", fmt::format("pair (Q{}, KV{}) is computed twice (again by {})", o.q_owner, o.kv_owner, name(id)), {id});
          if (o.phase == Phase::Bwd && !S(3).set.insert(o.q_owner))
            fail("coverage", fmt::format("dK/dV pair (Q{}, KV{}) is accumulated twice (again by {})", o.q_owner, o.kv_owner, name(id)), {id});
          break;
        }
        case OpKind::Send: break;
        case OpKind::Recv: {
          const OpId s = peer_[std::size_t(id)];
          CHARM_ASSERT(s == prev, "the replay completes a send right before its receive");
          const Sym& src = sym[std::size_t(p_.op(s).buf[0])];
          S(0).set = src.set;
          S(0).bundle_ok = src.bundle_ok;
          S(0).written = true;
          break;
        }
        case OpKind::Merge:
        case OpKind::Accumulate: {
          auto overlap = S(1).set.merge(S(0).set);
          if (!overlap.empty())
            fail("coverage", fmt::format("{} combines pairs already present: {} of {}{} counted twice", name(id), overlap.str(),
                                         to_string(p_.buffer(o.buf[1]).kind), p_.buffer(o.buf[1]).owner), {id});
          break;
        }
        case OpKind::Copy:
          if (o.buf[3] != kNone) {
            const RankId owner = p_.buffer(o.buf[2]).owner;
            const auto want = expected_kv_for(owner);
            const bool ok = S(2).set == want;
            if (!ok) fail("coverage", fmt::format("{} packs the backward bundle from an output that is not final: {}", name(id), describe(S(2).set, want, "kv blocks")), {id});
            S(3).bundle_ok = ok;
            S(3).written = true;
          } else {
            S(1) = S(0);
          }
          break;
      }
      prev = id;
    }
    const auto pass = p_.workload.pass;
    for (RankId r = 0; r < p_.ranks && !full(); ++r) {
      const auto& res = p_.results()[std::size_t(r)];
      if (pass == PassKind::Fwd || pass == PassKind::Both) {
        const auto want = expected_kv_for(r);
        const auto& have = sym[std::size_t(res.out)].set;
        if (!(have == want)) fail("coverage", fmt::format("rank {}: final output {}", r, describe(have, want, "kv blocks")));
      }
      if (pass != PassKind::Fwd) {
        const auto want_q = expected_kv_for(r);
        const auto& dq = sym[std::size_t(res.dq)].set;
        if (!(dq == want_q)) fail("coverage", fmt::format("rank {}: final dQ {}", r, describe(dq, want_q, "kv blocks")));
        const auto want_kv = expected_q_for(r);
        const auto& dkv = sym[std::size_t(res.dkv)].set;
        if (!(dkv == want_kv)) fail("coverage", fmt::format("rank {}: final dK/dV {}", r, describe(dkv, want_kv, "query blocks")));
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
};

} // namespace

std::string ValidationReport::summary(const Plan& plan) const {
  if (!ok()) {
    const auto& v = violations.front();
    return fmt::format("invalid: [{}] {}{}", v.rule, v.message,
                       violations.size() > 1 ? fmt::format(" (and {} more)", violations.size() - 1) : "");
  }
  return fmt::format("valid: {} {} {} ranks x {} domain(s), {} ops ({} compute, {} messages, {:.3g} GB moved, {:.3g} TFLOP)",
                     plan.algo, to_string(plan.workload.pass), plan.ranks, plan.domains, ops, computes, messages,
                     bytes_moved / 1e9, flops / 1e12);
}

ValidationReport validate(const Plan& plan, const ValidateOptions& opt) { return Validator(plan, opt).run(); }

} // namespace charm::sched
