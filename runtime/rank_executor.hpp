#pragma once
// RankExecutor: runs one rank's part of a plan.
//
// One worker thread per stream the rank uses; each walks its stream's ops in
// id order. An op starts once its dependencies (same rank, any stream) have
// completed; a run of consecutive Send/Recv ops with one group id is posted
// together and then waited on as a whole (ncclGroupStart/End). Compute and
// communication therefore overlap for real. Completion is tracked under one
// mutex per rank; cross-rank ordering comes only from the Transport.
//
// Region plans (scheduler/ir/region.hpp): a compute runs every (q owner,
// kv owner) pair of its buffers on their kv-head range and token parts,
// skipping pairs the causal mask hides; merges, accumulations and packs go
// block by block; a plain copy moves the overlap of two regions
// (region_copy.hpp); a transfer moves a whole buffer or view.
//
// The executor never blocks without a way out: every wait re-checks stop(),
// and blocked() says what each unfinished worker waits on (for the watchdog).

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "runtime/buffer_store.hpp"
#include "runtime/cpu_attention.hpp"
#include "runtime/transport.hpp"
#include "scheduler/ir/op_args.hpp"
#include "scheduler/ir/plan_index.hpp"
#include "scheduler/trace/trace.hpp"

namespace charm::rt {

/// A rank's results, shard-local: out [B,T,H,D], lse [B,H,T], dq, dk, dv (empty if not produced).
struct RankOutputs {
  std::vector<float> out, lse, dq, dk, dv;
};

/// What an unfinished worker waits on: an op's dependency, or a posted transfer.
struct BlockedOp {
  ir::RankId rank = 0;
  ir::Stream stream = ir::Stream::Compute;
  ir::OpId op = ir::kNone;        // the op the worker is at
  ir::OpId waits_on = ir::kNone;  // the op it waits for (== op when waiting on the transport)
  bool in_transport = false;
};

class RankExecutor {
 public:
  /// `index` is the plan's (one index serves every rank of a process); it outlives the executor.
  RankExecutor(const ir::Plan& plan, const ir::PlanIndex& index, ir::RankId rank, Transport& transport,
               BufferStore::FillInput fill);
  /// Builds the plan's index itself.
  RankExecutor(const ir::Plan& plan, ir::RankId rank, Transport& transport, BufferStore::FillInput fill);
  ~RankExecutor();
  RankExecutor(const RankExecutor&) = delete;
  RankExecutor& operator=(const RankExecutor&) = delete;

  void start();
  /// Asks every worker to give up at its next wait.
  void stop();
  void join();

  [[nodiscard]] ir::RankId rank() const { return rank_; }
  [[nodiscard]] bool done() const { return finished_workers_.load() == workers_.size(); }
  [[nodiscard]] std::uint64_t progress() const { return completed_.load(); }
  /// Whether some worker is inside a local op (a compute, a merge, ...): that is
  /// progress too, however long one op takes, so the watchdog waits for it.
  [[nodiscard]] bool running() const;
  [[nodiscard]] std::optional<Error> error() const;
  [[nodiscard]] std::vector<BlockedOp> blocked() const;
  [[nodiscard]] std::size_t peak_bytes() const { return store_.peak_bytes(); }
  /// The rank's results; call after join().
  [[nodiscard]] Expected<RankOutputs> outputs();
  /// Before start(): write each of this rank's ops' start and end, in seconds from t0, into
  /// `t` (indexed by OpId; ranks write disjoint entries, so executors may share one).
  void record_times(trace::Timeline* t, std::chrono::steady_clock::time_point t0) {
    timeline_ = t;
    t0_ = t0;
  }

 private:
  enum class State : int { Idle, WaitingDeps, InTransport, Running, Finished };
  struct Worker {
    ir::Stream stream = ir::Stream::Compute;
    std::span<const ir::OpId> ops;  // its lane of the index
    std::atomic<ir::OpId> at{ir::kNone};
    std::atomic<int> state{int(State::Idle)};
  };

  void work(Worker& w);
  bool wait_deps(std::span<const ir::OpId> ops);
  void finish(std::span<const ir::OpId> ops);
  Status run_comm(std::span<const ir::OpId> ops, bool& stopped);
  Status run_local(ir::OpId id);
  void fail(Error e);
  void check_pairs();
  RankExecutor(const ir::Plan& plan, std::unique_ptr<ir::PlanIndex> own, ir::RankId rank, Transport& transport,
               BufferStore::FillInput fill, const ir::PlanIndex* index = nullptr);

  // One function per local op kind (ir::decode has checked the slots' buffers and kinds).
  /// A buffer of this rank with its storage and region layout.
  struct Arg {
    float* data = nullptr;
    std::int64_t size = 0;
    const RegionLayout* l = nullptr;
    ir::BufferId id = ir::kNone;
    [[nodiscard]] const ir::Region& region() const { return l->region; }
    [[nodiscard]] const ShardShape& block() const { return l->block; }
    /// Owner x's block.
    [[nodiscard]] float* at(ir::RankId x) const {
      return data + std::int64_t(x - l->region.owner_begin) * l->block_elems;
    }
  };
  struct ComputeArgs {
    Arg q, kv, acc;
  };
  Status compute_fwd(ir::OpId id, const ir::ComputeFwdArgs& a);
  Status compute_bwd(ir::OpId id, const ir::ComputeBwdArgs& a);
  Status merge(ir::OpId id, const ir::MergeArgs& a);
  Status accumulate(ir::OpId id, const ir::AccumulateArgs& a);
  Status pack(ir::OpId id, const ir::PackArgs& a);
  Status copy(ir::OpId id, const ir::CopyArgs& a);
  [[nodiscard]] Expected<Arg> arg(ir::OpId id, ir::BufferId b);
  /// q, kv and the accumulator of a compute, checked against the op's blocks, heads and regions.
  [[nodiscard]] Expected<ComputeArgs> compute_args(ir::OpId id, ir::BufferId q, ir::BufferId kv, ir::BufferId acc,
                                                   bool fwd);
  [[nodiscard]] Status same_region(ir::OpId id, const Arg& a, const Arg& b, const char* what) const;
  [[nodiscard]] std::string where(ir::OpId id) const;
  /// The attention shape of a block (its heads).
  [[nodiscard]] AttnShape attn(const ShardShape& b) const;

  std::unique_ptr<ir::PlanIndex> own_index_;  // when the caller gave none
  const ir::Plan& plan_;
  const ir::PlanIndex* idx_;
  ir::RankId rank_;
  Transport& transport_;
  BufferStore store_;
  AttnShape shape_;
  RegionPositions positions_;
  std::map<ir::OpId, std::string> pair_errors_;  // receives whose sender holds another region
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<char> op_done_;   // by OpId, guarded by mu_
  std::optional<Error> error_;  // guarded by mu_
  std::atomic<bool> stop_{false};
  trace::Timeline* timeline_ = nullptr;
  std::chrono::steady_clock::time_point t0_;
  std::atomic<std::uint64_t> completed_{0};
  std::atomic<std::size_t> finished_workers_{0};
};

}  // namespace charm::rt
