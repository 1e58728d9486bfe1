#include "scheduler/ir/op_args.hpp"

#include <fmt/format.h>

#include <initializer_list>

namespace charm::ir {

OpArgs args(const Op& o) {
  const auto* b = o.buf;
  switch (o.kind) {
    case OpKind::Compute:
      if (o.phase == Phase::Fwd) return ComputeFwdArgs{b[0], b[1], b[2]};
      return ComputeBwdArgs{b[0], b[1], b[2], b[3]};
    case OpKind::Send: return SendArgs{b[0]};
    case OpKind::Recv: return RecvArgs{b[0]};
    case OpKind::Merge: return MergeArgs{b[0], b[1]};
    case OpKind::Accumulate: return AccumulateArgs{b[0], b[1]};
    case OpKind::Copy:
      if (is_pack(o)) return PackArgs{b[0], b[1], b[2], b[3]};
      return CopyArgs{b[0], b[1]};
  }
  CHARM_ASSERT(false, "unknown op kind");
}

namespace {

/// Slot `slot` of op `o` names a buffer of o's rank whose kind is one of `kinds` (any kind if empty).
Status check_slot(const Plan& plan, const Op& o, int slot, std::initializer_list<BufKind> kinds) {
  const BufferId b = o.buf[slot];
  if (b == kNone) return Error{"", fmt::format("buffer slot {} is empty", slot)};
  if (b < 0 || std::size_t(b) >= plan.buffers().size())
    return Error{"", fmt::format("buffer slot {} names buffer {}, which does not exist", slot, b)};
  const Buffer& bf = plan.buffer(b);
  if (bf.rank != o.rank)
    return Error{"", fmt::format("buffer slot {} names buffer {} of rank {} (buffers are rank-local)", slot, b, bf.rank)};
  for (BufKind k : kinds)
    if (bf.kind == k) return {};
  if (kinds.size() == 0) return {};
  std::string want;
  for (BufKind k : kinds) want += fmt::format("{}{}", want.empty() ? "" : " or ", to_string(k));
  return Error{"", fmt::format("buffer slot {} holds {}, expected {}", slot, to_string(bf.kind), want)};
}

Status check_slots(const Plan& plan, const Op& o) {
  auto slots = [&](std::initializer_list<std::initializer_list<BufKind>> per_slot) -> Status {
    int s = 0;
    for (auto kinds : per_slot)
      if (auto st = check_slot(plan, o, s++, kinds); !st) return st;
    return {};
  };
  switch (o.kind) {
    case OpKind::Compute:
      if (o.phase == Phase::Fwd) return slots({{BufKind::Q}, {BufKind::Kv}, {BufKind::Out}});
      return slots({{BufKind::QBundle}, {BufKind::Kv}, {BufKind::Dq}, {BufKind::Dkv}});
    case OpKind::Send:
    case OpKind::Recv: return slots({{}});
    case OpKind::Merge: return slots({{BufKind::Out}, {BufKind::Out}});
    case OpKind::Accumulate: {
      if (auto st = check_slot(plan, o, 0, {BufKind::Dq, BufKind::Dkv}); !st) return st;
      return check_slot(plan, o, 1, {plan.buffer(o.buf[0]).kind});
    }
    case OpKind::Copy: {
      if (is_pack(o)) return slots({{BufKind::Q}, {BufKind::Dout}, {BufKind::Out}, {BufKind::QBundle}});
      if (auto st = check_slot(plan, o, 0, {}); !st) return st;
      return check_slot(plan, o, 1, {plan.buffer(o.buf[0]).kind});
    }
  }
  return Error{"", fmt::format("unknown op kind {}", int(o.kind))};
}

} // namespace

Expected<OpArgs> decode(const Plan& plan, OpId id) {
  const Op& o = plan.op(id);
  if (auto s = check_slots(plan, o); !s) return s.error();
  return args(o);
}

} // namespace charm::ir
