#pragma once
// The one rule every executor reports a stall by: of the ops that keep their streams from going on, the one
// that explains the stall best. The CPU executors (executor.cpp) and the CUDA plan runner both name it.

#include <cstddef>
#include <span>

namespace charm::rt {

/// An op that keeps its stream from going on, as a stall report weighs it.
struct WaitingOp {
  bool transfer = false;  // a send or receive: in the transport, or not yet matched by its peer
  bool orphan = false;    // a transfer the plan gives no counterpart (it can never be matched)
};

/// The index of the waiting op that explains a stall best: a transfer without a counterpart, else a
/// transfer, else the first; `waiting.size()` where none waits.
[[nodiscard]] inline std::size_t stall_root_cause(std::span<const WaitingOp> waiting) {
  std::size_t transfer = waiting.size();
  for (std::size_t i = 0; i < waiting.size(); ++i) {
    if (waiting[i].transfer && waiting[i].orphan) return i;
    if (waiting[i].transfer && transfer == waiting.size()) transfer = i;
  }
  if (transfer < waiting.size()) return transfer;
  return waiting.empty() ? waiting.size() : 0;
}

}  // namespace charm::rt
