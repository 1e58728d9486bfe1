#include "runtime/cuda/nccl_backend.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <array>
#include <chrono>
#include <climits>
#include <cmath>
#include <set>
#include <thread>

#include "runtime/cuda/nccl_check.hpp"
#include "runtime/cuda/plan_runner.hpp"

namespace charm::rt::cuda {

namespace {

/// One communicator per plan stream that carries transfers.
struct Comms {
  std::array<ncclComm_t, ir::kNumStreams> comm{};
  bool aborted = false;

  Comms() { comm.fill(nullptr); }
  ~Comms() {
    for (auto c : comm)
      if (c != nullptr && !aborted) (void)ncclCommDestroy(c);
  }
  Comms(const Comms&) = delete;
  Comms& operator=(const Comms&) = delete;

  void abort_all() {
    if (aborted) return;
    aborted = true;
    for (auto c : comm)
      if (c != nullptr) (void)ncclCommAbort(c);
  }
  Status async_errors() const {
    for (auto c : comm) {
      if (c == nullptr) continue;
      ncclResult_t r = ncclSuccess;
      CHARM_NCCL_TRY(ncclCommGetAsyncError(c, &r));
      if (r != ncclSuccess && r != ncclInProgress)
        return nccl_error(int(r), nccl_detail(r).c_str(), "ncclCommGetAsyncError", __FILE__, __LINE__);
    }
    return {};
  }
};

/// Waits for `stream` with the watchdog's rules (used for the connection warm-up).
Status wait_stream(cudaStream_t stream, Comms& comms, double timeout_s, const char* what) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t q = cudaStreamQuery(stream);
    if (q == cudaSuccess) return {};
    if (q != cudaErrorNotReady) {
      comms.abort_all();
      return cuda_error(q, "cudaStreamQuery", __FILE__, __LINE__);
    }
    if (auto s = comms.async_errors(); !s) {
      comms.abort_all();
      return s;
    }
    if (timeout_s > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) {
      comms.abort_all();
      return Error{"", fmt::format("stall: {} did not finish within {:.1f} s", what, timeout_s)};
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

/// Picks this process's GPU: its index among the processes of its host (one GPU each).
Status select_device(int rank) {
  auto count = device_count();
  if (!count) return count.error();
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int local = 0, local_size = 1;
  MPI_Comm_rank(node, &local);
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);
  if (local_size > *count)
    return Error{"cuda", fmt::format("{} ranks on host {} but only {} GPU(s): NCCL needs one GPU per rank "
                                     "(use --backend cuda-local to run every rank on one GPU)",
                                     local_size, host_name(), *count)};
  CHARM_CUDA_TRY(cudaSetDevice(local));
  return {};
}

/// Plan streams that carry transfers (the same on every rank) and this rank's peers on each.
struct CommStreams {
  std::array<bool, ir::kNumStreams> used{};
  std::array<std::set<ir::RankId>, ir::kNumStreams> peers;
};

CommStreams comm_streams(const ir::Plan& plan, int rank) {
  CommStreams cs;
  for (const auto& op : plan.ops()) {
    if (!ir::is_comm(op)) continue;
    cs.used[std::size_t(op.stream)] = true;
    if (op.rank == rank) cs.peers[std::size_t(op.stream)].insert(op.peer);
  }
  return cs;
}

/// One communicator per used stream, ids broadcast from rank 0.
Status init_comms(const CommStreams& cs, int rank, int size, Comms& comms) {
  std::array<ncclUniqueId, ir::kNumStreams> ids{};
  if (rank == 0)
    for (int s = 0; s < ir::kNumStreams; ++s)
      if (cs.used[std::size_t(s)]) CHARM_NCCL_TRY(ncclGetUniqueId(&ids[std::size_t(s)]));
  MPI_Bcast(ids.data(), int(sizeof(ids)), MPI_BYTE, 0, MPI_COMM_WORLD);
  for (int s = 0; s < ir::kNumStreams; ++s)
    if (cs.used[std::size_t(s)])
      CHARM_NCCL_TRY(ncclCommInitRank(&comms.comm[std::size_t(s)], size, ids[std::size_t(s)], rank));
  return {};
}

/// Connection warm-up: one float each way with every peer, per communicator, grouped.
Status warm_up(const CommStreams& cs, int size, Comms& comms, double timeout_s) {
  cudaStream_t ws = nullptr;
  CHARM_CUDA_TRY(cudaStreamCreateWithFlags(&ws, cudaStreamNonBlocking));
  float* scratch = nullptr;
  CHARM_CUDA_TRY(cudaMalloc(&scratch, sizeof(float) * std::size_t(2 * size)));
  CHARM_CUDA_TRY(cudaMemset(scratch, 0, sizeof(float) * std::size_t(2 * size)));
  for (int s = 0; s < ir::kNumStreams; ++s) {
    if (!cs.used[std::size_t(s)] || cs.peers[std::size_t(s)].empty()) continue;
    CHARM_NCCL_TRY(ncclGroupStart());
    for (ir::RankId p : cs.peers[std::size_t(s)]) {
      CHARM_NCCL_TRY(ncclSend(scratch + 2 * p, 1, ncclFloat, p, comms.comm[std::size_t(s)], ws));
      CHARM_NCCL_TRY(ncclRecv(scratch + 2 * p + 1, 1, ncclFloat, p, comms.comm[std::size_t(s)], ws));
    }
    CHARM_NCCL_TRY(ncclGroupEnd());
  }
  CHARM_TRY(wait_stream(ws, comms, timeout_s, "the NCCL connection warm-up"));
  CHARM_CUDA_TRY(cudaFree(scratch));
  CHARM_CUDA_TRY(cudaStreamDestroy(ws));
  return {};
}

/// The runner's hooks: each Send/Recv group is one ncclGroup on its stream's communicator.
PlanRunner::Hooks nccl_hooks(const ir::Plan& plan, Comms& comms, PlanRunner*& runner_ptr) {
  PlanRunner::Hooks hooks;
  hooks.issue_group = [&plan, &comms, &runner_ptr](std::span<const ir::OpId> group, cudaStream_t stream) -> Status {
    CHARM_NCCL_TRY(ncclGroupStart());
    for (ir::OpId id : group) {
      const auto& op = plan.op(id);
      auto a = ir::decode(plan, id);
      if (!a) return Error{fmt::format("rank {} op {} ({})", op.rank, id, ir::op_label(plan, id)), a.error().what};
      const ir::BufferId b = op.kind == ir::OpKind::Send ? std::get<ir::SendArgs>(*a).src : std::get<ir::RecvArgs>(*a).dst;
      void* buf = runner_ptr->section(b, 0);
      const std::size_t bytes = runner_ptr->layout(plan.buffer(b).kind).bytes;
      ncclComm_t c = comms.comm[std::size_t(op.stream)];
      if (op.kind == ir::OpKind::Send) CHARM_NCCL_TRY(ncclSend(buf, bytes, ncclUint8, op.peer, c, stream));
      else CHARM_NCCL_TRY(ncclRecv(buf, bytes, ncclUint8, op.peer, c, stream));
    }
    CHARM_NCCL_TRY(ncclGroupEnd());
    return {};
  };
  hooks.poll = [&comms] { return comms.async_errors(); };
  hooks.abort = [&comms] { comms.abort_all(); };
  return hooks;
}

/// Times, peak bytes and result shards of every rank, reduced and gathered on rank 0.
Expected<CudaRunResult> gather_results(const ir::Plan& plan, PlanRunner& pr, int rank, int size) {
  CudaRunResult res;
  double mk = pr.makespan_ms(), enq = pr.enqueue_ms();
  unsigned long bytes = pr.rank_bytes(rank), max_bytes = 0;
  MPI_Reduce(&mk, &res.run.time_ms, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&enq, &res.enqueue_ms, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&bytes, &max_bytes, 1, MPI_UNSIGNED_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
  res.run.peak_bytes = max_bytes;
  // Op times: each op belongs to one rank, so a sum of (own times, zero elsewhere) collects them.
  auto collect = [&](const std::vector<double>& mine, std::vector<double>& all) {
    std::vector<double> v(mine.size());
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::isnan(mine[i]) ? 0.0 : mine[i];
    all.assign(v.size(), 0.0);
    MPI_Reduce(v.data(), all.data(), int(v.size()), MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  };
  collect(pr.start_ms(), res.start_ms);
  collect(pr.end_ms(), res.end_ms);

  auto shard = pr.outputs(rank);
  if (!shard) return shard.error();
  std::vector<RankOutputs> all(rank == 0 ? std::size_t(size) : 0);
  for (auto f : {&RankOutputs::out, &RankOutputs::lse, &RankOutputs::dq, &RankOutputs::dk, &RankOutputs::dv}) {
    const std::vector<float>& mine = (*shard).*f;
    if (mine.size() > std::size_t(INT_MAX)) return Error{"mpi", "a result shard is too large to gather"};
    std::vector<float> buf(rank == 0 ? mine.size() * std::size_t(size) : 0);
    MPI_Gather(mine.data(), int(mine.size()), MPI_FLOAT, buf.data(), int(mine.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
    for (std::size_t r = 0; r < all.size(); ++r)
      (all[r].*f).assign(buf.begin() + long(r * mine.size()), buf.begin() + long((r + 1) * mine.size()));
  }
  for (std::size_t r = 0; r < all.size(); ++r) assemble(plan, ir::RankId(r), all[r], res.run.out);
  return res;
}

} // namespace

Expected<CudaRunResult> run_cuda_nccl(const ir::Plan& plan, const GlobalTensors& in, const CudaRunOptions& opt) {
  CHARM_TRY(supports(plan));  // every process refuses alike, before any collective
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  set_error_rank(rank);
  if (size != plan.ranks)
    return Error{"--ranks", fmt::format("the plan has {} ranks but mpirun started {} processes", plan.ranks, size)};
  CHARM_TRY(select_device(rank));
  const CommStreams cs = comm_streams(plan, rank);
  Comms comms;
  CHARM_TRY(init_comms(cs, rank, size, comms));
  CHARM_TRY(warm_up(cs, size, comms, opt.timeout_s));
  PlanRunner* runner_ptr = nullptr;
  auto runner = PlanRunner::create(plan, {rank}, opt, nccl_hooks(plan, comms, runner_ptr));
  if (!runner) return runner.error();
  auto& pr = **runner;
  runner_ptr = &pr;
  for (int i = 0; i <= std::max(0, opt.warmup); ++i) {
    CHARM_TRY(pr.init_buffers(in));
    MPI_Barrier(MPI_COMM_WORLD);
    CHARM_TRY(pr.run());
  }
  return gather_results(plan, pr, rank, size);
}

} // namespace charm::rt::cuda
