// MpiContext::share_tasks: a task queue on rank 0 for work that splits into independent tasks
// (a sweep's configurations), worker threads in every process, results gathered on rank 0 as
// they finish. Only the calling thread calls MPI; the workers hand it tasks and results
// through a mutex-guarded queue and outbox.
//
// Messages, on the context's communicator (a sweep runs no plan, so its tags are free):
//   ask    rank r -> 0  (uint64: tasks r finished)    "give me work"
//   give   0 -> r       (uint64[2]: begin, end)        a chunk; begin == end: the queue is empty
//   result r -> 0       (uint64 task, then its bytes)
//   beat   r -> 0       (uint64: tasks r finished)     r is alive (five times a second)
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <list>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "runtime/mpi_check.hpp"
#include "runtime/mpi_comms.hpp"
#include "runtime/mpi_context.hpp"
#include "support/first_exception.hpp"

namespace charm::rt {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kTagAsk = 7101, kTagGive = 7102, kTagResult = 7103, kTagBeat = 7104;
constexpr auto kBeatEvery = std::chrono::milliseconds(200);
constexpr auto kPollEvery = std::chrono::microseconds(500);

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

/// The clock of a loop that waits on others: silence is measured only while this process listened.
/// A turn that starts more than half the timeout after the last one means this process did not run
/// (stopped, starved): what it did not hear meanwhile is not the others' silence. Each turn's checks
/// read the turn's start, so a stop that lands inside a turn is seen by the next one, never as a stall.
class TurnClock {
 public:
  explicit TurnClock(double timeout_s) : timeout_s_(timeout_s) {}
  /// Starts a turn; true when this process was paused since the last one.
  bool turn() {
    const auto now = Clock::now();
    const bool gap = timeout_s_ > 0 && seconds_between(last_, now) > 0.5 * timeout_s_;
    last_ = now;
    paused_ = paused_ || gap;
    return gap;
  }
  [[nodiscard]] Clock::time_point now() const { return last_; }
  /// Whether `since`, counted to this turn's start, is longer than the timeout.
  [[nodiscard]] bool silent(Clock::time_point since) const {
    return timeout_s_ > 0 && seconds_between(since, last_) > timeout_s_;
  }
  /// Whether this process was ever paused (it then stays quiet on the SIGTERM that may follow).
  [[nodiscard]] bool was_paused() const { return paused_; }

 private:
  double timeout_s_;
  Clock::time_point last_ = Clock::now();
  bool paused_ = false;
};

/// Sends in flight: each keeps its buffer until MPI_Test says it is done.
class Outgoing {
 public:
  Outgoing(MPI_Comm comm, std::mutex* mu) : comm_(comm), mu_(mu) {}
  Status send(std::string bytes, int dest, int tag) {
    auto& s = sends_.emplace_back();
    s.bytes = std::move(bytes);
    const auto lk = lock();
    CHARM_MPI_TRY(MPI_Isend(s.bytes.data(), int(s.bytes.size()), MPI_BYTE, dest, tag, comm_, &s.req));
    return {};
  }
  /// Drops the sends that completed.
  Status progress() {
    const auto lk = lock();
    for (auto it = sends_.begin(); it != sends_.end();) {
      int flag = 0;
      CHARM_MPI_TRY(MPI_Test(&it->req, &flag, MPI_STATUS_IGNORE));
      it = flag ? sends_.erase(it) : std::next(it);
    }
    return {};
  }
  [[nodiscard]] bool empty() const { return sends_.empty(); }

 private:
  struct Send {
    std::string bytes;
    MPI_Request req = MPI_REQUEST_NULL;
  };
  [[nodiscard]] std::unique_lock<std::mutex> lock() const {
    return mu_ != nullptr ? std::unique_lock<std::mutex>(*mu_) : std::unique_lock<std::mutex>();
  }
  MPI_Comm comm_;
  std::mutex* mu_;
  std::list<Send> sends_;  // stable addresses: MPI holds the buffers
};

std::string u64s(std::initializer_list<std::uint64_t> v) {
  std::string s(v.size() * 8, '\0');
  std::size_t k = 0;
  for (const auto x : v) std::memcpy(s.data() + 8 * k++, &x, 8);
  return s;
}

std::uint64_t u64_at(const std::string& s, std::size_t k) {
  std::uint64_t x = 0;
  std::memcpy(&x, s.data() + 8 * k, 8);
  return x;
}

/// The worker threads of one process and what passes between them and the MPI thread.
class Workers {
 public:
  explicit Workers(const MpiContext::TaskShare& share) : share_(share) {}
  ~Workers() { stop(); }
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;

