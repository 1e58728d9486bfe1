#include "runtime/thread_transport.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <string>

namespace charm::rt {

struct ThreadTransport::Req final : Request {
  bool done = false;  // guarded by the transport's mutex
  std::string error;
};

namespace {
std::string describe(const MessageKey& k) {
  return fmt::format("stream {} {}->{} tag {}", ir::to_string(k.stream), k.src, k.dst, k.tag);
}
}  // namespace

void ThreadTransport::complete(const MessageKey& key, Slot slot) {
  std::string error;
  if (slot.src.size() != slot.dst.size())
    error = fmt::format("message {}: send of {} floats met a receive of {}", describe(key), slot.src.size(),
                        slot.dst.size());
  else
    std::memcpy(slot.dst.data(), slot.src.data(), slot.src.size_bytes());
  std::lock_guard lk(mu_);
  slot.send->done = slot.recv->done = true;
  slot.send->error = slot.recv->error = error;
  cv_.notify_all();
}

Expected<RequestPtr> ThreadTransport::post_send(const MessageKey& key, std::span<const float> data) {
  auto req = std::make_shared<Req>();
  Slot ready;
  {
    std::lock_guard lk(mu_);
    Slot& s = slots_[key];
    if (s.send) return Error{"transport", fmt::format("message {} sent twice", describe(key))};
    s.send = req;
    s.src = data;
    if (!s.recv) return RequestPtr{req};
    ready = std::move(s);
    slots_.erase(key);
  }
  complete(key, std::move(ready));
  return RequestPtr{req};
}

Expected<RequestPtr> ThreadTransport::post_recv(const MessageKey& key, std::span<float> data) {
  auto req = std::make_shared<Req>();
  Slot ready;
  {
    std::lock_guard lk(mu_);
    Slot& s = slots_[key];
    if (s.recv) return Error{"transport", fmt::format("message {} received twice", describe(key))};
    s.recv = req;
    s.dst = data;
    if (!s.send) return RequestPtr{req};
    ready = std::move(s);
    slots_.erase(key);
  }
  complete(key, std::move(ready));
  return RequestPtr{req};
}

Expected<bool> ThreadTransport::wait_all(std::span<const RequestPtr> reqs, const StopFn& stop) {
  std::unique_lock lk(mu_);
  for (;;) {
    bool all = true;
    for (const auto& r : reqs) {
      const auto& q = static_cast<const Req&>(*r);
      if (!q.done)
        all = false;
      else if (!q.error.empty())
        return Error{"transport", q.error};
    }
    if (all) return true;
    if (stop && stop()) return false;
    cv_.wait_for(lk, std::chrono::milliseconds(20));
  }
}

}  // namespace charm::rt
