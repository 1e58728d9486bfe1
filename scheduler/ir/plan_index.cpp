#include "scheduler/ir/plan_index.hpp"

#include <algorithm>

namespace charm::ir {

namespace {

// A function object, not a function: std::sort then inlines the comparison (ids are
// unique, so the order is total and the result is the same either way).
constexpr auto message_less = [](const Message& a, const Message& b) {
  return a.key() < b.key() || (a.key() == b.key() && a.id < b.id);
};

/// Sorts by (stream, src, dst, tag, id): a stable counting sort on (stream, src), then each bucket that is not
/// in order yet by a stable counting sort on dst, which leaves each (stream, src, dst) run in id order: tag order
/// where the planner issued tags so (every planner does; plan.hpp). A bucket still out of order is sorted whole,
/// and an endpoint out of range (a broken plan) makes one general sort: the order is the same.
void sort_by_key(std::vector<Message>& v, std::size_t ranks) {
  const std::size_t buckets = kNumStreams * ranks;
  auto bucket = [&](const Message& m) { return std::size_t(m.stream) * ranks + std::size_t(m.src); };
  std::vector<std::uint32_t> b(buckets + 1, 0);
  for (const Message& m : v) {
    if (m.src < 0 || std::size_t(m.src) >= ranks || m.dst < 0 || std::size_t(m.dst) >= ranks) {
      std::sort(v.begin(), v.end(), message_less);
      return;
    }
    ++b[bucket(m) + 1];
  }
  for (std::size_t k = 0; k < buckets; ++k) b[k + 1] += b[k];
  std::vector<Message> out(v.size());
  {
    auto fill = b;
    for (const Message& m : v) out[fill[bucket(m)]++] = m;
  }
  // By dst, stably: a counting sort where the bucket is large against the ranks, else a sort by (dst, id).
  std::vector<std::uint32_t> at_dst(ranks + 1, 0);  // zero between buckets
  for (std::size_t k = 0; k < buckets; ++k) {
    const auto first = out.begin() + std::ptrdiff_t(b[k]), last = out.begin() + std::ptrdiff_t(b[k + 1]);
    if (std::is_sorted(first, last, message_less)) continue;
    if (std::size_t(last - first) * 4 < ranks) {
      std::sort(first, last,
                [](const Message& x, const Message& y) { return x.dst < y.dst || (x.dst == y.dst && x.id < y.id); });
    } else {
      for (auto m = first; m != last; ++m) ++at_dst[std::size_t(m->dst) + 1];
      for (std::size_t d = 0; d < ranks; ++d) at_dst[d + 1] += at_dst[d];
      const auto scratch = v.begin() + std::ptrdiff_t(b[k]);  // v's place of the bucket is free now
      for (auto m = first; m != last; ++m) scratch[std::ptrdiff_t(at_dst[std::size_t(m->dst)]++)] = *m;
      std::copy(scratch, scratch + (last - first), first);
      std::fill(at_dst.begin(), at_dst.end(), 0);
    }
    if (!std::is_sorted(first, last, message_less)) std::sort(first, last, message_less);
  }
  v = std::move(out);
}

}  // namespace

MessageOrder sort_messages(const Plan& plan) {
  MessageOrder m;
  std::size_t sends = 0;
  for (const Op& o : plan.ops()) sends += o.kind == OpKind::Send;
  m.sends.reserve(sends);
  m.recvs.reserve(sends);  // as many in a matched plan
  // In a quotient plan a send of representative a to rank b is matched as its image
  // that lands on rep(b): from unapply(element(b), a) to rep(b) (symmetry.hpp).
  const RankSymmetry& sym = plan.symmetry;
  for (OpId id = 0; id < OpId(plan.size()); ++id) {
    const Op& o = plan.op(id);
    if (o.kind == OpKind::Send) {
      if (sym.active() && o.peer >= 0 && o.peer < plan.ranks)
        m.sends.push_back(
            {int(o.stream), sym.unapply(sym.element(o.peer), o.rank, plan.ranks), sym.rep(o.peer), o.tag, id});
      else
        m.sends.push_back({int(o.stream), o.rank, o.peer, o.tag, id});
    } else if (o.kind == OpKind::Recv) {
      m.recvs.push_back({int(o.stream), o.peer, o.rank, o.tag, id});
    }
  }
  sort_by_key(m.sends, std::size_t(plan.ranks));
  sort_by_key(m.recvs, std::size_t(plan.ranks));
  return m;
}

PlanIndex::PlanIndex(const Plan& plan, MessageOrder* messages, Parts parts) {
  build_lanes(plan, parts);
  build_partners(plan, messages);
  build_dependents(plan);
}

void PlanIndex::build_lanes(const Plan& plan, Parts parts) {
  const std::size_t n = plan.size(), lanes = std::size_t(plan.ranks) * kNumStreams;
  lane_begin_.assign(lanes + 1, 0);
  for (const Op& o : plan.ops()) {
    CHARM_ASSERT(o.rank >= 0 && o.rank < plan.ranks, "an op's rank lies inside the plan");
    ++lane_begin_[lane(o) + 1];
  }
  for (std::size_t l = 0; l < lanes; ++l) lane_begin_[l + 1] += lane_begin_[l];
  order_.assign(n, 0);
  auto fill = lane_begin_;
  if (parts == Parts::Lean) {
    lean_ = true;
    for (OpId id = 0; id < OpId(n); ++id) order_[fill[lane(plan.op(id))]++] = id;
    return;
  }
  lane_of_.resize(n);
  pos_.assign(n, 0);
  group_begin_.resize(n);
  // Stream order is id order, so one pass in id order places every op and, from
  // the op before it in its lane, finds where its group begins.
  std::vector<OpId> prev(lanes, kNone);
  for (OpId id = 0; id < OpId(n); ++id) {
    const Op& o = plan.op(id);
    const std::size_t l = lane(o);
    lane_of_[std::size_t(id)] = std::uint32_t(l);
    const std::uint32_t k = fill[l]++;
    order_[k] = id;
    pos_[std::size_t(id)] = k;
    const OpId p = prev[l];
    group_begin_[std::size_t(id)] = p != kNone && joins_group(plan.op(p), o) ? group_begin_[std::size_t(p)] : k;
    prev[l] = id;
  }
}

void PlanIndex::build_partners(const Plan& plan, MessageOrder* keep) {
  partner_.assign(plan.size(), kNone);
  MessageOrder m = sort_messages(plan);
  // Both lists in key order: each send takes the first receive of its key not taken yet.
  std::size_t j = 0;
  for (const Message& s : m.sends) {
    while (j < m.recvs.size() && m.recvs[j].key() < s.key()) ++j;
    if (j < m.recvs.size() && m.recvs[j].key() == s.key()) {
      partner_[std::size_t(s.id)] = m.recvs[j].id;
      partner_[std::size_t(m.recvs[j].id)] = s.id;
      ++j;
    }
  }
  if (keep != nullptr) *keep = std::move(m);
}

void PlanIndex::build_dependents(const Plan& plan) {
  const std::size_t n = plan.size();
  dependents_begin_.assign(n + 1, 0);
  for (OpId id = 0; id < OpId(n); ++id)
    for (OpId d : plan.deps(id)) ++dependents_begin_[std::size_t(d) + 1];
  for (std::size_t i = 0; i < n; ++i) dependents_begin_[i + 1] += dependents_begin_[i];
  dependents_.assign(dependents_begin_[n], 0);
  std::vector<std::uint32_t> fill(dependents_begin_.begin(), dependents_begin_.end() - 1);
  for (OpId id = 0; id < OpId(n); ++id)
    for (OpId d : plan.deps(id)) dependents_[fill[std::size_t(d)]++] = id;
}

std::size_t PlanIndex::memory_bytes() const {
  return (lane_begin_.capacity() + lane_of_.capacity() + pos_.capacity() + group_begin_.capacity() +
          dependents_begin_.capacity()) *
             sizeof(std::uint32_t) +
         (order_.capacity() + partner_.capacity() + dependents_.capacity()) * sizeof(OpId);
}

}  // namespace charm::ir
