#pragma once
// MpiTransport: one process per rank, MPI_Isend / MPI_Irecv on a private
// communicator. The MPI tag encodes (IR tag, stream) as tag * kNumStreams +
// stream, checked against MPI_TAG_UB. Counts are MPI_FLOAT elements, so one
// message may hold up to 2^31-1 floats (8 GiB); larger ones are refused with
// a clear error. Waits poll MPI_Test with a short back-off so the worker can
// notice a stop request; when the library gives less than
// MPI_THREAD_MULTIPLE every MPI call is serialised behind one mutex.

#include <mutex>

#include "runtime/transport.hpp"

namespace charm::rt {

class MpiTransport final : public Transport {
 public:
  /// `comm` is an MPI_Comm passed as its handle value (keeps mpi.h out of this header).
  MpiTransport(void* comm, bool serialize, long tag_ub);
  [[nodiscard]] Expected<RequestPtr> post_send(const MessageKey& key, std::span<const float> data) override;
  [[nodiscard]] Expected<RequestPtr> post_recv(const MessageKey& key, std::span<float> data) override;
  [[nodiscard]] Expected<bool> wait_all(std::span<const RequestPtr> reqs, const StopFn& stop) override;

 private:
  struct Req;
  Expected<int> mpi_tag(const MessageKey& key) const;
  std::unique_lock<std::mutex> lock();

  void* comm_;
  bool serialize_;
  long tag_ub_;
  std::mutex mu_;
};

} // namespace charm::rt
