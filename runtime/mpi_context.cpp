#include "runtime/mpi_context.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <array>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <thread>

#include "runtime/mpi_check.hpp"
#include "runtime/mpi_comms.hpp"
#include "runtime/mpi_transport.hpp"

namespace charm::rt {

namespace {

using Clock = std::chrono::steady_clock;

/// The heartbeat: one MPI_Iallreduce (sum) of JobState at a time on its own communicator.
class MpiMonitor final : public JobMonitor {
 public:
  MpiMonitor(MPI_Comm comm, int size, std::mutex* mu) : comm_(comm), size_(size), mu_(mu) {}
  ~MpiMonitor() override = default;  // a round in flight is left only on the way to MPI_Abort

  Expected<std::optional<JobState>> poll(const JobState& mine) override {
    std::unique_lock<std::mutex> lk =
        mu_ != nullptr ? std::unique_lock<std::mutex>(*mu_) : std::unique_lock<std::mutex>();
    const auto now = Clock::now();
    if (inflight_) {
      int flag = 0;
      CHARM_MPI_TRY(MPI_Test(&req_, &flag, MPI_STATUS_IGNORE));
      if (!flag) return std::optional<JobState>();
      inflight_ = false;
      return std::optional<JobState>(JobState{recv_[0], recv_[1], recv_[2]});
    }
    if (now - posted_ < std::chrono::milliseconds(10)) return std::optional<JobState>();
    send_ = {mine.progress, mine.done, mine.failed};
    CHARM_MPI_TRY(MPI_Iallreduce(send_.data(), recv_.data(), 3, MPI_UINT64_T, MPI_SUM, comm_, &req_));
    inflight_ = true;
    posted_ = now;
    return std::optional<JobState>();
  }
  [[nodiscard]] std::uint64_t processes() const override { return std::uint64_t(size_); }
  [[nodiscard]] double waiting_s() const override {
    return inflight_ ? std::chrono::duration<double>(Clock::now() - posted_).count() : 0.0;
  }

 private:
  MPI_Comm comm_;
  int size_;
  std::mutex* mu_;
  MPI_Request req_ = MPI_REQUEST_NULL;
  std::array<std::uint64_t, 3> send_{}, recv_{};
  bool inflight_ = false;
  Clock::time_point posted_{};
};
}  // namespace

Expected<std::unique_ptr<MpiContext>> MpiContext::init() {
  int provided = 0;
  if (int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided); rc != MPI_SUCCESS)
    return Error{"mpi", fmt::format("MPI_Init_thread failed (error code {})", rc)};
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    return Error{"mpi", "the MPI library supports neither MPI_THREAD_MULTIPLE nor MPI_THREAD_SERIALIZED"};
  }
  std::unique_ptr<MpiContext> c(new MpiContext());
  c->multiple_ = provided >= MPI_THREAD_MULTIPLE;
  // Failures come back as codes from here on (the default handler would abort without a word).
  CHARM_MPI_TRY(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  c->comms_ = std::make_unique<Comms>();
  MPI_Comm& dup = c->comms_->comm;
  MPI_Comm& hb = c->comms_->hb;
  CHARM_MPI_TRY(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
  CHARM_MPI_TRY(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN));
  CHARM_MPI_TRY(MPI_Comm_dup(MPI_COMM_WORLD, &hb));
  CHARM_MPI_TRY(MPI_Comm_set_errhandler(hb, MPI_ERRORS_RETURN));
  CHARM_MPI_TRY(MPI_Comm_rank(dup, &c->rank_));
  CHARM_MPI_TRY(MPI_Comm_size(dup, &c->size_));
  void* ub = nullptr;
  int flag = 0;
  CHARM_MPI_TRY(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag));
  if (flag) c->tag_ub_ = *static_cast<int*>(ub);
  return c;
}

bool MpiContext::started() {
  int initialized = 0, finalized = 0;
  (void)MPI_Initialized(&initialized);
  (void)MPI_Finalized(&finalized);
  return initialized != 0 || finalized != 0;
}

MpiContext::~MpiContext() {
  if (comms_)
    for (MPI_Comm* c : {&comms_->comm, &comms_->hb})
      if (*c != MPI_COMM_NULL) (void)MPI_Comm_free(c);
  (void)MPI_Finalize();
}

void MpiContext::abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();  // MPI_Abort does not return; keep the compiler sure of it
}

Expected<MpiContext::Agreement> MpiContext::agree(const Status& mine, int code, double timeout_s,
                                                  const std::string& what) {
  auto a = mpi_agree(comms_->comm, mine, code, setup_timeout(timeout_s), what);
  if (!a) return a.error();
  return Agreement{a->status, a->code};
}