  /// `next` hands a worker its next task (nullopt: none left or stopping).
  void start(std::function<std::optional<std::size_t>()> next) {
    next_ = std::move(next);
    for (int j = 0; j < std::max(1, share_.jobs); ++j) pool_.emplace_back([this] { loop(); });
  }
  void stop() {
    {
      const std::lock_guard lk(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : pool_)
      if (t.joinable()) t.join();
    pool_.clear();
  }
  // The local queue (processes other than rank 0).
  void add(std::size_t begin, std::size_t end) {
    {
      const std::lock_guard lk(mu_);
      for (std::size_t i = begin; i < end; ++i) queue_.push_back(i);
    }
    cv_.notify_all();
  }
  void no_more() {
    {
      const std::lock_guard lk(mu_);
      no_more_ = true;
    }
    cv_.notify_all();
  }
  std::optional<std::size_t> take() {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return stopping_ || no_more_ || !queue_.empty(); });
    if (stopping_ || queue_.empty()) return std::nullopt;
    const std::size_t i = queue_.front();
    queue_.pop_front();
    ++busy_;
    return i;
  }
  [[nodiscard]] std::size_t queued() {
    const std::lock_guard lk(mu_);
    return queue_.size();
  }
  /// Finished tasks since the last call.
  std::vector<std::pair<std::size_t, std::string>> finished() {
    const std::lock_guard lk(mu_);
    return std::exchange(out_, {});
  }
  /// Every task taken is finished and handed over, and no more will come (the local queue's mode).
  [[nodiscard]] bool drained() {
    const std::lock_guard lk(mu_);
    return no_more_ && queue_.empty() && busy_ == 0 && out_.empty();
  }
  [[nodiscard]] std::size_t done() const { return done_.load(); }
  /// The first exception a task threw (std::bad_alloc, most likely) as an error: the job ends on it.
  [[nodiscard]] Status failure() const {
    if (!failure_.failed()) return {};
    try {
      failure_.rethrow();
    } catch (const std::bad_alloc&) {
      return Error{"", "out of memory"};
    } catch (const std::exception& e) {
      return Error{"", std::string("internal: ") + e.what()};
    } catch (...) {}
    return Error{"", "internal: a task failed"};
  }

 private:
  void loop() {
    failure_.run([this] { run_tasks(); });
  }
  void run_tasks() {
    for (;;) {
      if (share_.cancel != nullptr && share_.cancel->load()) return;
      {
        const std::lock_guard lk(mu_);
        if (stopping_) return;
      }
      const auto i = next_();
      if (!i) return;
      std::string bytes = share_.task(*i);
      {
        const std::lock_guard lk(mu_);
        out_.emplace_back(*i, std::move(bytes));
        --busy_;
      }
      ++done_;
    }
  }
  const MpiContext::TaskShare& share_;
  std::function<std::optional<std::size_t>()> next_;
  std::vector<std::thread> pool_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::size_t> queue_;
  std::vector<std::pair<std::size_t, std::string>> out_;
  std::size_t busy_ = 0;
  bool no_more_ = false, stopping_ = false;
  std::atomic<std::size_t> done_{0};
  FirstException failure_;  // an exception leaving a worker thread would be std::terminate
};

bool cancelled(const MpiContext::TaskShare& s) { return s.cancel != nullptr && s.cancel->load(); }

Error interrupted() { return Error{"", "interrupted", ErrorKind::Interrupted}; }
/// Rank 0's interruption after it did not run for longer than the timeout itself (stopped,
/// starved): another process has reported it as a stall, so the caller stays quiet.
/// Not of kind Interrupted: the job ends as a failed run, not as a signalled one.
Error interrupted_after_pause() { return Error{"", "interrupted after this process was paused", ErrorKind::RunFailed}; }

/// What the MPI thread of a process shares: the communicator, the lock (SERIALIZED
/// libraries), the sends in flight and the worker threads.
struct Endpoint {
  MPI_Comm comm;
  std::mutex* mu;
  const MpiContext::TaskShare& share;
  Outgoing out;
  Workers workers;
  Endpoint(MPI_Comm c, std::mutex* m, const MpiContext::TaskShare& s)
      : comm(c), mu(m), share(s), out(c, m), workers(s) {}
  [[nodiscard]] std::unique_lock<std::mutex> lock() const {
    return mu != nullptr ? std::unique_lock<std::mutex>(*mu) : std::unique_lock<std::mutex>();
  }
};

/// Rank 0: the queue, its own workers, every other process's asks, results and heartbeats.
class Host {
 public:
  Host(Endpoint& ep, int size)
      : ep_(ep), total_(ep.share.total), results_(total_), holding_(std::size_t(size), 0),
        heard_(std::size_t(size), Clock::now()), told_done_(std::size_t(size), 0) {
    told_done_[0] = 1;
  }
  // The workers call back into this object: they end before it does, on every path out of run().
  ~Host() { ep_.workers.stop(); }
  Host(const Host&) = delete;
  Host& operator=(const Host&) = delete;

