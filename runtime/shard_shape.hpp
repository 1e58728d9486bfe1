#pragma once
// ShardShape: the element counts of every per-rank tensor, and how a plan
// buffer of each kind is laid out in fp32 storage.
//
// Every tensor is stored in fp32, whatever the workload dtype (Buffer::bytes
// is the wire size; it is not used for storage). Per shard of T = S/n tokens:
//   Q, Dout, Dq   [B, T, H, D]
//   Kv, Dkv       K then V (dK then dV), each [B, T, Hkv, D]
//   Out           O [B, T, H, D] then LSE [B, H, T]
//   QBundle       Q, dO (each [B, T, H, D]), LSE, D = rowsum(dO * O) (each [B, H, T])
//
// A region buffer (scheduler/ir/region.hpp) stores one block per owner, owner
// after owner; each block is laid out like a shard of a smaller shape
// (of_region): the tokens of its parts, the query and kv heads of its kv-head
// range. A whole shard is the one-owner case, with the same layout as above.

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "scheduler/ir/plan.hpp"

namespace charm::rt {

struct ShardShape {
  std::int64_t batch = 1, tokens = 1, heads = 1, kv_heads = 1, head_dim = 1;

  static ShardShape of(const ir::Workload& w, int ranks) {
    return {w.batch, w.seq / ranks, w.heads, w.kv_heads, w.head_dim};
  }
  /// The shape of one owner's block of a region buffer (parts counted out of `parts` per shard).
  static ShardShape of_region(const ir::Workload& w, int ranks, int parts, const ir::Region& r) {
    const std::int64_t hkv = r.heads();
    return {w.batch, w.seq / ranks / parts * r.parts(), w.heads / w.kv_heads * hkv, hkv, w.head_dim};
  }
  [[nodiscard]] std::int64_t q_elems() const { return batch * tokens * heads * head_dim; }
  [[nodiscard]] std::int64_t kv_elems() const { return batch * tokens * kv_heads * head_dim; }  // K or V alone
  [[nodiscard]] std::int64_t lse_elems() const { return batch * heads * tokens; }
  /// fp32 elements of a plan buffer of this kind.
  [[nodiscard]] std::int64_t elems(ir::BufKind k) const {
    switch (k) {
    case ir::BufKind::Q:
    case ir::BufKind::Dout:
    case ir::BufKind::Dq:
      return q_elems();
    case ir::BufKind::Kv:
    case ir::BufKind::Dkv:
      return 2 * kv_elems();
    case ir::BufKind::Out:
      return q_elems() + lse_elems();
    case ir::BufKind::QBundle:
      return 2 * q_elems() + 2 * lse_elems();
    }
    return 0;
  }
};

/// Global token positions of a rank's shard, in local order (ascending in every layout).
[[nodiscard]] std::vector<std::int64_t> token_positions(const ir::Workload& w, int rank, int ranks);

/// Every owner's token positions, cut to a region's parts, and the mask's rule for a block:
/// one reading for every executor (the CPU's and the GPU's).
class RegionPositions {
 public:
  RegionPositions(const ir::Workload& w, int ranks, int parts);
  /// The global positions of owner x's tokens in region r (its parts of x's shard), ascending.
  [[nodiscard]] std::span<const std::int64_t> of(ir::RankId x, const ir::Region& r) const {
    return std::span<const std::int64_t>(pos_[std::size_t(x)])
        .subspan(std::size_t(part_tokens_ * r.part_begin), std::size_t(part_tokens_ * r.parts()));
  }
  /// Whether a (query block, key block) has a visible pair: positions ascend, so a causal
  /// block has one iff its first key is not after its last query.
  /// Under documents or a window, whether some query's run of visible keys meets the block's keys.
  [[nodiscard]] bool visible(std::span<const std::int64_t> qp, std::span<const std::int64_t> kp) const {
    if (qp.empty() || kp.empty() || (causal_ && kp.front() > qp.back())) return false;
    if (!mask_.position_mask()) return true;
    for (const std::int64_t q : qp) {
      const auto it = std::lower_bound(kp.begin(), kp.end(), mask_.first_visible(q));
      if (it != kp.end() && *it <= q) return true;
    }
    return false;
  }

 private:
  bool causal_ = false;
  ir::Workload mask_;  // its documents and window
  std::int64_t part_tokens_ = 1;
  std::vector<std::vector<std::int64_t>> pos_;  // per rank
};

/// Where plan buffer `b` lives and what shape its blocks have.
struct RegionLayout {
  ir::Region region;
  ShardShape block;              // the shape of one owner's block
  std::int64_t block_elems = 0;  // fp32 elements of one block
  [[nodiscard]] std::int64_t elems() const { return block_elems * region.owners(); }
};
[[nodiscard]] RegionLayout region_layout(const ir::Plan& plan, ir::BufferId b);

}  // namespace charm::rt