Expected<Status> MpiContext::same_work(const WorkFields& fields, double timeout_in) {
  const double timeout_s = setup_timeout(timeout_in);
  MPI_Comm comm = comms_->comm;
  std::string text;
  for (const auto& [k, v] : fields) text += k + '\x1f' + v + '\x1e';
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : text) h = (h ^ ch) * 1099511628211ull;
  std::vector<std::uint64_t> all(std::size_t(size_), 0);
  MPI_Request req = MPI_REQUEST_NULL;
  CHARM_MPI_TRY(MPI_Iallgather(&h, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, comm, &req));
  if (auto s = mpi_wait(req, timeout_s, "the other ranks to compare their work"); !s) return s.error();
  int other = -1;
  for (int r = 1; r < size_ && other < 0; ++r)
    if (all[std::size_t(r)] != all[0]) other = r;
  if (other < 0) return Status{};
  // Rank `other` differs from rank 0: both send their fields to everyone, so every
  // process reports the same difference.
  auto fetch = [&](int root) -> Expected<WorkFields> {
    long long n = root == rank_ ? (long long)text.size() : 0;
    CHARM_MPI_TRY(MPI_Ibcast(&n, 1, MPI_LONG_LONG, root, comm, &req));
    if (auto s = mpi_wait(req, timeout_s, "the work of rank " + std::to_string(root)); !s) return s.error();
    if (n < 0 || n > INT_MAX) return Error{"mpi", fmt::format("rank {} described its work in {} bytes", root, n)};
    std::string t = root == rank_ ? text : std::string(std::size_t(n), '\0');
    if (n > 0) {
      CHARM_MPI_TRY(MPI_Ibcast(t.data(), int(n), MPI_CHAR, root, comm, &req));
      if (auto s = mpi_wait(req, timeout_s, "the work of rank " + std::to_string(root)); !s) return s.error();
    }
    WorkFields f;
    for (std::size_t p = 0; p < t.size();) {
      const auto us = t.find('\x1f', p), rs = t.find('\x1e', p);
      if (us == std::string::npos || rs == std::string::npos || us > rs) break;
      f.emplace_back(t.substr(p, us - p), t.substr(us + 1, rs - us - 1));
      p = rs + 1;
    }
    return f;
  };
  auto f0 = fetch(0);
  if (!f0) return f0.error();
  auto fo = fetch(other);
  if (!fo) return fo.error();
  std::string diff;
  for (std::size_t i = 0; i < std::max(f0->size(), fo->size()); ++i) {
    const auto a = i < f0->size() ? (*f0)[i] : std::pair<std::string, std::string>{"?", ""};
    const auto b = i < fo->size() ? (*fo)[i] : std::pair<std::string, std::string>{"?", ""};
    if (a == b) continue;
    // A file's contents travel as a digest: one path may name different files on different hosts.
    diff = a.first == "plan" || a.first == "topology"
               ? fmt::format("rank {} runs another {} than rank 0 (its digest is {}, rank 0's {})", other, a.first,
                             b.second, a.second)
               : fmt::format("rank {} has {} {}, rank 0 has {} {}", other, b.first, b.second, a.first, a.second);
    break;
  }
  if (diff.empty()) diff = fmt::format("rank {} describes its work differently from rank 0", other);
  return Status{
      Error{"mpirun", fmt::format("the ranks were started with different work: {} (every process must run the "
                                  "same command)",
                                  diff)}};
}

namespace {

/// The collectives after the plan: each one non-blocking and polled against the watchdog's timeout.
struct Collectives {
  MPI_Comm comm;
  double timeout_s;
  std::mutex* mu;

