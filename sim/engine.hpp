#pragma once
// The discrete-event engine's class, shared by simulator.cpp, critical_path.cpp and peak_memory.cpp (private to sim/).

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "scheduler/ir/plan_index.hpp"
#include "sim/event_queue.hpp"
#include "sim/fair_share_network.hpp"
#include "sim/simulator.hpp"
#include "sim/varlen_tiles.hpp"

namespace charm::sim::detail {

using ir::MaskPiece;
using ir::Op;
using ir::OpId;
using ir::Phase;
using ir::Plan;
using ir::PlanIndex;
using ir::RankId;
using ir::RankSymmetry;

class Engine {
 public:
  Engine(const Plan& plan, const topo::Topology& t, const ComputeModel& m, SimOptions o)
      : plan_(plan), topo_(t), model_(m), opt_(o), net_(FairShareNetwork::channels_of(t)), sym_(plan.symmetry),
        overlap_(o.compute && o.comm && t.stack.overlap_costs()) {}

  Expected<SimResult> run();

 private:
  [[nodiscard]] Status build();
  void advance_head(int s);
  /// One past the last place of the ncclGroup that begins at place `first` of the lane ending at `end`.
  [[nodiscard]] std::uint32_t group_end_from(std::uint32_t first, std::uint32_t end) const;
  void try_issue(int s);
  void issue(OpId op);
  void complete(OpId op);
  void start_flow(OpId send, OpId recv);
  /// ComputeModel::op_seconds, with the blocks' times remembered: a plan's attention blocks come in a few
  /// shapes (FLOPs, pass, mask piece), and the model is a pure function of them and the workload; a block of
  /// packed documents or a sliding window also of whose shards meet.
  [[nodiscard]] Seconds op_seconds(const Op& o);
  struct BlockTime {
    std::uint64_t flops_bits = 0;
    Phase phase = Phase::Fwd;
    MaskPiece mask = MaskPiece::Full;
    bool known = false;
    Seconds s = 0;
  };
  /// What a flow from GPU src to dst takes: its route (a quotient plan's: the representative channels) and
  /// its latency with the stack's per-message cost. Kept per GPU pair on small topologies (a sweep's), in a
  /// direct-mapped cache of the pairs last used on large ones.
  struct Path {
    topo::Route channels;
    double latency_s = 0;
    std::int32_t src = -1, dst = -1;  // the pair it is of (-1: none yet)
  };
  const Path& path_between(int src, int dst);
  void touch(RankId r);  // accounts the time since the rank's last state change
  // Overlap costs (the stack's compute_slowdown and comm_slowdown).
  struct Running {
    OpId op;
    std::uint32_t key;                    // its end event in q_, moved whenever the rate changes
    double left_s, since_s, rate, end_s;  // left: seconds of work at full rate
  };
  void start_running(OpId id, Seconds work_s);
  void stop_running(OpId id);
  void reschedule(RankId r);     // the rank's compute rate follows its flows
  void rescale_flows(RankId r);  // its links' rate follows its compute
  void flow_endpoints(int f, int delta);
  [[nodiscard]] Error deadlock() const;  // names the first op that never ran
  void finish();                         // the figures of a complete run: makespan, idle, channels, paths, memory
  void critical_path();
  void release_replay_state();
  void peak_memory();
  /// The ranks whose ops the plan holds: all, or a quotient plan's representatives.
  [[nodiscard]] int simulated_ranks() const { return sym_.active() ? sym_.block : plan_.ranks; }

  const Plan& plan_;
  const topo::Topology& topo_;
  const ComputeModel& model_;
  SimOptions opt_;
  FairShareNetwork net_;
  EventQueue q_;
  double now_ = 0;
  SimResult res_;
  RankSymmetry sym_;  // a quotient plan's
  bool overlap_ = false;
  std::vector<std::vector<Running>> running_;   // per rank: its attention blocks in progress
  std::vector<std::int32_t> rank_flows_;        // per rank: how many flows it has in flight (either end)
  std::vector<std::vector<int>> gpu_channels_;  // per rank: the channels of its GPU's own links

  // Lanes (rank, stream) in stream order, groups, partners, dependents (built by build()).
  const PlanIndex* idx_ = nullptr;  // SimOptions::index, or own_idx_
  std::optional<PlanIndex> own_idx_;
  // Per op (compact arrays, no per-op allocation while running): its dependencies not done yet, or
  // kIssued once a send or receive is issued (a flow starts when its partner's is too).
  std::vector<std::int32_t> deps_left_;
  static constexpr std::int32_t kIssued = -1;
  // Per lane: the issue cursor, places in idx_->stream_order().
  std::vector<std::uint32_t> head_, group_end_;  // group_end_: end of the group at the head
  std::vector<OpId> group_first_, group_last_;   // the head group's first and last op (a lane's ops are in id order)
  std::vector<std::int32_t> outstanding_;        // ops of the head group issued and not done
  std::vector<std::int32_t> waiting_;            // ops of the head group whose dependencies are not done
  // The stack's host thread per rank: when it has issued each op (empty: host_us is 0).
  std::vector<double> issued_by_host_s_;
  // Per flow id of the network: the pair it carries and its latency.
  std::vector<OpId> flow_send_;
  std::vector<double> flow_latency_s_;
  std::vector<std::uint32_t> drain_key_;  // its drain event's key in q_ (EventQueue::kNoKey: none)
  std::vector<Path> paths_;  // per (src, dst) GPU pair up to kPathTableGpus GPUs, else 2^kPathCacheBits slots
  static constexpr int kPathTableGpus = 64;
  static constexpr int kPathCacheBits = 12;
  std::array<BlockTime, 64> block_times_{};  // direct-mapped by shape (op_seconds)
  /// A block of packed documents or a sliding window: the shape of whose shards meet (in the CP group:
  /// DocumentShards::shape), pass and FLOPs.
  struct BlockKey {
    std::int64_t shape = 0;
    Phase phase = Phase::Fwd;
    std::uint64_t flops_bits = 0;
    bool operator<(const BlockKey& o) const {
      return std::tie(shape, phase, flops_bits) < std::tie(o.shape, o.phase, o.flops_bits);
    }
  };
  std::map<BlockKey, Seconds> position_times_;     // op_seconds of MaskPiece::Positions blocks
  std::optional<DocumentShards> document_shards_;  // the group's shards cut by document, on the first such block
  // Whether advance_head fetches a lane's next ops ahead: measured, 7% off the simulate stage of a 1,024-rank
  // causal charm plan (7.4M ops), 1.5% onto a 16-rank sweep's (cache-resident) plans.
  bool prefetch_ = false;
  static constexpr std::size_t kPrefetchFromOps = std::size_t(1) << 18;
  // Per rank: state for busy / exposed accounting.
  std::vector<double> rank_last_s_;
  std::vector<std::int32_t> comm_out_;
  std::vector<char> compute_busy_;
  std::size_t done_ = 0;
  // The next count of completed ops to report at (SimOptions::progress); never, without a callback.
  std::size_t next_progress_ = SIZE_MAX;
  void report_progress() {
    opt_.progress(done_, plan_.size());
    next_progress_ = done_ + SimOptions::kProgressOps;
  }
};

}  // namespace charm::sim::detail
