#pragma once
// Rank symmetry: a group of rank permutations that maps a plan onto itself, so
// that every rank's timeline is a relabelled copy of its representative's.
//
// The group acts on blocks of `block` consecutive ranks. Element g in
// [0, ranks / block) maps rank x to
//   Rotate: (x + g * block) mod ranks
//   Xor:    x ^ (g * block)            (block and ranks / block powers of two)
// Every rank r is the image of its representative rep(r) = r % block under
// element(r) = r / block.
//
// A *quotient plan* (Plan::symmetry active) holds the ops and buffers of the
// representatives, ranks [0, block), only; their Send/Recv peers may be any rank.
// A Send of representative a to rank b stands for its image under the inverse of
// element(b): a send of rank unapply(element(b), a) to rep(b), which the Recv
// of rep(b) with that peer and tag receives. The simulator runs such a plan when
// the topology has the same symmetry (sim::quotient_symmetry).

#include <cstdint>
#include <string>

#include "support/expected.hpp"

namespace charm::ir {

class Plan;

struct RankSymmetry {
  enum class Kind : std::uint8_t { None, Rotate, Xor };
  Kind kind = Kind::None;
  std::int32_t block = 0;  // ranks per representative set
  /// A symmetry by cost: the images may hold other heads than the representative's, as many of
  /// them (a Ulysses rank's head slice is its own, but every slice costs the same bytes and FLOPs).
  /// What every figure of a simulation depends on maps; the data each rank computes does not.
  bool heads_are_labels = false;
  /// A symmetry by cost on the causal zigzag layout: the images may carry the other off-diagonal piece
  /// (ZigzagKvHead for ZigzagQTail and back), which the caller has found to cost the same (the two
  /// half blocks hold as many pairs; their kernels and updates are equal without a kernel shape and
  /// update passes, sim::ComputeModel::prices_zigzag_halves_alike).
  bool zigzag_halves_alike = false;

  [[nodiscard]] bool active() const { return kind != Kind::None; }
  [[nodiscard]] std::int32_t rep(std::int32_t r) const { return r % block; }
  [[nodiscard]] std::int32_t element(std::int32_t r) const { return r / block; }
  /// The image of rank x under element g.
  [[nodiscard]] std::int32_t apply(std::int32_t g, std::int32_t x, std::int32_t ranks) const {
    if (kind == Kind::Xor) return x ^ (g * block);
    const std::int64_t y = std::int64_t(x) + std::int64_t(g) * block;
    return std::int32_t(y % ranks);
  }
  /// The rank element g maps to x.
  [[nodiscard]] std::int32_t unapply(std::int32_t g, std::int32_t x, std::int32_t ranks) const {
    if (kind == Kind::Xor) return x ^ (g * block);
    const std::int64_t y = std::int64_t(x) - std::int64_t(g) * block;
    return std::int32_t(((y % ranks) + ranks) % ranks);
  }
  /// Elements of the group (classes of ranks: each holds `block` ranks, one per representative).
  [[nodiscard]] std::int32_t elements(std::int32_t ranks) const { return block > 0 ? ranks / block : 0; }
  friend bool operator==(const RankSymmetry&, const RankSymmetry&) = default;
};

[[nodiscard]] const char* to_string(RankSymmetry::Kind k);

/// Whether `s` is a well-formed group on `ranks` ranks: block >= 1 divides ranks, and for Xor
/// both block and ranks / block are powers of two.
[[nodiscard]] Status check_symmetry_shape(const RankSymmetry& s, int ranks);

/// What a machine offers a quotient plan: its GPUs in blocks that repeat, and whether its routes do too (read
/// off a topology by sim::block_symmetry). A quotient's classes of ranks may stand for each other there where
/// check_block_symmetry says so.
struct BlockSymmetry {
  std::string machine;                          // its name, for refusals
  int gpus = 0;                                 // GPUs a block (0: no block structure)
  bool routes_by_block = false;                 // its routes are copies of one block's (else a GPU-by-GPU table)
  bool overrides_routes = false;                // some route is given by hand
  bool routes_cross_each_channel_once = false;  // no route between two blocks crosses a link of both blocks' copies
};

/// Whether a quotient simulation under `s` of `ranks` ranks is exact on `b`'s machine: its routes come from
/// its block structure with no overrides, every class is made of whole blocks, and no route meets two channels
/// of one class (each class of channels then carries, channel by channel, the same flows).
[[nodiscard]] Status check_block_symmetry(const RankSymmetry& s, const BlockSymmetry& b, int ranks);

/// `plan_sym` coarsened to whole blocks of `b`, or check_block_symmetry's reason why `b`'s machine cannot run
/// it; an inactive `plan_sym` as it is.
[[nodiscard]] Expected<RankSymmetry> coarsen_to_blocks(const RankSymmetry& plan_sym, const BlockSymmetry& b, int ranks);

/// Proves that a full plan is invariant under `s`: for every rank r, its buffers and results are
/// the images under element(r) of rep(r)'s, one for one in creation order, and on every stream
/// its ops are the images of rep(r)'s, position by position: kind, phase, mask, tag, bytes and
/// flops equal; peer, q_owner and kv_owner mapped; head ranges equal (with heads_are_labels: as
/// many heads, anywhere; with zigzag_halves_alike the two zigzag half pieces count as one);
/// buffers and dependencies by their place on the
/// rank (dependencies as (stream, position)). The members of an ncclGroup (consecutive Send/Recv
/// of one group id) are compared as a set: they are issued together, progress in any order and
/// complete as a whole (plan.hpp), and a group's two sides differ in order (the ring's rank 0
/// issues [send, recv], every other rank [recv, send]), so a dependency on a member counts as
/// one on its group. A buffer's owner range maps as a set. The error names the first rank and
/// op that differ.
[[nodiscard]] Status check_symmetric(const Plan& full, const RankSymmetry& s);

/// The quotient of a full plan: the ops and buffers of ranks [0, s.block), renumbered in
/// order (dependencies, parents, reuses and results follow), with Plan::symmetry = s.
/// The plan is taken as it is: whether it is invariant under s is check_symmetric's question.
[[nodiscard]] Plan quotient_of(const Plan& full, const RankSymmetry& s);

}  // namespace charm::ir