  template <class Post>
  Status call(const std::string& what, Post&& post) const {
    MPI_Request r = MPI_REQUEST_NULL;
    if (int rc = post(&r); rc != MPI_SUCCESS) return mpi_error(rc, what.c_str());
    return mpi_wait(r, timeout_s, what, mu);
  }
};

/// The job's figures on rank 0: the slowest rank's time, the largest peak memory and, when
/// `measured` is given, every op's times.
Status reduce_figures(const Collectives& c, const ir::Plan& plan, double ms, unsigned long peak,
                      const trace::Timeline* measured, RunResult& res) {
  double slowest = 0;
  if (auto s = c.call("MPI_Ireduce (the time)",
                      [&](MPI_Request* r) { return MPI_Ireduce(&ms, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, c.comm, r); });
      !s)
    return s;
  res.time_ms = slowest;
  unsigned long max_peak = 0;
  if (auto s = c.call(
          "MPI_Ireduce (the peak memory)",
          [&](MPI_Request* r) { return MPI_Ireduce(&peak, &max_peak, 1, MPI_UNSIGNED_LONG, MPI_MAX, 0, c.comm, r); });
      !s)
    return s;
  res.peak_bytes = max_peak;
  if (measured == nullptr) return {};
  // Each op's times are set on its own rank only (zero elsewhere, and times are >= 0): the
  // maximum over ranks collects them on rank 0.
  if (plan.size() > std::size_t(INT_MAX)) return Error{"mpi", "the plan has too many ops to gather a timeline"};
  res.timeline = trace::Timeline::zeros(plan);
  // A pair, not a structured binding: clang before 16 cannot capture bindings in a lambda.
  for (const auto& io :
       {std::pair{&measured->start_s, &res.timeline.start_s}, std::pair{&measured->end_s, &res.timeline.end_s}})
    if (auto s = c.call("MPI_Ireduce (the timeline)",
                        [&](MPI_Request* r) {
                          return MPI_Ireduce(io.first->data(), io.second->data(), int(plan.size()), MPI_DOUBLE, MPI_MAX,
                                             0, c.comm, r);
                        });
        !s)
      return s;
  res.timeline.flow_start_s = res.timeline.start_s;
  res.timeline.makespan_s = slowest * 1e-3;
  return {};
}

/// Every rank's result shards, on rank 0 (empty elsewhere). Every shard of a tensor has the
/// same size, so a plain gather collects them in rank order; the sizes are compared first, so
/// that no rank's shard can overrun rank 0's buffer. `agreed` is set when every process
/// refuses for the same reason.
Expected<std::vector<RankOutputs>> gather_outputs(const Collectives& c, const RankOutputs& shard, int rank, int size,
                                                  bool& agreed) {
  const std::array fields{&RankOutputs::out, &RankOutputs::lse, &RankOutputs::dq, &RankOutputs::dk, &RankOutputs::dv};
  constexpr std::array names{"out", "lse", "dq", "dk", "dv"};
  std::array<long long, 5> mine{};
  for (std::size_t i = 0; i < fields.size(); ++i) mine[i] = (long long)(shard.*fields[i]).size();
  std::vector<long long> sizes(std::size_t(size) * mine.size());
  if (auto s = c.call("MPI_Iallgather (the result sizes)",
                      [&](MPI_Request* r) {
                        return MPI_Iallgather(mine.data(), int(mine.size()), MPI_LONG_LONG, sizes.data(),
                                              int(mine.size()), MPI_LONG_LONG, c.comm, r);
                      });
      !s)
    return s.error();
  for (int r = 1; r < size; ++r)
    for (std::size_t i = 0; i < mine.size(); ++i)
      if (sizes[std::size_t(r) * mine.size() + i] != sizes[i]) {
        agreed = true;  // every process read the same sizes
        return Error{"mpi", fmt::format("rank {}'s {} result holds {} floats, rank 0's {}: refused before gathering", r,
                                        names[i], sizes[std::size_t(r) * mine.size() + i], sizes[i])};
      }
  std::vector<RankOutputs> all(rank == 0 ? std::size_t(size) : 0);
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const std::vector<float>& v = shard.*fields[i];
    const auto n = v.size();
    if (n > std::size_t(INT_MAX)) return Error{"mpi", "a result shard is too large to gather"};
    std::vector<float> buf(rank == 0 ? n * std::size_t(size) : 0);
    if (auto s = c.call(fmt::format("MPI_Igather (the {} results)", names[i]),
                        [&](MPI_Request* r) {
                          return MPI_Igather(v.data(), int(n), MPI_FLOAT, buf.data(), int(n), MPI_FLOAT, 0, c.comm, r);
                        });
        !s)
      return s.error();
    for (std::size_t r = 0; r < all.size(); ++r)
      (all[r].*fields[i]).assign(buf.begin() + long(r * n), buf.begin() + long((r + 1) * n));
  }
  return all;
}

}  // namespace

Expected<RunResult> MpiContext::run(const ir::ValidatedPlan& plan, const GlobalTensors& in, const RunOptions& opt) {
  return run_with_faults(plan, opt.faults, [&](const ir::Plan& p) { return run_plan(p, in, opt); });
}

