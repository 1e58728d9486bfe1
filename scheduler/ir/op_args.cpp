#include "scheduler/ir/op_args.hpp"

#include <fmt/format.h>

#include <array>
#include <initializer_list>

namespace charm::ir {

namespace {

// Slot checks run for every op of every plan a consumer decodes: they return
// a plain fault code, and only a fault is turned into a message.
enum class Fault : std::uint8_t { None, Empty, Missing, OtherRank, Kind, UnknownOp };

struct SlotFault {
  Fault fault = Fault::None;
  int slot = 0;
  std::array<BufKind, 2> kinds{};  // what the slot takes (Kind)
  std::size_t nkinds = 0;
};

/// Slot `slot` of op `o` names a buffer of o's rank whose kind is one of `kinds` (any kind if empty).
SlotFault check_slot(const Plan& plan, const Op& o, int slot, std::initializer_list<BufKind> kinds) {
  const BufferId b = o.buf[slot];
  if (b == kNone) return {Fault::Empty, slot};
  if (b < 0 || std::size_t(b) >= plan.buffers().size()) return {Fault::Missing, slot};
  const Buffer& bf = plan.buffer(b);
  if (bf.rank != o.rank) return {Fault::OtherRank, slot};
  if (kinds.size() == 0) return {};
  for (BufKind k : kinds)
    if (bf.kind == k) return {};
  SlotFault f{Fault::Kind, slot};
  for (BufKind k : kinds)
    if (f.nkinds < f.kinds.size()) f.kinds[f.nkinds++] = k;
  return f;
}

/// The first slot of `o` that fails, in slot order.
SlotFault check_slots(const Plan& plan, const Op& o) {
  auto slots = [&](std::initializer_list<std::initializer_list<BufKind>> per_slot) -> SlotFault {
    int s = 0;
    for (auto kinds : per_slot)
      if (SlotFault f = check_slot(plan, o, s++, kinds); f.fault != Fault::None) return f;
    return {};
  };
  // Accumulate and plain Copy: slot 1 holds the kind slot 0 holds.
  auto same_kind = [&](std::initializer_list<BufKind> first) -> SlotFault {
    if (SlotFault f = check_slot(plan, o, 0, first); f.fault != Fault::None) return f;
    return check_slot(plan, o, 1, {plan.buffer(o.buf[0]).kind});
  };
  switch (o.kind) {
  case OpKind::Compute:
    if (o.phase == Phase::Fwd) return slots({{BufKind::Q}, {BufKind::Kv}, {BufKind::Out}});
    return slots({{BufKind::QBundle}, {BufKind::Kv}, {BufKind::Dq}, {BufKind::Dkv}});
  case OpKind::Send:
  case OpKind::Recv:
    return slots({{}});
  case OpKind::Merge:
    return slots({{BufKind::Out}, {BufKind::Out}});
  case OpKind::Accumulate:
    return same_kind({BufKind::Dq, BufKind::Dkv});
  case OpKind::Copy:
    if (is_pack(o)) return slots({{BufKind::Q}, {BufKind::Dout}, {BufKind::Out}, {BufKind::QBundle}});
    return same_kind({});
  }
  return {Fault::UnknownOp, 0};
}

Error fault_message(const Plan& plan, const Op& o, const SlotFault& f) {
  const BufferId b = o.buf[f.slot];
  switch (f.fault) {
  case Fault::None:
  case Fault::UnknownOp:
    break;
  case Fault::Empty:
    return Error{"", fmt::format("buffer slot {} is empty", f.slot)};
  case Fault::Missing:
    return Error{"", fmt::format("buffer slot {} names buffer {}, which does not exist", f.slot, b)};
  case Fault::OtherRank:
    return Error{"", fmt::format("buffer slot {} names buffer {} of rank {} (buffers are rank-local)", f.slot, b,
                                 plan.buffer(b).rank)};
  case Fault::Kind: {
    std::string want;
    for (std::size_t k = 0; k < f.nkinds; ++k)
      want += fmt::format("{}{}", want.empty() ? "" : " or ", to_string(f.kinds[k]));
    return Error{"", fmt::format("buffer slot {} holds {}, expected {}", f.slot, to_string(plan.buffer(b).kind), want)};
  }
  }
  return Error{"", fmt::format("unknown op kind {}", int(o.kind))};
}

}  // namespace

Expected<OpArgs> decode(const Plan& plan, OpId id) {
  const Op& o = plan.op(id);
  if (const SlotFault f = check_slots(plan, o); f.fault != Fault::None) return fault_message(plan, o, f);
  return args(o);
}

}  // namespace charm::ir
