#pragma once
// MpiContext: the MPI side of backend `mpi` (one process per rank under
// mpirun): initialisation with the best thread level, agreement between the
// processes, running this process's rank, gathering every rank's results on
// rank 0, and MPI_Abort where agreement is impossible. mpi.h stays out of this
// header.
//
// No wait here blocks for good. Every MPI call is checked (runtime/mpi_check.hpp);
// every collective is a non-blocking one polled against the watchdog's timeout;
// while the plan runs, the processes exchange a small heartbeat (ops completed or
// running, done, failed) on a communicator of their own, so that a failure on one
// rank stops every rank, a long computation anywhere counts as progress, and a
// stopped or dead peer is a stall (exit 3) on the others.

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "runtime/executor.hpp"

namespace charm::rt {

/// What every process of a job must agree on, as (name, value) pairs: flags and plan digest.
using WorkFields = std::vector<std::pair<std::string, std::string>>;

class MpiContext {
 public:
  /// MPI_Init_thread asking for MPI_THREAD_MULTIPLE; SERIALIZED is accepted (calls then take a mutex).
  [[nodiscard]] static Expected<std::unique_ptr<MpiContext>> init();
  /// Whether this process has initialised MPI already (and maybe finalised it): init() is once a process.
  [[nodiscard]] static bool started();
  ~MpiContext();  // MPI_Finalize
  MpiContext(const MpiContext&) = delete;
  MpiContext& operator=(const MpiContext&) = delete;

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int size() const { return size_; }
  [[nodiscard]] bool thread_multiple() const { return multiple_; }

  /// Agreement before a collective: each process hands in its status and the exit code it
  /// would end with; every process gets the lowest failing rank's error and code, or ok.
  /// An error of the Expected itself (MPI failed, or a peer never came within `timeout_s`,
  /// at least 30 s: see setup_timeout) means agreement was impossible: print it and abort().
  struct Agreement {
    Status status;
    int code = 0;
  };
  [[nodiscard]] Expected<Agreement> agree(const Status& mine, int code, double timeout_s, const std::string& what);

  /// Compares `fields` across the processes; on every process an error naming the first
  /// field in which some rank differs from rank 0 (where: "mpirun"), or ok.
  [[nodiscard]] Expected<Status> same_work(const WorkFields& fields, double timeout_s);

  /// Runs this process's rank of `plan` (a copy broken by opt.faults where they drop ops); rank 0 gets the assembled
  /// global results and the slowest rank's time, other ranks an empty result. Collective. On an error, failure_agreed()
  /// says whether every process returned the same error (then each may end normally), or not (a stall, a dead peer:
  /// abort()).
  [[nodiscard]] Expected<RunResult> run(const ir::ValidatedPlan& plan, const GlobalTensors& in, const RunOptions& opt);
  [[nodiscard]] bool failure_agreed() const { return agreed_; }

  /// Rank 0 runs `work` (it returns the exit code) while the others wait for its code,
  /// the heartbeat going on meanwhile, so a rank 0 that stops is a stall after `timeout_s`
  /// and a long `work` is not. Every process gets the code; an exception of `work`
  /// propagates on rank 0 (the others get kExitRuntime, or 2 for a usage error: `usage`).
  [[nodiscard]] Expected<int> rank0_decides(const std::function<int()>& work,
                                            const std::function<int(std::exception_ptr)>& code_of, double timeout_s);

  /// Tasks 0..total-1 spread over the processes (a sweep's configurations): each process runs
  /// `jobs` worker threads; rank 0's take tasks one at a time from the job's queue, the other
  /// processes' ask rank 0 for chunks that shrink as the queue empties (so that the last tasks
  /// spread out), and every finished task's bytes (what `task` returns) go to rank 0 at once.
  /// Rank 0 gets every task's bytes in task order, the others an empty vector. Only the calling
  /// thread calls MPI. Every process that has work left sends rank 0 a heartbeat five times a
  /// second, so a long task is not a stall; a process silent for `timeout_s` while it holds tasks
  /// (stopped, dead) is a stall on rank 0, and a rank 0 that does not answer a request for
  /// `timeout_s` one on the asker: the error comes back (the caller ends the job). `cancel`
  /// (a signal) ends the loop on the process where it is set: Error "interrupted", or on rank 0
  /// "interrupted after this process was paused" when it did not run for longer than the
  /// timeout itself (another process has reported it stalled).
  struct TaskShare {
    std::size_t total = 0;
    int jobs = 1;
    std::function<std::string(std::size_t)> task;                       // on a worker thread
    std::function<void(std::size_t done, std::size_t total)> progress;  // rank 0, about ten times a second
    const std::atomic<bool>* cancel = nullptr;
    double timeout_s = 30;
  };
  [[nodiscard]] Expected<std::vector<std::string>> share_tasks(const TaskShare& share);

  /// Ends every process of the job with `code` (where agreement is impossible).
  [[noreturn]] void abort(int code);

 private:
  MpiContext() = default;
  [[nodiscard]] Expected<RunResult> run_plan(const ir::Plan& plan, const GlobalTensors& in, const RunOptions& opt);
  int rank_ = 0, size_ = 1;
  bool multiple_ = false, agreed_ = false;
  long tag_ub_ = 32767;
  // MPI_Comm handles (pointers in Open MPI, integers in MPICH) live in the .cpp: a dup of
  // MPI_COMM_WORLD for the plan's messages and the collectives, another for the heartbeat.
  struct Comms;
  std::unique_ptr<Comms> comms_;
  std::mutex mu_;  // held around MPI calls when the library is only MPI_THREAD_SERIALIZED
};

}  // namespace charm::rt
