#pragma once
// The rules one buffer of a plan keeps (plan.hpp, "Regions" and "Buffers"), written once: the
// validator proves them of every buffer, and the executors check them before they allocate.

#include "scheduler/ir/plan.hpp"
#include "support/expected.hpp"

namespace charm::ir {

/// Whether buffer b is one whole shard of rank r's data: no view, every owner, head and part of
/// r's shard and nothing else (what inputs and results are).
[[nodiscard]] bool is_whole_shard(const Plan& plan, BufferId b, RankId r);

/// The rules of buffer `id` alone:
///   - rank and owner among the plan's ranks; the plan's token parts divide a shard;
///   - its region inside the workload (owners, kv heads, parts; a count of 0 means all and needs
///     begin 0);
///   - a view: of an earlier buffer of its rank and kind that is no view, with the same heads and
///     parts, its owners inside the parent's, init None (its storage is the parent's);
///   - an Input: the rank's own input tensor, so the whole shard of its rank (owner = rank);
///   - its bytes: what its region holds (region_bytes).
/// The error names the buffer ("buffer 7 (kv3)") and the rule.
[[nodiscard]] Status check_buffer(const Plan& plan, BufferId id);

}  // namespace charm::ir
