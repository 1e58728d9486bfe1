#pragma once
// Transport: how the executor moves a buffer between ranks. Point-to-point,
// non-blocking, matched by (stream, src, dst, tag) exactly as the IR matches
// Send and Recv. A worker posts every member of an ncclGroup, then waits for
// all of them. Semantics are NCCL's: a send may complete only once its receive
// is posted (backends may be more eager, never less).

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "scheduler/ir/plan.hpp"

namespace charm::rt {

struct MessageKey {
  ir::Stream stream = ir::Stream::Compute;
  ir::RankId src = 0, dst = 0;
  std::int32_t tag = 0;
  friend auto operator<=>(const MessageKey&, const MessageKey&) = default;
};

/// A posted send or receive; backends derive from it.
class Request {
 public:
  virtual ~Request() = default;
  std::string label;  // the op it serves, as errors name it ("rank 1 op 5 (recv kv0 <- 0 #0)"); set by the executor
};
using RequestPtr = std::shared_ptr<Request>;

/// Returns true when the wait should give up (the run is aborting).
using StopFn = std::function<bool()>;

class Transport {
 public:
  virtual ~Transport() = default;
  /// `data` must stay valid and unmodified until the request completes.
  [[nodiscard]] virtual Expected<RequestPtr> post_send(const MessageKey& key, std::span<const float> data) = 0;
  /// `data` must stay valid until the request completes; its size must equal the send's.
  [[nodiscard]] virtual Expected<RequestPtr> post_recv(const MessageKey& key, std::span<float> data) = 0;
  /// true: every request completed; false: `stop` asked to give up first.
  [[nodiscard]] virtual Expected<bool> wait_all(std::span<const RequestPtr> reqs, const StopFn& stop) = 0;
};

}  // namespace charm::rt
