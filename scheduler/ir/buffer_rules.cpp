#include "scheduler/ir/buffer_rules.hpp"

#include <fmt/format.h>

#include <string>

namespace charm::ir {

bool is_whole_shard(const Plan& plan, BufferId b, RankId r) {
  const Buffer& x = plan.buffer(b);
  return x.parent == kNone && x.owner == r && plan.region(b) == shard_region(r, plan.workload, plan.parts);
}

namespace {

/// Owners, kv heads and parts inside the workload, in 64 bits (a hand-written plan may hold any int32).
bool region_in_range(const Plan& plan, const Buffer& b) {
  auto range_ok = [](std::int64_t begin, std::int64_t count, std::int64_t n) {
    return begin >= 0 && count >= 1 && begin + count <= n;
  };
  const std::int64_t hk = plan.workload.kv_heads;
  return range_ok(b.owner, b.owners, plan.ranks) && b.heads >= 0 && (b.heads != 0 || b.head_begin == 0) &&
         (b.heads == 0 || range_ok(b.head_begin, b.heads, hk)) && b.parts >= 0 && (b.parts != 0 || b.part_begin == 0) &&
         (b.parts == 0 || range_ok(b.part_begin, b.parts, plan.parts));
}

Status check_view(const Plan& plan, BufferId id) {
  const Buffer& b = plan.buffer(id);
  const BufferId pa = b.parent;
  if (pa < 0 || pa >= id) return Error{"", fmt::format("is a view of buffer {}, which is not an earlier buffer", pa)};
  const Buffer& p = plan.buffer(pa);
  const Region r = plan.region(id), pr = plan.region(pa);
  if (p.parent != kNone || p.rank != b.rank || p.kind != b.kind || !region_in_range(plan, p) ||
      pr.head_begin != r.head_begin || pr.head_end != r.head_end || pr.part_begin != r.part_begin ||
      pr.part_end != r.part_end || !pr.contains(r))
    return Error{"", fmt::format("is a view of buffer {} ({}) but not an owner sub-range of it (a view keeps the "
                                 "rank, kind, heads and parts of a parent that is no view itself)",
                                 pa, buffer_label(plan, pa))};
  if (b.init != BufInit::None)
    return Error{"", fmt::format("is a view but has init {} (a view holds what its parent holds)", to_string(b.init))};
  return {};
}

Status check_rules(const Plan& plan, BufferId id) {
  const Buffer& b = plan.buffer(id);
  const Workload& w = plan.workload;
  if (b.rank < 0 || b.rank >= plan.ranks || b.owner < 0 || b.owner >= plan.ranks)
    return Error{"", fmt::format("has rank {} / owner {} out of range ({} ranks)", b.rank, b.owner, plan.ranks)};
  if (plan.parts < 1 || (w.seq / plan.ranks) % plan.parts != 0)
    return Error{
        "", fmt::format("the plan's {} token parts do not divide a shard's {} tokens", plan.parts, w.seq / plan.ranks)};
  if (!region_in_range(plan, b))
    return Error{"", fmt::format("region owners {}+{}, kv heads {}+{}, parts {}+{} is empty or outside the workload "
                                 "({} ranks, {} kv heads, {} parts; a count of 0 means all and needs begin 0)",
                                 b.owner, b.owners, b.head_begin, b.heads, b.part_begin, b.parts, plan.ranks,
                                 w.kv_heads, plan.parts)};
  if (b.parent != kNone)
    if (auto s = check_view(plan, id); !s) return s;
  if (b.init == BufInit::Input && !is_whole_shard(plan, id, b.rank))
    return Error{"", fmt::format("an input must be the whole shard of its rank {} (its own input tensor), not "
                                 "another rank's, a region or a view",
                                 b.rank)};
  if (b.activations_dtype && b.kind != BufKind::Dq && b.kind != BufKind::Dkv)
    return Error{"", fmt::format("is a {} buffer held in the activations' dtype: only gradient buffers (dq, dkv), "
                                 "fp32 by default, can be",
                                 to_string(b.kind))};
  if (const Bytes want = region_bytes(w, plan.ranks, plan.parts, b.kind, plan.region(id), b.activations_dtype);
      b.bytes != want)
    return Error{"", fmt::format("holds {} bytes but its region needs {}", b.bytes, want)};
  return {};
}

}  // namespace

Status check_buffer(const Plan& plan, BufferId id) {
  auto s = check_rules(plan, id);
  if (s) return s;
  return Error{fmt::format("buffer {} ({})", id, buffer_label(plan, id)), s.error().what};
}

}  // namespace charm::ir