Expected<RunResult> MpiContext::run_plan(const ir::Plan& plan, const GlobalTensors& in, const RunOptions& opt_in) {
  CHARM_ASSERT(!plan.symmetry.active(), "executors run full plans, not one class of ranks");
  agreed_ = false;
  if (plan.ranks != size_)
    return Error{Field::Ranks, fmt::format("the plan has {} ranks but mpirun started {} processes", plan.ranks, size_)};
  const Collectives c{comms_->comm, opt_in.timeout_s, multiple_ ? nullptr : &mu_};
  MpiTransport transport(&comms_->comm, c.mu, tag_ub_);
  if (opt_in.faults.short_recv && rank_ == 1) transport.inject_short_recv();
  RankExecutor exec(plan, rank_, transport, input_filler(plan, in));
  RankExecutor* ptr = &exec;
  MpiMonitor monitor(comms_->hb, size_, c.mu);
  RunOptions opt = opt_in;
  opt.monitor = &monitor;
  trace::Timeline measured;
  MPI_Request req = MPI_REQUEST_NULL;
  CHARM_MPI_TRY(MPI_Ibarrier(c.comm, &req));
  if (auto s = mpi_wait(req, setup_timeout(c.timeout_s), "the other ranks to start the plan", c.mu); !s)
    return s.error();
  const auto t0 = std::chrono::steady_clock::now();  // every rank's clock starts at the barrier
  if (opt.timeline) {
    measured = trace::Timeline::zeros(plan);
    exec.record_times(&measured, t0);
  }
  const DriveOutcome d = drive_job(std::span<RankExecutor* const>(&ptr, 1), plan, opt);
  if (!d.status) {
    if (!d.agreed) return d.status.error();
    // Every process left in the same round: the lowest failing rank's error reaches all.
    auto a = mpi_agree(comms_->hb, d.status.error().kind == ErrorKind::PeerFailed ? Status{} : d.status, 3, c.timeout_s,
                       "the failure");
    if (!a) return d.status.error();  // no agreement after all: the caller aborts with our own error
    agreed_ = !a->status.ok();
    return a->status.ok() ? d.status.error() : a->status.error();
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // The results; a failure here (a plan naming no result) is agreed on before the collectives. After the plan
  // the ranks' own work differs (rank 0 gathers and assembles every result and the measured timeline), so
  // a peer's silence there is no stall within the plan's timeout: these waits get the setup's floor (30 s)
  // as the waits before the plan do; a rank that took 0.1 s more than the others under load is not dead.
  const Collectives after{c.comm, setup_timeout(c.timeout_s), c.mu};
  auto shard = exec.outputs();
  if (auto a = mpi_agree(after.comm, shard ? Status{} : Status{shard.error()}, 3, after.timeout_s, "the results"); !a)
    return a.error();
  else if (!a->status) {
    agreed_ = true;
    return a->status.error();
  }
  RunResult res;
  if (auto s = reduce_figures(after, plan, ms, exec.peak_bytes(), opt.timeline ? &measured : nullptr, res); !s)
    return s.error();
  auto all = gather_outputs(after, *shard, rank_, size_, agreed_);
  if (!all) return all.error();
  for (std::size_t r = 0; r < all->size(); ++r) assemble(plan, ir::RankId(r), (*all)[r], res.out);
  return res;
}

Expected<int> MpiContext::rank0_decides(const std::function<int()>& work,
                                        const std::function<int(std::exception_ptr)>& code_of, double timeout_s) {
  std::mutex* mu = multiple_ ? nullptr : &mu_;
  std::atomic<bool> finished{size_ > 1 ? false : true};
  std::exception_ptr thrown;
  int code = 0;
  std::thread worker;
  auto body = [&] {
    try {
      code = work();
    } catch (...) {
      thrown = std::current_exception();
      code = code_of(thrown);
    }
    finished.store(true);
  };
  if (rank_ == 0) {
    if (size_ == 1)
      body();
    else
      worker = std::thread(body);
  }
  // Heartbeat rounds until rank 0 is done: its ticks are progress, its silence a stall.
  MpiMonitor monitor(comms_->hb, size_, mu);
  std::uint64_t ticks = 0, last = ~0ull;
  auto last_change = Clock::now();
  Status st;
  while (size_ > 1) {
    const bool me_done = rank_ != 0 || finished.load();
    if (!me_done) ++ticks;
    auto job = monitor.poll(JobState{ticks, me_done ? 1u : 0u, 0});
    if (!job) {
      st = job.error();
      break;
    }
    const auto now = Clock::now();
    if (*job) {
      if ((*job)->done >= std::uint64_t(size_)) break;
      if ((*job)->progress != last) {
        last = (*job)->progress;
        last_change = now;
      }
    }
    if (timeout_s > 0 && std::chrono::duration<double>(now - last_change).count() > timeout_s) {
      st = Error{"",
                 fmt::format("stall: rank {} waited {:.1f} s for rank 0 to check and report the results: rank 0 does "
                             "not answer (stopped or dead)",
                             rank_, timeout_s)};
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (worker.joinable()) worker.join();  // rank 0 leaves the loop only once `work` ended
  if (!st) return st.error();
  // Rank 0's code to everyone.
  int c = code;
  MPI_Request req = MPI_REQUEST_NULL;
  CHARM_MPI_TRY(MPI_Ibcast(&c, 1, MPI_INT, 0, comms_->comm, &req));
  if (auto s = mpi_wait(req, timeout_s, "rank 0's exit code", mu); !s) return s.error();
  if (thrown) std::rethrow_exception(thrown);
  return c;
}

}  // namespace charm::rt
