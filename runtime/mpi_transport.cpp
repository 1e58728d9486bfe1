#include "runtime/mpi_transport.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <chrono>
#include <climits>
#include <thread>

namespace charm::rt {

struct MpiTransport::Req final : Request {
  MPI_Request r = MPI_REQUEST_NULL;
  bool done = false;
};

namespace {
MPI_Comm as_comm(void* c) { return reinterpret_cast<MPI_Comm>(c); }  // OpenMPI handles are pointers

Error mpi_error(int code, const std::string& what) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, msg, &len);
  return Error{"mpi", fmt::format("{}: {}", what, std::string(msg, std::size_t(len)))};
}
} // namespace

MpiTransport::MpiTransport(void* comm, bool serialize, long tag_ub) : comm_(comm), serialize_(serialize), tag_ub_(tag_ub) {}

std::unique_lock<std::mutex> MpiTransport::lock() {
  return serialize_ ? std::unique_lock<std::mutex>(mu_) : std::unique_lock<std::mutex>();
}

Expected<int> MpiTransport::mpi_tag(const MessageKey& key) const {
  const long t = long(key.tag) * ir::kNumStreams + long(key.stream);
  if (key.tag < 0 || t > tag_ub_)
    return Error{"mpi", fmt::format("message tag {} on stream {} does not fit MPI_TAG_UB = {}", key.tag,
                                    ir::to_string(key.stream), tag_ub_)};
  return static_cast<int>(t);
}

Expected<RequestPtr> MpiTransport::post_send(const MessageKey& key, std::span<const float> data) {
  if (data.size() > std::size_t(INT_MAX))
    return Error{"mpi", fmt::format("message of {} floats exceeds the 2^31-1 element limit of one MPI message", data.size())};
  auto tag = mpi_tag(key);
  if (!tag) return tag.error();
  auto req = std::make_shared<Req>();
  auto lk = lock();
  const int rc = MPI_Isend(data.data(), static_cast<int>(data.size()), MPI_FLOAT, key.dst, *tag, as_comm(comm_), &req->r);
  if (rc != MPI_SUCCESS) return mpi_error(rc, fmt::format("MPI_Isend to rank {}", key.dst));
  return RequestPtr{req};
}

Expected<RequestPtr> MpiTransport::post_recv(const MessageKey& key, std::span<float> data) {
  if (data.size() > std::size_t(INT_MAX))
    return Error{"mpi", fmt::format("message of {} floats exceeds the 2^31-1 element limit of one MPI message", data.size())};
  auto tag = mpi_tag(key);
  if (!tag) return tag.error();
  auto req = std::make_shared<Req>();
  auto lk = lock();
  const int rc = MPI_Irecv(data.data(), static_cast<int>(data.size()), MPI_FLOAT, key.src, *tag, as_comm(comm_), &req->r);
  if (rc != MPI_SUCCESS) return mpi_error(rc, fmt::format("MPI_Irecv from rank {}", key.src));
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
        int flag = 0;
        MPI_Status st;
        const int rc = MPI_Test(&q.r, &flag, &st);
        if (rc != MPI_SUCCESS) return mpi_error(rc, "MPI_Test");
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

} // namespace charm::rt
