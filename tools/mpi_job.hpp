#pragma once
// How a command that runs as an mpirun job ends when something fails: `run --backend mpi`
// and `sweep` under mpirun share these (only where MPI is built: CHARM_RT_HAVE_MPI).

#include <exception>

#include "tools/cli_common.hpp"

namespace charm::cli {

/// The exit code of what rank 0's report threw (the others learn it from rank 0).
inline int exit_code_of(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const UsageError&) {
    return kExitUsage;
  } catch (...) {
    return kExitRuntime;
  }
}

}  // namespace charm::cli

#ifdef CHARM_RT_HAVE_MPI
#include <cstdio>

#include "runtime/mpi_context.hpp"

namespace charm::cli {

/// Where the processes cannot agree (MPI failed, a peer never came, a stall): this process's
/// own line, flushed, then MPI_Abort ends the job with `code`.
[[noreturn]] inline void abort_job(rt::MpiContext& ctx, const Error& e, int code = kExitRuntime) {
  std::fprintf(stderr, "charm: error: %s\n", e.message().c_str());
  ctx.abort(code);
}

/// An agreed failure: the same error on every process. Rank 0 says it and flushes it while
/// every process is still in MPI (a process that left first could have mpirun end the job
/// before the line was out); then every process exits with `code`, through MPI_Finalize.
[[noreturn]] inline void agreed_failure(const rt::MpiContext& ctx, const rt::MpiContext::Agreement& a) {
  if (ctx.rank() == 0) std::fprintf(stderr, "charm: error: %s\n", a.status.error().message().c_str());
  std::fflush(stderr);
  throw QuietExit{a.code};
}

}  // namespace charm::cli
#endif
