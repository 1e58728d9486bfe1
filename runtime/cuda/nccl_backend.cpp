#include "runtime/cuda/nccl_backend.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <array>
#include <chrono>
#include <climits>
#include <cmath>
#include <set>
#include <thread>

#include "runtime/cuda/cuda_raii.hpp"
#include "runtime/cuda/nccl_check.hpp"
#include "runtime/cuda/plan_runner.hpp"
#include "runtime/mpi_check.hpp"

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

/// Every failure before a collective is agreed on first: a rank that fails alone must not
/// leave the others blocked in the collective (the lowest failing rank's error reaches all).
Status agreed(Status mine, const char* what, double timeout_s) {
  auto a = mpi_agree(MPI_COMM_WORLD, mine, 3, setup_timeout(timeout_s), what);
  if (!a) return a.error();
  return a->status;
}

/// Picks this process's GPU: its index among the processes of its host (one GPU each).
Status select_device(int rank) {
  auto count = device_count();
  if (!count) return count.error();
  MPI_Comm node = MPI_COMM_NULL;
  CHARM_MPI_TRY(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
  int local = 0, local_size = 1;
  CHARM_MPI_TRY(MPI_Comm_rank(node, &local));
  CHARM_MPI_TRY(MPI_Comm_size(node, &local_size));
  CHARM_MPI_TRY(MPI_Comm_free(&node));
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

/// One communicator per used stream, ids made on rank 0 and broadcast; each step agreed on
/// (ncclGetUniqueId failing on rank 0 must not leave the others in the broadcast).
Status init_comms(const CommStreams& cs, int rank, int size, double timeout_s, Comms& comms) {
  std::array<ncclUniqueId, ir::kNumStreams> ids{};
  auto make_ids = [&]() -> Status {
    if (rank == 0)
      for (int s = 0; s < ir::kNumStreams; ++s)
        if (cs.used[std::size_t(s)]) CHARM_NCCL_TRY(ncclGetUniqueId(&ids[std::size_t(s)]));
    return {};
  };
  CHARM_TRY(agreed(make_ids(), "the NCCL ids", timeout_s));
  MPI_Request req = MPI_REQUEST_NULL;
  CHARM_MPI_TRY(MPI_Ibcast(ids.data(), int(sizeof(ids)), MPI_BYTE, 0, MPI_COMM_WORLD, &req));
  CHARM_TRY(mpi_wait(req, setup_timeout(timeout_s), "rank 0's NCCL ids"));
  auto init = [&]() -> Status {
    for (int s = 0; s < ir::kNumStreams; ++s)
      if (cs.used[std::size_t(s)])
        CHARM_NCCL_TRY(ncclCommInitRank(&comms.comm[std::size_t(s)], size, ids[std::size_t(s)], rank));
    return {};
  };
  return agreed(init(), "the NCCL communicators", timeout_s);
}

/// Connection warm-up: one float each way with every peer, per communicator, grouped.
Status warm_up(const CommStreams& cs, int size, Comms& comms, double timeout_s) {
  Stream ws;
  CHARM_CUDA_TRY(cudaStreamCreateWithFlags(ws.out(), cudaStreamNonBlocking));
  DeviceMem<float> scratch;
  CHARM_CUDA_TRY(cudaMalloc(scratch.out(), sizeof(float) * std::size_t(2 * size)));
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
  // The scratch and the stream free themselves on return (the warm-up completed: nothing waits).
  return wait_stream(ws, comms, timeout_s, "the NCCL connection warm-up");
}

/// The runner's hooks: a group of transfers goes to NCCL as one ncclGroup on its stream's communicator.
PlanRunner::Hooks nccl_hooks(const ir::Plan& plan, Comms& comms, PlanRunner*& runner_ptr) {
  PlanRunner::Hooks hooks;
  hooks.issue_group = [&plan, &comms, &runner_ptr](std::span<const ir::OpId> group, cudaStream_t stream) -> Status {
    // The buffers first (a view's span of its root, or its wire form), so that a bad op
    // leaves no group open.
    std::vector<PlanRunner::Transfer> what;
    for (ir::OpId id : group) {
      auto t = runner_ptr->transfer(id);
      if (!t) return t.error();
      what.push_back(*t);
    }
    CHARM_NCCL_TRY(ncclGroupStart());
    for (std::size_t i = 0; i < group.size(); ++i) {
      const auto& op = plan.op(group[i]);
      ncclComm_t c = comms.comm[std::size_t(op.stream)];
      if (op.kind == ir::OpKind::Send)
        CHARM_NCCL_TRY(ncclSend(what[i].ptr, what[i].bytes, ncclUint8, op.peer, c, stream));
      else
        CHARM_NCCL_TRY(ncclRecv(what[i].ptr, what[i].bytes, ncclUint8, op.peer, c, stream));
    }
    CHARM_NCCL_TRY(ncclGroupEnd());
    return {};
  };
  hooks.poll = [&comms] { return comms.async_errors(); };
  hooks.abort = [&comms] { comms.abort_all(); };
  return hooks;
}

/// A collective of the results, watched like every other wait.
template <class Post>
Status watched(const std::string& what, double timeout_s, Post&& post) {
  MPI_Request req = MPI_REQUEST_NULL;
  if (const int rc = post(&req); rc != MPI_SUCCESS) return mpi_error(rc, what.c_str());
  return mpi_wait(req, timeout_s, what);
}

/// Times, peak memory and op times reduced to rank 0.
Status reduce_timing(PlanRunner& pr, int rank, double timeout_s, CudaRunResult& res) {
  double mk = pr.makespan_ms(), enq = pr.enqueue_ms();
  unsigned long bytes = pr.rank_bytes(rank), max_bytes = 0;
  CHARM_TRY(watched("MPI_Ireduce (the time)", timeout_s, [&](MPI_Request* r) {
    return MPI_Ireduce(&mk, &res.run.time_ms, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD, r);
  }));
  CHARM_TRY(watched("MPI_Ireduce (the enqueue time)", timeout_s, [&](MPI_Request* r) {
    return MPI_Ireduce(&enq, &res.enqueue_ms, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD, r);
  }));
  CHARM_TRY(watched("MPI_Ireduce (the peak memory)", timeout_s, [&](MPI_Request* r) {
    return MPI_Ireduce(&bytes, &max_bytes, 1, MPI_UNSIGNED_LONG, MPI_MAX, 0, MPI_COMM_WORLD, r);
  }));
  res.run.peak_bytes = max_bytes;
  // Op times: each op belongs to one rank, so a sum of (own times, zero elsewhere) collects them.
  auto collect = [&](const std::vector<double>& mine, std::vector<double>& all) -> Status {
    std::vector<double> v(mine.size());
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::isnan(mine[i]) ? 0.0 : mine[i];
    all.assign(v.size(), 0.0);
    return watched("MPI_Ireduce (the op times)", timeout_s, [&](MPI_Request* r) {
      return MPI_Ireduce(v.data(), all.data(), int(v.size()), MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD, r);
    });
  };
  CHARM_TRY(collect(pr.start_ms(), res.start_ms));
  return collect(pr.end_ms(), res.end_ms);
}

/// Every rank's result shards gathered on rank 0 and assembled into the global tensors.
Status gather_results(const ir::Plan& plan, PlanRunner& pr, int rank, int size, double timeout_s, CudaRunResult& res) {
  auto shard = pr.outputs(rank);
  CHARM_TRY(agreed(shard ? Status{} : Status{shard.error()}, "the results", timeout_s));
  std::vector<RankOutputs> all(rank == 0 ? std::size_t(size) : 0);
  for (auto f : {&RankOutputs::out, &RankOutputs::lse, &RankOutputs::dq, &RankOutputs::dk, &RankOutputs::dv}) {
    const std::vector<float>& mine = (*shard).*f;
    if (mine.size() > std::size_t(INT_MAX)) return Error{"mpi", "a result shard is too large to gather"};
    std::vector<float> buf(rank == 0 ? mine.size() * std::size_t(size) : 0);
    CHARM_TRY(watched("MPI_Igather (the results)", timeout_s, [&](MPI_Request* r) {
      return MPI_Igather(mine.data(), int(mine.size()), MPI_FLOAT, buf.data(), int(mine.size()), MPI_FLOAT, 0,
                         MPI_COMM_WORLD, r);
    }));
    for (std::size_t r = 0; r < all.size(); ++r)
      (all[r].*f).assign(buf.begin() + long(r * mine.size()), buf.begin() + long((r + 1) * mine.size()));
  }
  for (std::size_t r = 0; r < all.size(); ++r) assemble(plan, ir::RankId(r), all[r], res.run.out);
  return {};
}

/// Every process runs its rank of `plan` (validated, or broken on purpose by its caller).
Expected<CudaRunResult> run_nccl(const ir::Plan& plan, const GlobalTensors& in, const CudaRunOptions& opt) {
  CHARM_TRY(supports(plan));  // every process refuses alike, before any collective
  int rank = 0, size = 1;
  CHARM_MPI_TRY(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  CHARM_MPI_TRY(MPI_Comm_size(MPI_COMM_WORLD, &size));
  set_error_rank(rank);
  const double tmo = opt.timeout_s;
  if (size != plan.ranks)
    return Error{Field::Ranks, fmt::format("the plan has {} ranks but mpirun started {} processes", plan.ranks, size)};
  CHARM_TRY(agreed(select_device(rank), "the GPUs", tmo));
  const CommStreams cs = comm_streams(plan, rank);
  Comms comms;
  CHARM_TRY(init_comms(cs, rank, size, tmo, comms));
  CHARM_TRY(warm_up(cs, size, comms, tmo));

  PlanRunner* runner_ptr = nullptr;
  auto runner = PlanRunner::create(plan, {rank}, opt, nccl_hooks(plan, comms, runner_ptr));
  if (!runner) return runner.error();
  auto& pr = **runner;
  runner_ptr = &pr;
  for (int i = 0; i <= std::max(0, opt.warmup); ++i) {
    CHARM_TRY(agreed(pr.init_buffers(in), "the buffers", tmo));
    MPI_Request req = MPI_REQUEST_NULL;
    CHARM_MPI_TRY(MPI_Ibarrier(MPI_COMM_WORLD, &req));
    CHARM_TRY(mpi_wait(req, setup_timeout(tmo), "the other ranks to start the plan"));
    CHARM_TRY(pr.run());  // a failure here ends the job (MPI_Abort): a peer may be stuck in NCCL
  }
  CudaRunResult res;
  CHARM_TRY(reduce_timing(pr, rank, tmo, res));
  CHARM_TRY(gather_results(plan, pr, rank, size, tmo, res));
  return res;
}
}  // namespace

Expected<CudaRunResult> run_cuda_nccl(const ir::ValidatedPlan& plan, const GlobalTensors& in,
                                      const CudaRunOptions& opt) {
  return run_with_faults(plan, opt.faults, [&](const ir::Plan& p) { return run_nccl(p, in, opt); });
}

}  // namespace charm::rt::cuda
