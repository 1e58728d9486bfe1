#include "runtime/mpi_transport.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <chrono>
#include <climits>
#include <thread>

#include "runtime/mpi_check.hpp"

namespace charm::rt {

namespace {
MPI_Comm as_comm(const void* c) { return *static_cast<const MPI_Comm*>(c); }
}  // namespace

struct MpiTransport::Req final : Request {
  MpiTransport* owner = nullptr;
  MPI_Request r = MPI_REQUEST_NULL;
  bool done = false;
  bool recv = false, matched = false;  // a receive is matched (probed) before it is posted
  MessageKey key;
  int tag = 0;
  std::span<float> dst;
  ~Req() override {
    if (done || r == MPI_REQUEST_NULL) return;
    auto lk = owner->lock();
    (void)MPI_Cancel(&r);
    (void)MPI_Request_free(&r);
  }
};

MpiTransport::MpiTransport(const void* comm, std::mutex* mu, long tag_ub) : comm_(comm), mu_(mu), tag_ub_(tag_ub) {}

std::unique_lock<std::mutex> MpiTransport::lock() {
  return mu_ != nullptr ? std::unique_lock<std::mutex>(*mu_) : std::unique_lock<std::mutex>();
}

Expected<int> MpiTransport::mpi_tag(const MessageKey& key) const {
  const long t = long(key.tag) * ir::kNumStreams + long(key.stream);
  if (key.tag < 0 || t > tag_ub_)
    return Error{"mpi", fmt::format("message tag {} on stream {} does not fit MPI_TAG_UB = {}", key.tag,
                                    ir::to_string(key.stream), tag_ub_)};
  return static_cast<int>(t);
}

Expected<std::shared_ptr<MpiTransport::Req>> MpiTransport::new_request(const MessageKey& key, std::size_t floats) {
  if (floats > std::size_t(INT_MAX))
    return Error{"mpi",
                 fmt::format("message of {} floats exceeds the 2^31-1 element limit of one MPI message", floats)};
  auto tag = mpi_tag(key);
  if (!tag) return tag.error();
  auto req = std::make_shared<Req>();
  req->owner = this;
  req->key = key;
  req->tag = *tag;
  return req;
}

Expected<RequestPtr> MpiTransport::post_send(const MessageKey& key, std::span<const float> data) {
  auto req = new_request(key, data.size());
  if (!req) return req.error();
  auto lk = lock();
  CHARM_MPI_TRY(MPI_Isend(data.data(), static_cast<int>(data.size()), MPI_FLOAT, key.dst, (*req)->tag, as_comm(comm_),
                          &(*req)->r));
  return RequestPtr{*req};
}

Expected<RequestPtr> MpiTransport::post_recv(const MessageKey& key, std::span<float> data) {
  auto made = new_request(key, data.size());
  if (!made) return made.error();
  auto req = *made;
  req->recv = true;
  req->dst = data;
  if (short_recv_ && !data.empty()) {
    short_recv_ = false;
    req->dst = data.first(data.size() - 1);
  }
  return RequestPtr{req};
}

Expected<bool> MpiTransport::wait_all(std::span<const RequestPtr> reqs, const StopFn& stop) {
  auto backoff = std::chrono::microseconds(10);
  for (;;) {
    bool all = true;
    {
      auto lk = lock();
      for (const auto& p : reqs) {
        auto& q = static_cast<Req&>(*p);
        if (q.done) continue;
        if (q.recv && !q.matched) {
          // Match the message first; its size must be the posted one before a byte lands.
          int flag = 0;
          MPI_Message msg = MPI_MESSAGE_NULL;
          MPI_Status st;
          CHARM_MPI_TRY(MPI_Improbe(q.key.src, q.tag, as_comm(comm_), &flag, &msg, &st));
          if (!flag) {
            all = false;
            continue;
          }
          int count = 0;
          CHARM_MPI_TRY(MPI_Get_count(&st, MPI_FLOAT, &count));
          if (count == MPI_UNDEFINED || std::size_t(count) != q.dst.size()) {
            // Refused unreceived: the run fails on every rank (the sender's request is cancelled).
            return Error{q.label,
                         fmt::format("the message from rank {} holds {} floats ({} bytes), but the plan's receive "
                                     "expects {} floats ({} bytes): refused before any byte landed",
                                     q.key.src, count, std::int64_t(count) * 4, q.dst.size(), q.dst.size() * 4)};
          }
          CHARM_MPI_TRY(MPI_Imrecv(q.dst.data(), count, MPI_FLOAT, &msg, &q.r));
          q.matched = true;
        }
        int flag = 0;
        MPI_Status st;
        const int rc = MPI_Test(&q.r, &flag, &st);
        if (rc != MPI_SUCCESS) {
          Error e = mpi_error(rc, "MPI_Test");
          if (!q.label.empty()) e.where = q.label;
          return e;
        }
        if (flag) {
          q.done = true;
        } else {
          all = false;
        }
      }
    }
    if (all) return true;
    if (stop && stop()) return false;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::microseconds(1000));
  }
}

}  // namespace charm::rt
