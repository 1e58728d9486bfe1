#pragma once
// MpiTransport: one process per rank, MPI_Isend and matched receives on a
// private communicator. The MPI tag encodes (IR tag, stream) as tag *
// kNumStreams + stream, checked against MPI_TAG_UB. Counts are MPI_FLOAT
// elements, so one message may hold up to 2^31-1 floats (8 GiB); larger ones
// are refused with a clear error. A receive is matched with MPI_Improbe and
// its size compared with the posted buffer's before MPI_Imrecv, so a message
// of another size is an error naming the op, the peer and both sizes, and not
// one byte of it lands. Waits poll with a short back-off so the worker can
// notice a stop request; with `mu` (the library gives less than
// MPI_THREAD_MULTIPLE) every MPI call is serialised behind it. A request
// dropped before it completed is cancelled and freed.

#include <mutex>

#include "runtime/transport.hpp"

namespace charm::rt {

class MpiTransport final : public Transport {
 public:
  /// `comm` points at an MPI_Comm, which must outlive the transport (keeps mpi.h out of this
  /// header: the handle is a pointer in Open MPI, an integer in MPICH).
  MpiTransport(const void* comm, std::mutex* mu, long tag_ub);
  [[nodiscard]] Expected<RequestPtr> post_send(const MessageKey& key, std::span<const float> data) override;
  [[nodiscard]] Expected<RequestPtr> post_recv(const MessageKey& key, std::span<float> data) override;
  [[nodiscard]] Expected<bool> wait_all(std::span<const RequestPtr> reqs, const StopFn& stop) override;
  /// Testing: this process's first receive is posted one float short (the size check must catch it).
  void inject_short_recv() { short_recv_ = true; }

 private:
  struct Req;
  Expected<int> mpi_tag(const MessageKey& key) const;
  /// A request for a message of `floats` floats under `key`, its tag set; errors: too long, tag too large.
  Expected<std::shared_ptr<Req>> new_request(const MessageKey& key, std::size_t floats);
  std::unique_lock<std::mutex> lock();

  const void* comm_;
  std::mutex* mu_;
  long tag_ub_;
  bool short_recv_ = false;
};

}  // namespace charm::rt
