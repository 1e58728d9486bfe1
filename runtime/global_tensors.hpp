#pragma once
// GlobalTensors: the whole-sequence tensors of one attention layer, fp32, in
// natural sequence order (whatever the layout), plus the moves between them
// and a rank's shard.
//
//   q, dout, out, dq  [B, S, H, D]      k, v, dk, dv  [B, S, Hkv, D]      lse  [B, H, S]
//
// Inputs come from a counter-based generator keyed by (seed, tensor, global
// index), so a given seed gives the same numbers for every layout, rank count
// and backend; values are rounded to the workload dtype (bf16/fp16 runs feed
// the kernels exactly representable inputs).

#include <cstdint>
#include <span>
#include <vector>

#include "scheduler/ir/workload.hpp"

namespace charm::rt {

struct GlobalTensors {
  std::vector<float> q, k, v, dout;  // inputs
  std::vector<float> out, lse;       // forward results (inputs of a backward-only pass)
  std::vector<float> dq, dk, dv;     // backward results
};

/// q, k, v and dout from `seed` (normal(0, 1), rounded to w.dtype), filled on `jobs` threads (0: every core);
/// the numbers are the same for every job count. `with_dout` false: dout left empty (a forward pass reads none).
[[nodiscard]] GlobalTensors make_inputs(const ir::Workload& w, std::uint64_t seed, int jobs = 0, bool with_dout = true);

/// Rounds to the nearest value representable in `t` (ties to even).
[[nodiscard]] float round_to(ir::DType t, float x);
/// Rounds every element in place (nothing for fp32).
void round_all(ir::DType t, std::span<float> xs);

/// [B, S, heads, D] (global) <-> [B, T, heads, D] (rank's shard, tokens at `positions`).
void gather_tokens(const ir::Workload& w, std::span<const std::int64_t> positions, std::int64_t heads,
                   std::span<const float> global, std::span<float> shard);
void scatter_tokens(const ir::Workload& w, std::span<const std::int64_t> positions, std::int64_t heads,
                    std::span<const float> shard, std::span<float> global);
/// [B, H, S] <-> [B, H, T].
void gather_lse(const ir::Workload& w, std::span<const std::int64_t> positions, std::span<const float> global,
                std::span<float> shard);
void scatter_lse(const ir::Workload& w, std::span<const std::int64_t> positions, std::span<const float> shard,
                 std::span<float> global);

}  // namespace charm::rt
