#pragma once
// MpiContext: the MPI side of backend `mpi` (one process per rank under
// mpirun): initialisation with the best thread level, running this process's
// rank, gathering every rank's results on rank 0, and MPI_Abort for the
// watchdog. mpi.h stays out of this header.

#include <memory>

#include "runtime/executor.hpp"

namespace charm::rt {

class MpiContext {
 public:
  /// MPI_Init_thread asking for MPI_THREAD_MULTIPLE; SERIALIZED is accepted (calls then take a mutex).
  [[nodiscard]] static Expected<std::unique_ptr<MpiContext>> init();
  ~MpiContext();  // MPI_Finalize
  MpiContext(const MpiContext&) = delete;
  MpiContext& operator=(const MpiContext&) = delete;

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int size() const { return size_; }
  [[nodiscard]] bool thread_multiple() const { return multiple_; }

  /// Runs this process's rank of `plan`; rank 0 gets the assembled global results
  /// and the slowest rank's time, other ranks an empty result. Collective.
  [[nodiscard]] Expected<RunResult> run(const ir::Plan& plan, const GlobalTensors& in, const RunOptions& opt);
  /// Rank 0's value, on every rank. Collective.
  [[nodiscard]] int broadcast(int value);
  /// Ends every process of the job with `code` (the watchdog's way out).
  [[noreturn]] void abort(int code);

 private:
  MpiContext() = default;
  int rank_ = 0, size_ = 1;
  bool multiple_ = false;
  long tag_ub_ = 32767;
  void* comm_ = nullptr;  // MPI_Comm (a dup of MPI_COMM_WORLD)
};

} // namespace charm::rt
