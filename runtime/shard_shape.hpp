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

#include <cstdint>
#include <vector>

#include "scheduler/ir/plan.hpp"

namespace charm::rt {

struct ShardShape {
  std::int64_t batch = 1, tokens = 1, heads = 1, kv_heads = 1, head_dim = 1;

  static ShardShape of(const ir::Workload& w, int ranks) {
    return {w.batch, w.seq / ranks, w.heads, w.kv_heads, w.head_dim};
  }
  [[nodiscard]] std::int64_t q_elems() const { return batch * tokens * heads * head_dim; }
  [[nodiscard]] std::int64_t kv_elems() const { return batch * tokens * kv_heads * head_dim; }  // K or V alone
  [[nodiscard]] std::int64_t lse_elems() const { return batch * heads * tokens; }
  /// fp32 elements of a plan buffer of this kind.
  [[nodiscard]] std::int64_t elems(ir::BufKind k) const {
    switch (k) {
      case ir::BufKind::Q:
      case ir::BufKind::Dout:
      case ir::BufKind::Dq: return q_elems();
      case ir::BufKind::Kv:
      case ir::BufKind::Dkv: return 2 * kv_elems();
      case ir::BufKind::Out: return q_elems() + lse_elems();
      case ir::BufKind::QBundle: return 2 * q_elems() + 2 * lse_elems();
    }
    return 0;
  }
};

/// Global token positions of a rank's shard, in local order (ascending in every layout).
[[nodiscard]] std::vector<std::int64_t> token_positions(const ir::Workload& w, int rank, int ranks);

} // namespace charm::rt