  Expected<std::vector<std::string>> run() {
    ep_.workers.start([this]() -> std::optional<std::size_t> {
      const std::size_t i = next_.fetch_add(1);
      return i < total_ ? std::optional<std::size_t>(i) : std::nullopt;
    });
    auto shown = Clock::now() - std::chrono::seconds(1);
    for (;;) {
      // mpirun's SIGCONT before its SIGTERM lets a stopped rank 0 run again for a moment: the
      // others' silence restarts then, so that it does not name a peer that is being ended.
      if (clock_.turn()) std::fill(heard_.begin(), heard_.end(), clock_.now());
      if (cancelled(ep_.share)) return clock_.was_paused() ? interrupted_after_pause() : interrupted();
      for (auto& [i, bytes] : ep_.workers.finished()) results_[i] = std::move(bytes);
      if (auto s = ep_.workers.failure(); !s) return s.error();
      if (auto s = receive_all(); !s) return s.error();
      if (auto s = ep_.out.progress(); !s) return s.error();
      const std::size_t done = ep_.workers.done() + received_;
      if (ep_.share.progress && seconds_since(shown) > 0.1) {
        ep_.share.progress(done, total_);
        shown = Clock::now();
      }
      // Done when every task is in and every process has heard that none are left (one that asks
      // later would wait for an answer that never comes).
      if (done == total_ && ep_.out.empty() &&
          std::all_of(told_done_.begin(), told_done_.end(), [](char c) { return c; }))
        break;
      if (auto s = stall(); !s) return s.error();
      std::this_thread::sleep_for(kPollEvery);
    }
    ep_.workers.stop();
    for (auto& [i, bytes] : ep_.workers.finished()) results_[i] = std::move(bytes);
    if (ep_.share.progress) ep_.share.progress(total_, total_);
    return std::move(results_);
  }

 private:
  /// Every message waiting, in arrival order.
  Status receive_all() {
    for (;;) {
      int flag = 0, count = 0;
      MPI_Status st;
      {
        const auto lk = ep_.lock();
        CHARM_MPI_TRY(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, ep_.comm, &flag, &st));
        if (!flag) return {};
        CHARM_MPI_TRY(MPI_Get_count(&st, MPI_BYTE, &count));
      }
      std::string bytes(std::size_t(count), '\0');
      {
        const auto lk = ep_.lock();
        CHARM_MPI_TRY(MPI_Recv(bytes.data(), count, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, ep_.comm, MPI_STATUS_IGNORE));
      }
      const auto src = std::size_t(st.MPI_SOURCE);
      heard_[src] = clock_.now();
      if (st.MPI_TAG == kTagAsk) {
        if (auto s = answer(src); !s) return s;
      } else if (st.MPI_TAG == kTagResult) {
        if (bytes.size() < 8 || u64_at(bytes, 0) >= total_)
          return Error{"mpi", fmt::format("rank {} sent a result for no task", src)};
        results_[u64_at(bytes, 0)] = bytes.substr(8);
        --holding_[src];
        ++received_;
      }
    }
  }

  /// Guided chunks: a share of what is left, so that the tail spreads over every worker.
  Status answer(std::size_t src) {
    const auto jobs = std::size_t(std::max(1, ep_.share.jobs));
    const std::size_t askers = std::max<std::size_t>(1, holding_.size() - 1);
    const std::size_t left = total_ - std::min(total_, next_.load());
    const std::size_t want = std::clamp<std::size_t>(left / (4 * askers * jobs), 1, 8 * jobs);
    const std::size_t b = std::min(total_, next_.fetch_add(want));
    const std::size_t e = std::min(total_, b + want);
    holding_[src] += e - b;
    if (b == e) told_done_[src] = 1;
    return ep_.out.send(u64s({b, e}), int(src), kTagGive);
  }

  /// A process that holds tasks, or has not heard that none are left, and is silent: a stall.
  Status stall() const {
    const double t = ep_.share.timeout_s;
    for (std::size_t r = 1; r < holding_.size(); ++r)
      if ((holding_[r] > 0 || !told_done_[r]) && clock_.silent(heard_[r]))
        return Error{"", fmt::format("stall: rank {} has not been heard from for {:.1f} s while it holds {} task{} of "
                                     "the sweep (stopped or dead)",
                                     r, t, holding_[r], holding_[r] == 1 ? "" : "s")};
    return {};
  }

  Endpoint& ep_;
  TurnClock clock_{ep_.share.timeout_s};
  std::size_t total_;
  std::vector<std::string> results_;
  std::atomic<std::size_t> next_{0};
  std::size_t received_ = 0;
  // Per process: tasks given and not yet returned, when it was last heard from, whether it was told "no more".
  std::vector<std::size_t> holding_;
  std::vector<Clock::time_point> heard_;
  std::vector<char> told_done_;
};

