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
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>

#include "runtime/mpi_context.hpp"

namespace charm::cli {

/// MPI's start waits for every process of the job (Open MPI's PMIx fence): one that never starts
/// MPI (another program after mpirun's ':', or one that died first) holds this one there, where no
/// MPI call can time out. Past `timeout_s` (at least 5 s, for a start under load; 0: never) this
/// process says one line and exits 3; MPI is not up, so mpirun ends the others, as it does once
/// any process exits with an error.
[[nodiscard]] inline Expected<std::unique_ptr<rt::MpiContext>> init_mpi(double timeout_s) {
  std::mutex mu;
  std::condition_variable cv;
  bool started = false;
  std::thread watchdog;
  if (timeout_s > 0)
    watchdog = std::thread([&, limit = std::max(timeout_s, 5.0)] {
      std::unique_lock lock(mu);
      if (cv.wait_for(lock, std::chrono::duration<double>(limit), [&] { return started; })) return;
      std::fprintf(stderr,
                   "charm: error: mpirun: MPI did not start within %g s (--timeout-s): a process of the job never "
                   "joined (is every process of the job charm, with the same command?)\n",
                   limit);
      std::fflush(stderr);
      std::_Exit(kExitRuntime);
    });
  auto ctx = rt::MpiContext::init();
  {
    const std::lock_guard lock(mu);
    started = true;
  }
  cv.notify_all();
  if (watchdog.joinable()) watchdog.join();
  return ctx;
}

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
