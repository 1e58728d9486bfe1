#pragma once
// Typed op arguments: what the four Op::buf slots mean, named per op kind.
//
// The slot table of plan.hpp lives here as code, once: `args(op)` reads the
// slots of an op the caller already trusts (a validated plan), `decode(plan, id)`
// checks them first (every slot the kind uses names an existing buffer of the
// op's rank, of the kind the slot takes) and is what executors call on plans
// they did not validate themselves.

#include <variant>

#include "scheduler/ir/plan.hpp"

namespace charm::ir {

/// Compute, forward: out (O, LSE) += attention(q, kv); out is read and written.
struct ComputeFwdArgs {
  BufferId q, kv, out;
};
/// Compute, backward: dq and dkv accumulate the block's gradients; both read and written.
struct ComputeBwdArgs {
  BufferId qbundle, kv, dq, dkv;
};
struct SendArgs {
  BufferId src;
};
struct RecvArgs {
  BufferId dst;
};
/// Merge: the partial (O, LSE) merged into acc (both Out).
struct MergeArgs {
  BufferId partial, acc;
};
/// Accumulate: a gradient partial added to acc (both Dq or both Dkv).
struct AccumulateArgs {
  BufferId partial, acc;
};
/// Copy that packs the backward bundle: qbundle = (q, dout, LSE of out, D = rowsum(dO * O)).
struct PackArgs {
  BufferId q, dout, out, qbundle;
};
/// Plain Copy: the overlap of the two regions, src to dst (one kind).
struct CopyArgs {
  BufferId src, dst;
};

using OpArgs =
    std::variant<ComputeFwdArgs, ComputeBwdArgs, SendArgs, RecvArgs, MergeArgs, AccumulateArgs, PackArgs, CopyArgs>;

/// A Copy that packs the backward bundle (its fourth slot is used), not a plain copy.
[[nodiscard]] constexpr bool is_pack(const Op& o) { return o.kind == OpKind::Copy && o.buf[3] != kNone; }

/// The slots of `o` by name, unchecked: for ops of a plan that passed validation.
[[nodiscard]] inline OpArgs args(const Op& o) {
  const auto* b = o.buf;
  switch (o.kind) {
  case OpKind::Compute:
    if (o.phase == Phase::Fwd) return ComputeFwdArgs{b[0], b[1], b[2]};
    return ComputeBwdArgs{b[0], b[1], b[2], b[3]};
  case OpKind::Send:
    return SendArgs{b[0]};
  case OpKind::Recv:
    return RecvArgs{b[0]};
  case OpKind::Merge:
    return MergeArgs{b[0], b[1]};
  case OpKind::Accumulate:
    return AccumulateArgs{b[0], b[1]};
  case OpKind::Copy:
    break;
  }
  if (is_pack(o)) return PackArgs{b[0], b[1], b[2], b[3]};
  return CopyArgs{b[0], b[1]};
}

/// The slots of op `id` by name, checked against the plan: an error names the
/// first slot that is empty, names no buffer, a buffer of another rank, or a
/// buffer of a kind the slot does not take. Error::where is empty; callers say
/// which op.
[[nodiscard]] Expected<OpArgs> decode(const Plan& plan, OpId id);

/// Calls fn(buffer, slot, write) for every buffer op `o` touches, in slot order
/// (reads and writes as plan.hpp gives them; an accumulator is a write).
template <class Fn>
void for_each_access(const Op& o, Fn&& fn) {
  auto rd = [&](int s) { fn(o.buf[s], s, false); };
  auto wr = [&](int s) { fn(o.buf[s], s, true); };
  switch (o.kind) {
  case OpKind::Compute:
    rd(0), rd(1), wr(2);
    if (o.phase == Phase::Bwd) wr(3);
    break;
  case OpKind::Send:
    rd(0);
    break;
  case OpKind::Recv:
    wr(0);
    break;
  case OpKind::Merge:
  case OpKind::Accumulate:
    rd(0), wr(1);
    break;
  case OpKind::Copy:
    if (is_pack(o))
      rd(0), rd(1), rd(2), wr(3);
    else
      rd(0), wr(1);
    break;
  }
}

/// Overload set for std::visit over OpArgs.
template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

}  // namespace charm::ir
