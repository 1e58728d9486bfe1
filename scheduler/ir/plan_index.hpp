#pragma once
// PlanIndex: the structure every consumer of a plan walks, built once in
// O(ops + deps) as flat arrays (CSR; no maps, no per-op allocation), so the
// validator and the simulator can afford it on plans of tens of millions of ops.
//
// - Lanes: one per (rank, stream), lane = rank * kNumStreams + stream; a lane's
//   ops in stream order (id order, plan.hpp), all lanes one after the other in
//   `stream_order()`; pos(id) is an op's place in it.
// - Groups: consecutive Send/Recv of one lane with one group id >= 0 are one
//   ncclGroup; any other op is a group of its own. group_begin(id) and
//   group_end(id) bound an op's group in stream_order().
// - Partners: each Send with its Recv, matched by (stream, src, dst, tag) as
//   plan.hpp says (kNone where an op has no counterpart); in a quotient plan a
//   send to a rank outside the representatives meets the receive of its image
//   (symmetry.hpp).
// - Dependents: the reverse of Plan::deps.

#include <cassert>
#include <cstdint>
#include <span>
#include <tuple>
#include <vector>

#include "scheduler/ir/plan.hpp"

namespace charm::ir {

/// A Send or Recv as matching sees it: (stream, src, dst, tag), then the op id.
struct Message {
  std::int32_t stream, src, dst, tag;
  OpId id;
  [[nodiscard]] auto key() const { return std::tie(stream, src, dst, tag); }
};

/// The plan's sends and receives, each sorted by (stream, src, dst, tag, id):
/// a send and its receive sit at the same place of their lists' runs of one key.
struct MessageOrder {
  std::vector<Message> sends, recvs;
};
[[nodiscard]] MessageOrder sort_messages(const Plan& plan);

class PlanIndex {
 public:
  /// What an index holds. Lean: lanes (lane_begin, lane_end, lane_ops, ops_of, stream_order, at), partners
  /// and dependents, without the three per-op arrays that lane_of, pos, pos_in_lane and the group accessors
  /// read (12 bytes an op): what the simulator walks, which finds an op's lane and group from the ops themselves.
  enum class Parts : std::uint8_t { All, Lean };
  /// Every op's rank lies in [0, plan.ranks) (plan files are checked for it as
  /// they are read; the validator checks it before it builds an index). With
  /// `messages`, the sorted message lists the partners came from are left there.
  explicit PlanIndex(const Plan& plan, MessageOrder* messages = nullptr, Parts parts = Parts::All);
  [[nodiscard]] bool lean() const { return lean_; }
  /// Whether op `o` is in the ncclGroup of `before`, the op before it on its lane (plan.hpp).
  [[nodiscard]] static bool joins_group(const Op& before, const Op& o) {
    return is_comm(o) && o.group != kNone && is_comm(before) && before.group == o.group;
  }

  [[nodiscard]] static std::size_t lane(RankId r, Stream s) { return std::size_t(r) * kNumStreams + std::size_t(s); }
  [[nodiscard]] static std::size_t lane(const Op& o) { return lane(o.rank, o.stream); }
  /// The lane of op id (not in a lean index: lane(plan.op(id)) is the same).
  [[nodiscard]] std::size_t lane_of(OpId id) const {
    assert(!lean_ && "a lean index has no per-op lanes");
    return lane_of_[std::size_t(id)];
  }
  [[nodiscard]] std::size_t lanes() const { return lane_begin_.size() - 1; }
  /// Bounds of a lane in stream_order().
  [[nodiscard]] std::uint32_t lane_begin(std::size_t l) const { return lane_begin_[l]; }
  [[nodiscard]] std::uint32_t lane_end(std::size_t l) const { return lane_begin_[l + 1]; }
  [[nodiscard]] std::span<const OpId> lane_ops(std::size_t l) const { return span(lane_begin_[l], lane_begin_[l + 1]); }
  [[nodiscard]] std::span<const OpId> ops_of(RankId r, Stream s) const { return lane_ops(lane(r, s)); }
  /// Every op, lane by lane, each lane in stream order.
  [[nodiscard]] std::span<const OpId> stream_order() const { return order_; }
  /// Op id at place k of stream_order().
  [[nodiscard]] OpId at(std::uint32_t k) const { return order_[k]; }
  /// The place of op id in stream_order().
  [[nodiscard]] std::uint32_t pos(OpId id) const {
    assert(!lean_ && "a lean index has no places");
    return pos_[std::size_t(id)];
  }
  /// The place of op id in its lane (0 for the lane's first op).
  [[nodiscard]] std::uint32_t pos_in_lane(OpId id) const { return pos(id) - lane_begin_[lane_of(id)]; }

  /// First place (in stream_order()) of op id's group.
  [[nodiscard]] std::uint32_t group_begin(OpId id) const {
    assert(!lean_ && "a lean index has no groups");
    return group_begin_[std::size_t(id)];
  }
  /// One past the last place of the group that begins at place `first`.
  [[nodiscard]] std::uint32_t group_end_at(std::uint32_t first) const {
    assert(!lean_ && "a lean index has no groups");
    std::uint32_t e = first + 1;
    while (e < order_.size() && group_begin_[std::size_t(order_[e])] == first) ++e;
    return e;
  }
  [[nodiscard]] std::uint32_t group_end(OpId id) const { return group_end_at(group_begin(id)); }
  /// The members of op id's group, in stream order.
  [[nodiscard]] std::span<const OpId> group(OpId id) const { return span(group_begin(id), group_end(id)); }

  /// The matching Recv of a Send and Send of a Recv; kNone if it has none (or the op is local).
  [[nodiscard]] OpId partner(OpId id) const { return partner_[std::size_t(id)]; }
  /// The ops that depend on op id.
  [[nodiscard]] std::span<const OpId> dependents(OpId id) const {
    return {dependents_.data() + dependents_begin_[std::size_t(id)],
            dependents_.data() + dependents_begin_[std::size_t(id) + 1]};
  }

  /// Asks the cache for what partner(id) and dependents(id) read first (a hint: no effect on results).
  void prefetch(OpId id) const {
    __builtin_prefetch(&partner_[std::size_t(id)]);
    __builtin_prefetch(&dependents_begin_[std::size_t(id)]);
  }

  /// Bytes of heap memory the index holds.
  [[nodiscard]] std::size_t memory_bytes() const;

 private:
  [[nodiscard]] std::span<const OpId> span(std::uint32_t b, std::uint32_t e) const {
    return {order_.data() + b, order_.data() + e};
  }
  // The index keeps no reference to the plan: it describes the plan's shape (ops' lanes, groups,
  // messages, dependencies), so it stays valid for the plan moved, or scaled to another batch.
  void build_lanes(const Plan& plan, Parts parts);  // and the groups
  void build_partners(const Plan& plan, MessageOrder* keep);
  void build_dependents(const Plan& plan);

  bool lean_ = false;
  std::vector<std::uint32_t> lane_begin_;  // CSR over lanes into order_
  std::vector<OpId> order_;
  std::vector<std::uint32_t> lane_of_, pos_, group_begin_;  // per op
  std::vector<OpId> partner_;                               // per op
  std::vector<std::uint32_t> dependents_begin_;             // CSR over ops into dependents_
  std::vector<OpId> dependents_;
};

}  // namespace charm::ir
