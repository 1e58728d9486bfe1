#pragma once
// Attention on the CPU for one (query shard, key/value shard) block, fp32.
//
// The mask comes from global token positions (key pos <= query pos under a
// causal mask; from the document's start or the window's under those masks), so
// every layout and mask piece is one rule. Positions of a shard are ascending, so
// the keys a query row sees are a contiguous run of the block (a prefix unless
// documents or a window cut its start).
// Rows that see no key get O = 0 and LSE = -inf; the merge keeps them NaN-free.
// GQA: query head h reads kv head h / (heads / kv_heads).
//
// Layouts: Q, O, dO, dQ [B, T, H, D]; K, V, dK, dV [B, T, Hkv, D]; LSE, D [B, H, T].

#include <cstdint>
#include <span>

#include "scheduler/ir/workload.hpp"

namespace charm::rt {

struct AttnShape {
  std::int64_t batch = 1, heads = 1, kv_heads = 1, head_dim = 1;
  float scale = 1.0f;  // softmax scale, 1/sqrt(head_dim)
  bool causal = false;
  /// Documents or a window (ir::Workload::position_mask): a query row sees the keys from
  /// first_visible(its position) up to itself, a contiguous run of the block's ascending keys.
  const ir::Workload* positions = nullptr;
};

using Positions = std::span<const std::int64_t>;

/// out, lse := attention(q, k, v) of one block (out normalised by its own softmax sum).
void attention_fwd_block(const AttnShape& a, const float* q, Positions qpos, const float* k, const float* v,
                         Positions kpos, float* out, float* lse);

/// (o_acc, lse_acc) := merge((o_acc, lse_acc), (o_part, lse_part)), the stable rule (larger lse first,
/// lse = lse1 + log1p(exp(lse2 - lse1)); empty rows carry lse = -inf and stay NaN-free).
void merge_out(const AttnShape& a, std::int64_t tokens, const float* o_part, const float* lse_part, float* o_acc,
               float* lse_acc);

/// delta[b, h, t] = sum_d dout * out (the D of the backward bundle).
void bundle_delta(const AttnShape& a, std::int64_t tokens, const float* dout, const float* out, float* delta);

/// dq += dQ, dk += dK, dv += dV of one block, from the global (final) lse and delta of the queries.
void attention_bwd_block(const AttnShape& a, const float* q, const float* dout, const float* lse, const float* delta,
                         Positions qpos, const float* k, const float* v, Positions kpos, float* dq, float* dk,
                         float* dv);

}  // namespace charm::rt
