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
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "runtime/mpi_check.hpp"
#include "runtime/mpi_comms.hpp"
#include "runtime/mpi_context.hpp"

namespace charm::rt {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kTagAsk = 7101, kTagGive = 7102, kTagResult = 7103, kTagBeat = 7104;
constexpr auto kBeatEvery = std::chrono::milliseconds(200);
constexpr auto kPollEvery = std::chrono::microseconds(500);

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

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

 private:
  void loop() {
    for (;;) {
      if (share_.cancel != nullptr && share_.cancel->load()) return;
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
};

bool cancelled(const MpiContext::TaskShare& s) { return s.cancel != nullptr && s.cancel->load(); }

Error interrupted() { return Error{"", "interrupted"}; }

}  // namespace

Expected<std::vector<std::string>> MpiContext::share_tasks(const TaskShare& share) {
  std::mutex* mu = multiple_ ? nullptr : &mu_;
  auto lock = [mu] { return mu != nullptr ? std::unique_lock<std::mutex>(*mu) : std::unique_lock<std::mutex>(); };
  const MPI_Comm comm = comms_->comm;
  const std::size_t total = share.total;
  Outgoing out(comm, mu);
  Workers workers(share);

  if (rank_ == 0) {
    std::vector<std::string> results(total);
    std::atomic<std::size_t> next{0};
    std::size_t received = 0;
    // Per process: tasks given and not yet returned, when it was last heard from, whether it was told "no more".
    std::vector<std::size_t> holding(std::size_t(size_), 0);
    std::vector<Clock::time_point> heard(std::size_t(size_), Clock::now());
    std::vector<char> told_done(std::size_t(size_), 0);
    told_done[0] = 1;
    const std::size_t askers = std::size_t(std::max(1, size_ - 1));
    workers.start([&]() -> std::optional<std::size_t> {
      const std::size_t i = next.fetch_add(1);
      return i < total ? std::optional<std::size_t>(i) : std::nullopt;
    });
    auto last_progress = Clock::now() - std::chrono::seconds(1);
    for (;;) {
      if (cancelled(share)) return interrupted();
      for (auto& [i, bytes] : workers.finished()) results[i] = std::move(bytes);
      // Every message waiting, in arrival order.
      for (;;) {
        int flag = 0;
        MPI_Status st;
        {
          const auto lk = lock();
          CHARM_MPI_TRY(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, &st));
        }
        if (!flag) break;
        int count = 0;
        {
          const auto lk = lock();
          CHARM_MPI_TRY(MPI_Get_count(&st, MPI_BYTE, &count));
        }
        std::string bytes(std::size_t(count), '\0');
        {
          const auto lk = lock();
          CHARM_MPI_TRY(MPI_Recv(bytes.data(), count, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, comm, MPI_STATUS_IGNORE));
        }
        const auto src = std::size_t(st.MPI_SOURCE);
        heard[src] = Clock::now();
        if (st.MPI_TAG == kTagAsk) {
          // Guided chunks: a share of what is left, so that the tail spreads over every worker.
          const std::size_t left = total - std::min(total, next.load());
          const std::size_t want = std::clamp<std::size_t>(left / (4 * askers * std::size_t(std::max(1, share.jobs))),
                                                           1, 8 * std::size_t(std::max(1, share.jobs)));
          const std::size_t b = std::min(total, next.fetch_add(want));
          const std::size_t e = std::min(total, b + want);
          holding[src] += e - b;
          if (b == e) told_done[src] = 1;
          if (auto s = out.send(u64s({b, e}), int(src), kTagGive); !s) return s.error();
        } else if (st.MPI_TAG == kTagResult) {
          if (bytes.size() < 8 || u64_at(bytes, 0) >= total)
            return Error{"mpi", fmt::format("rank {} sent a result for no task", src)};
          results[u64_at(bytes, 0)] = bytes.substr(8);
          --holding[src];
          ++received;
        }
      }
      if (auto s = out.progress(); !s) return s.error();
      const std::size_t done = workers.done() + received;
      if (share.progress && seconds_since(last_progress) > 0.1) {
        share.progress(done, total);
        last_progress = Clock::now();
      }
      // Done when every task is in and every process has heard that none are left (one that asks
      // later would wait for an answer that never comes).
      if (done == total && out.empty() && std::all_of(told_done.begin(), told_done.end(), [](char c) { return c; }))
        break;
      // A process that holds tasks, or has not heard that none are left, and is silent: a stall.
      for (int r = 1; r < size_; ++r) {
        const auto R = std::size_t(r);
        if ((holding[R] > 0 || !told_done[R]) && share.timeout_s > 0 && seconds_since(heard[R]) > share.timeout_s)
          return Error{"", fmt::format("stall: rank {} has not been heard from for {:.1f} s while it holds {} "
                                       "task{} of the sweep (stopped or dead)",
                                       r, share.timeout_s, holding[R], holding[R] == 1 ? "" : "s")};
      }
      std::this_thread::sleep_for(kPollEvery);
    }
    workers.stop();
    for (auto& [i, bytes] : workers.finished()) results[i] = std::move(bytes);
    if (share.progress) share.progress(total, total);
    return results;
  }

