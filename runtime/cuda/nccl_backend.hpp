#pragma once
// Backend `cuda`: one MPI process per GPU (mpirun -np RANKS), NCCL point-to-point.
//
// Bootstrap: rank 0 creates one ncclUniqueId per plan stream that carries
// transfers and broadcasts them over MPI; every process joins one
// communicator per such stream (so each comm stream's transfers match in
// issue order on their own communicator, as the plan's tags require), then
// exchanges one element with each of its peers on every communicator, so that
// the connections exist before the timed run. Groups of Send/Recv ops become
// ncclGroupStart / ncclSend|ncclRecv ... / ncclGroupEnd on the plan stream's
// CUDA stream. The watchdog polls ncclCommGetAsyncError and, at its deadline,
// calls ncclCommAbort on every communicator.
// A process uses GPU (node-local rank mod device count); NCCL refuses two
// ranks of a communicator on one GPU, so a node needs a GPU per rank.

#include "runtime/cuda/cuda_executor.hpp"

namespace charm::rt::cuda {

/// Collective over MPI_COMM_WORLD (MPI must be initialised). Rank 0 gets the
/// assembled results, every op's times (each rank's clock from its own t0,
/// taken right after a barrier) and the slowest rank's makespan. A copy of `plan` broken by opt.faults runs
/// where they drop ops.
[[nodiscard]] Expected<CudaRunResult> run_cuda_nccl(const ir::ValidatedPlan& plan, const GlobalTensors& in,
                                                    const CudaRunOptions& opt);

}  // namespace charm::rt::cuda
