#pragma once
// The GPU backends' entry points.
//
//   cuda-local  every rank of the plan in this process on one GPU: one CUDA
//               stream per plan (rank, stream), CUDA events for dependencies,
//               each matched Send/Recv pair a device-to-device copy on the
//               receiver's stream (NCCL refuses two ranks of a communicator on
//               one GPU, so this is how the executor is checked on one card).
//   cuda        one process per GPU under mpirun; see nccl_backend.hpp.
//
// Both report op start/end times from CUDA events, relative to an event
// recorded before the first op, so that the simulator's summary and Chrome
// trace can be computed from a measurement (trace::summarize).

#include <string>
#include <vector>

#include "runtime/cuda/block_attention.hpp"
#include "runtime/executor.hpp"

namespace charm::rt::cuda {

/// Number of CUDA devices; an error ("no CUDA device was found ...") when there is none
/// or no usable driver.
[[nodiscard]] Expected<int> device_count();
/// "NVIDIA H200 (sm_90, 132 SMs, 141 GiB)".
[[nodiscard]] Expected<std::string> device_description(int device);

/// (out, lse) := the forward of (g.q, g.k, g.v) over the whole sequence on `device` (one
/// BlockAttention, fp32 accumulators); causal and full masks only (an error names the others).
[[nodiscard]] Status dense_forward(const ir::Workload& w, GlobalTensors& g, int device);
/// plan_inputs (executor.hpp), with a backward-only pass's forward results from dense_forward on
/// `device`: milliseconds where the host's fp64 reference takes minutes at 32k tokens. Masks by
/// position keep the host reference.
[[nodiscard]] Expected<GlobalTensors> device_plan_inputs(const ir::Workload& w, std::uint64_t seed, int device);

struct CudaRunOptions {
  double timeout_s = 0;  // watchdog: give up after this long without progress; 0 = never
  int warmup = 1;        // untimed runs before the timed one (each re-initialises every buffer)
  int device = 0;        // cuda-local: the GPU to use
  std::size_t tile_budget_bytes = BlockAttention::kDefaultTileBudget;  // per compute stream
  Faults faults{};  // testing: what to break on purpose (drop_first_send; none by default)
};

struct CudaRunResult {
  RunResult run;                         // results; time_ms = makespan from events; peak_bytes = buffer bytes of a rank
  std::vector<double> start_ms, end_ms;  // per op, from the timed run's start (on rank 0: every rank's ops)
  double enqueue_ms = 0;                 // host time spent enqueueing the timed run (max over processes)
};

/// Ok if the GPU backends can run `plan`: every buffer keeps the region rules that storage
/// needs (ir::check_buffer); plain and region plans (Ulysses, USP, TASP) both run.
[[nodiscard]] Status supports(const ir::Plan& plan);

/// Backend `cuda-local`: runs every rank of `plan` in this process on `opt.device` (a copy broken by
/// opt.faults where they drop ops).
[[nodiscard]] Expected<CudaRunResult> run_cuda_local(const ir::ValidatedPlan& plan, const GlobalTensors& in,
                                                     const CudaRunOptions& opt);

}  // namespace charm::rt::cuda