/// Any other rank: asks for chunks while its local queue runs low, sends each result as it
/// finishes, and a heartbeat while it has work.
class Client {
 public:
  Client(Endpoint& ep, int rank)
      : ep_(ep), rank_(rank),
        // When rank 0 stops, every other process misses its answer at once: staggered deadlines let
        // the lowest rank say it (its MPI_Abort ends the others before theirs, with seconds to spare
        // on a loaded machine).
        ask_timeout_s_(ep.share.timeout_s + std::max(2.0, 0.5 * ep.share.timeout_s) * double(rank - 1)) {}
  ~Client() { ep_.workers.stop(); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  Status run() {
    ep_.workers.start([this] { return ep_.workers.take(); });
    auto beat_at = Clock::now();
    for (;;) {
      if (clock_.turn()) asked_at_ = clock_.now();  // rank 0's answer may be waiting unread
      if (cancelled(ep_.share)) return give_up();
      if (auto s = ep_.workers.failure(); !s) return s;
      if (auto s = ask(); !s) return s;
      if (auto s = read_answer(); !s) return s;
      for (auto& [i, bytes] : ep_.workers.finished()) {
        std::string msg = u64s({std::uint64_t(i)});
        msg += bytes;
        if (auto s = ep_.out.send(std::move(msg), 0, kTagResult); !s) return s;
      }
      // No beat after the last result: rank 0 may have left its loop by then.
      if (!(exhausted_ && ep_.workers.drained()) && Clock::now() - beat_at > kBeatEvery) {
        if (auto s = ep_.out.send(u64s({ep_.workers.done()}), 0, kTagBeat); !s) return s;
        beat_at = Clock::now();
      }
      if (auto s = ep_.out.progress(); !s) return s;
      if (exhausted_ && ep_.workers.drained() && ep_.out.empty()) break;
      std::this_thread::sleep_for(kPollEvery);
    }
    ep_.workers.stop();
    return {};
  }

 private:
  Status ask() {
    if (asking_ || exhausted_ || ep_.workers.queued() >= std::size_t(std::max(1, ep_.share.jobs))) return {};
    {
      const auto lk = ep_.lock();
      CHARM_MPI_TRY(MPI_Irecv(give_, 2, MPI_UINT64_T, 0, kTagGive, ep_.comm, &give_req_));
    }
    asking_ = true;
    asked_at_ = clock_.now();
    return ep_.out.send(u64s({ep_.workers.done()}), 0, kTagAsk);
  }

  Status read_answer() {
    if (!asking_) return {};
    int flag = 0;
    {
      const auto lk = ep_.lock();
      CHARM_MPI_TRY(MPI_Test(&give_req_, &flag, MPI_STATUS_IGNORE));
    }
    if (flag) {
      asking_ = false;
      if (give_[0] >= give_[1]) {
        exhausted_ = true;
        ep_.workers.no_more();
      } else {
        ep_.workers.add(give_[0], give_[1]);
      }
    } else if (ep_.share.timeout_s > 0 && seconds_between(asked_at_, clock_.now()) > ask_timeout_s_) {
      return Error{"", fmt::format("stall: rank {} waited {:.1f} s for rank 0 to hand out sweep tasks: rank 0 does "
                                   "not answer (stopped or dead)",
                                   rank_, ep_.share.timeout_s)};
    }
    return {};
  }

  Status give_up() {
    if (asking_) {
      const auto lk = ep_.lock();
      (void)MPI_Cancel(&give_req_);
      (void)MPI_Request_free(&give_req_);
    }
    return interrupted();
  }

  Endpoint& ep_;
  TurnClock clock_{ep_.share.timeout_s};
  int rank_;
  double ask_timeout_s_;
  bool asking_ = false, exhausted_ = false;
  std::uint64_t give_[2] = {0, 0};
  MPI_Request give_req_ = MPI_REQUEST_NULL;
  Clock::time_point asked_at_ = Clock::now();
};

}  // namespace

Expected<std::vector<std::string>> MpiContext::share_tasks(const TaskShare& share) {
  Endpoint ep(comms_->comm, multiple_ ? nullptr : &mu_, share);
  if (rank_ == 0) return Host(ep, size_).run();
  if (auto s = Client(ep, rank_).run(); !s) return s.error();
  return std::vector<std::string>{};
}

}  // namespace charm::rt