  // Any other rank: ask for chunks while the local queue runs low, send each result as it finishes.
  workers.start([&] { return workers.take(); });
  bool asking = false, exhausted = false;
  std::uint64_t give[2] = {0, 0};
  MPI_Request give_req = MPI_REQUEST_NULL;
  auto asked_at = Clock::now(), beat_at = Clock::now();
  // When rank 0 stops, every other process misses its answer at once: staggered deadlines let the
  // lowest rank say it (its MPI_Abort ends the others before theirs).
  const double ask_timeout_s = share.timeout_s + 0.5 * double(rank_ - 1);
  for (;;) {
    if (cancelled(share)) {
      if (asking) {
        const auto lk = lock();
        (void)MPI_Cancel(&give_req);
        (void)MPI_Request_free(&give_req);
      }
      return interrupted();
    }
    if (!asking && !exhausted && workers.queued() < std::size_t(std::max(1, share.jobs))) {
      {
        const auto lk = lock();
        CHARM_MPI_TRY(MPI_Irecv(give, 2, MPI_UINT64_T, 0, kTagGive, comm, &give_req));
      }
      if (auto s = out.send(u64s({workers.done()}), 0, kTagAsk); !s) return s.error();
      asking = true;
      asked_at = Clock::now();
    }
    if (asking) {
      int flag = 0;
      {
        const auto lk = lock();
        CHARM_MPI_TRY(MPI_Test(&give_req, &flag, MPI_STATUS_IGNORE));
      }
      if (flag) {
        asking = false;
        if (give[0] >= give[1]) {
          exhausted = true;
          workers.no_more();
        } else {
          workers.add(give[0], give[1]);
        }
      } else if (share.timeout_s > 0 && seconds_since(asked_at) > ask_timeout_s) {
        return Error{"", fmt::format("stall: rank {} waited {:.1f} s for rank 0 to hand out sweep tasks: rank 0 "
                                     "does not answer (stopped or dead)",
                                     rank_, share.timeout_s)};
      }
    }
    for (auto& [i, bytes] : workers.finished()) {
      std::string msg = u64s({std::uint64_t(i)});
      msg += bytes;
      if (auto s = out.send(std::move(msg), 0, kTagResult); !s) return s.error();
    }
    // No beat after the last result: rank 0 may have left its loop by then.
    if (!(exhausted && workers.drained()) && Clock::now() - beat_at > kBeatEvery) {
      if (auto s = out.send(u64s({workers.done()}), 0, kTagBeat); !s) return s.error();
      beat_at = Clock::now();
    }
    if (auto s = out.progress(); !s) return s.error();
    if (exhausted && workers.drained() && out.empty()) break;
    std::this_thread::sleep_for(kPollEvery);
  }
  workers.stop();
  return std::vector<std::string>{};
}

}  // namespace charm::rt
