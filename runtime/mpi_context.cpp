#include "runtime/mpi_context.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <chrono>
#include <climits>

#include "runtime/mpi_transport.hpp"

namespace charm::rt {

namespace {
MPI_Comm as_comm(void* c) { return reinterpret_cast<MPI_Comm>(c); }
} // namespace

Expected<std::unique_ptr<MpiContext>> MpiContext::init() {
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
    return Error{"mpi", "MPI_Init_thread failed"};
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    return Error{"mpi", "the MPI library supports neither MPI_THREAD_MULTIPLE nor MPI_THREAD_SERIALIZED"};
  }
  std::unique_ptr<MpiContext> c(new MpiContext());
  c->multiple_ = provided >= MPI_THREAD_MULTIPLE;
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
  c->comm_ = reinterpret_cast<void*>(dup);
  MPI_Comm_rank(dup, &c->rank_);
  MPI_Comm_size(dup, &c->size_);
  void* ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  if (flag) c->tag_ub_ = *static_cast<int*>(ub);
  return c;
}

MpiContext::~MpiContext() {
  MPI_Comm c = as_comm(comm_);
  if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
  MPI_Finalize();
}

int MpiContext::broadcast(int value) {
  MPI_Bcast(&value, 1, MPI_INT, 0, as_comm(comm_));
  return value;
}

void MpiContext::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();  // MPI_Abort does not return; keep the compiler sure of it
}

Expected<RunResult> MpiContext::run(const ir::Plan& plan, const GlobalTensors& in, const RunOptions& opt) {
  if (plan.ranks != size_)
    return Error{"--ranks", fmt::format("the plan has {} ranks but mpirun started {} processes", plan.ranks, size_)};
  MpiTransport transport(comm_, !multiple_, tag_ub_);
  RankExecutor exec(plan, rank_, transport, input_filler(plan, in));
  RankExecutor* ptr = &exec;
  trace::Timeline measured;
  MPI_Barrier(as_comm(comm_));
  const auto t0 = std::chrono::steady_clock::now();  // every rank's clock starts at the barrier
  if (opt.timeline) {
    measured = trace::Timeline::zeros(plan);
    exec.record_times(&measured, t0);
  }
  if (auto s = drive(std::span<RankExecutor* const>(&ptr, 1), plan, opt); !s) return s.error();
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  auto shard = exec.outputs();
  if (!shard) return shard.error();
  RunResult res;
  double slowest = 0;
  MPI_Reduce(&ms, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, as_comm(comm_));
  res.time_ms = slowest;
  unsigned long peak = exec.peak_bytes(), max_peak = 0;
  MPI_Reduce(&peak, &max_peak, 1, MPI_UNSIGNED_LONG, MPI_MAX, 0, as_comm(comm_));
  res.peak_bytes = max_peak;
  if (opt.timeline) {
    // Each op's times are set on its own rank only (zero elsewhere, and times are >= 0): the
    // maximum over ranks collects them on rank 0.
    if (plan.size() > std::size_t(INT_MAX)) return Error{"mpi", "the plan has too many ops to gather a timeline"};
    res.timeline = trace::Timeline::zeros(plan);
    for (auto [src, dst] : {std::pair{&measured.start_s, &res.timeline.start_s}, std::pair{&measured.end_s, &res.timeline.end_s}})
      if (MPI_Reduce(src->data(), dst->data(), int(plan.size()), MPI_DOUBLE, MPI_MAX, 0, as_comm(comm_)) != MPI_SUCCESS)
        return Error{"mpi", "MPI_Reduce of the timeline failed"};
    res.timeline.flow_start_s = res.timeline.start_s;
    res.timeline.makespan_s = slowest * 1e-3;
  }
  // Every shard of a tensor has the same size, so a plain gather collects them in rank order.
  std::vector<RankOutputs> all(rank_ == 0 ? std::size_t(size_) : 0);
  auto gather = [&](std::vector<float> RankOutputs::*field) -> Status {
    const std::vector<float>& mine = (*shard).*field;
    const auto n = mine.size();
    if (n > std::size_t(INT_MAX)) return Error{"mpi", "a result shard is too large to gather"};
    std::vector<float> buf(rank_ == 0 ? n * std::size_t(size_) : 0);
    const int rc = MPI_Gather(mine.data(), int(n), MPI_FLOAT, buf.data(), int(n), MPI_FLOAT, 0, as_comm(comm_));
    if (rc != MPI_SUCCESS) return Error{"mpi", "MPI_Gather of the results failed"};
    for (std::size_t r = 0; r < all.size(); ++r) (all[r].*field).assign(buf.begin() + long(r * n), buf.begin() + long((r + 1) * n));
    return {};
  };
  for (auto f : {&RankOutputs::out, &RankOutputs::lse, &RankOutputs::dq, &RankOutputs::dk, &RankOutputs::dv})
    if (auto s = gather(f); !s) return s.error();
  for (std::size_t r = 0; r < all.size(); ++r) assemble(plan, ir::RankId(r), all[r], res.out);
  return res;
}

} // namespace charm::rt
