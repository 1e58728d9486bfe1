// The stream checks (validator.hpp): acyclic (dependencies plus stream order form a DAG) and
// matching (every Send meets exactly one Recv, in issue order, as NCCL pairs them).
#include <fmt/format.h>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/strong_components.hpp>
#include <map>
#include <tuple>
#include <variant>

#include "scheduler/ir/op_args.hpp"
#include "scheduler/validate/check.hpp"

namespace charm::sched::checks {

namespace {

class Streams : Check {
 public:
  explicit Streams(State& s) : Check(s) {}

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
      for (std::uint32_t k = b; k < e; ++k) fn(s_.index->at(k));
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
    const auto& sends = s_.messages.sends;
    const auto& recvs = s_.messages.recvs;
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
    if (!ok()) return false;
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
    return ok();
  }

 private:
  std::vector<std::uint32_t> succ_begin_;  // acyclic's successors (CSR), for a plan whose ids are not in order
  std::vector<OpId> succ_;
};

}  // namespace

bool check_acyclic(State& s) { return Streams(s).acyclic(); }
bool check_matching(State& s) { return Streams(s).matching(); }

}  // namespace charm::sched::checks
