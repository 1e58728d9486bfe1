#pragma once
// ThreadTransport: every rank in one process. A message is a rendezvous slot
// keyed by (stream, src, dst, tag); whichever side arrives second copies the
// data straight from the send buffer into the receive buffer (outside the
// lock) and completes both. So a send completes only when its receive is
// posted, as under NCCL, and the executor inherits the validator's deadlock proof.

#include <condition_variable>
#include <map>
#include <mutex>

#include "runtime/transport.hpp"

namespace charm::rt {

class ThreadTransport final : public Transport {
 public:
  [[nodiscard]] Expected<RequestPtr> post_send(const MessageKey& key, std::span<const float> data) override;
  [[nodiscard]] Expected<RequestPtr> post_recv(const MessageKey& key, std::span<float> data) override;
  [[nodiscard]] Expected<bool> wait_all(std::span<const RequestPtr> reqs, const StopFn& stop) override;

 private:
  struct Req;
  struct Slot {
    std::span<const float> src;
    std::span<float> dst;
    std::shared_ptr<Req> send, recv;
  };
  void complete(const MessageKey& key, Slot slot);

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<MessageKey, Slot> slots_;
};

}  // namespace charm::rt
