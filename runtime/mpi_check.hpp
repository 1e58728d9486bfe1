#pragma once
// Checked MPI calls and watched waits, shared by backend mpi (mpi_context,
// mpi_transport) and backend cuda (nccl_backend). The communicators carry
// MPI_ERRORS_RETURN, so every return code is looked at: a failure becomes an
// Error naming the call, the rank and the host. No wait here blocks for good:
// a request is polled until it completes or `timeout_s` passes (a peer that
// never arrives: stopped, dead, or in another collective), and the timeout is
// an error too. Include only from .cpp files (mpi.h).

#include <mpi.h>

#include <cstdint>
#include <mutex>
#include <string>

#include "support/expected.hpp"

namespace charm::rt {

/// This process's rank in MPI_COMM_WORLD (-1 before MPI_Init).
[[nodiscard]] int mpi_world_rank();
/// This machine's name, as MPI reports it (cached).
[[nodiscard]] const std::string& mpi_host();
/// "MPI_Bcast failed on rank 1 (host h): MPI_ERR_COMM: invalid communicator".
[[nodiscard]] Error mpi_error(int code, const char* call);

/// Polls `req` with MPI_Test until it completes (ok) or `timeout_s` passes (0: never):
/// "stall: rank R waited T s for WHAT: a peer did not take part (stopped, dead, or
/// running other work)". `mu`, when given, is held around each MPI call (MPI_THREAD_SERIALIZED).
[[nodiscard]] Status mpi_wait(MPI_Request& req, double timeout_s, const std::string& what, std::mutex* mu = nullptr);

/// The timeout of a wait outside the plan's run (agreements, the start barrier): a peer may
/// be validating the plan or generating inputs there, local work no heartbeat reports, so
/// such waits give it at least 30 s (0 stays "never").
[[nodiscard]] inline double setup_timeout(double timeout_s) {
  return timeout_s > 0 ? (timeout_s < 30 ? 30 : timeout_s) : 0;
}

/// Agreement before a collective: every rank passes its own status; all get back the
/// failure of the lowest failing rank (its message, word for word), or ok when none
/// failed. `code` travels with the message (the exit code the failing rank chose).
struct Agreed {
  Status status;
  int code = 0;
};
[[nodiscard]] Expected<Agreed> mpi_agree(MPI_Comm comm, const Status& mine, int code, double timeout_s,
                                         const std::string& what);

}  // namespace charm::rt

/// Returns mpi_error(...) from the enclosing function (Status or Expected<T>) when `call` fails.
#define CHARM_MPI_TRY(call)                                                                                            \
  do {                                                                                                                 \
    const int charm_mpi_rc_ = (call);                                                                                  \
    if (charm_mpi_rc_ != MPI_SUCCESS) return ::charm::rt::mpi_error(charm_mpi_rc_, #call);                             \
  } while (0)
