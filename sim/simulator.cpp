#include "sim/simulator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <numeric>
#include <optional>
#include <string>
#include <utility>

#include "scheduler/ir/op_args.hpp"
#include "scheduler/ir/plan_index.hpp"

#include "sim/event_queue.hpp"
#include "sim/fair_share_network.hpp"

namespace charm::sim {

using namespace charm::ir;

namespace {

enum EventKind : std::uint32_t { kOpDone, kFlowDrained, kFlowDone, kHostIssued };

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
  /// shapes (FLOPs, pass, mask piece), and the model is a pure function of them and the workload.
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

}  // namespace

namespace {
/// When the transfer of Send/Recv `id` with `partner` began: a flow starts the moment its second side is issued.
Seconds transfer_start(const SimResult& r, OpId id, OpId partner) {
  return std::max(r.start_s[std::size_t(id)], r.start_s[std::size_t(partner)]);
}
}  // namespace

std::vector<Seconds> flow_start_times(const Plan& plan, const SimResult& r) {
  std::vector<Seconds> at(r.start_s);
  const PlanIndex idx(plan, nullptr, PlanIndex::Parts::Lean);  // partners are all it reads
  for (std::size_t i = 0; i < at.size(); ++i)
    if (const OpId p = idx.partner(OpId(i)); is_comm(plan.op(OpId(i))) && p != kNone)
      at[i] = transfer_start(r, OpId(i), p);
  return at;
}

std::vector<Seconds> host_issue_times(const Plan& plan, Seconds host_s) {
  std::vector<Seconds> at;
  if (host_s <= 0) return at;
  std::vector<Seconds> clock(std::size_t(plan.ranks), 0.0);
  at.resize(plan.size());
  for (std::size_t i = 0; i < plan.size(); ++i) at[i] = clock[std::size_t(plan.op(OpId(i)).rank)] += host_s;
  return at;
}

namespace {

Status Engine::build() {
  const std::size_t n = plan_.size();
  idx_ = opt_.index;
  if (idx_ == nullptr) idx_ = &own_idx_.emplace(plan_, nullptr, PlanIndex::Parts::Lean);
  CHARM_ASSERT(idx_->stream_order().size() == n && idx_->lanes() == std::size_t(plan_.ranks) * kNumStreams,
               "SimOptions::index is the index of the plan simulated");
  deps_left_.assign(n, 0);
  prefetch_ = n >= kPrefetchFromOps;
  for (std::size_t i = 0; i < n; ++i) deps_left_[i] = static_cast<std::int32_t>(plan_.deps(OpId(i)).size());
  const std::size_t S = idx_->lanes();
  head_.resize(S);
  for (std::size_t s = 0; s < S; ++s) head_[s] = idx_->lane_begin(s);
  group_end_ = head_;
  group_first_.assign(S, kNone);
  group_last_.assign(S, kNone);
  outstanding_.assign(S, 0);
  waiting_.assign(S, 0);
  issued_by_host_s_ = host_issue_times(plan_, topo_.stack.host_us * 1e-6);
  for (std::size_t i = 0; i < n; ++i)
    if (is_comm(plan_.op(OpId(i))) && idx_->partner(OpId(i)) == kNone)
      return Error{"plan", fmt::format("op {} ({}) has no matching {}", i, op_label(plan_, OpId(i)),
                                       plan_.op(OpId(i)).kind == OpKind::Send ? "receive" : "send")};
  const auto ranks = std::size_t(plan_.ranks);
  res_.start_s.assign(n, 0);
  res_.end_s.assign(n, 0);
  // After every per-op array is sized: advance_head prefetches into them.
  for (std::size_t s = 0; s < S; ++s) advance_head(static_cast<int>(s));
  res_.ranks.assign(ranks, RankStats{});
  rank_last_s_.assign(ranks, 0);
  comm_out_.assign(ranks, 0);
  compute_busy_.assign(ranks, 0);
  if (overlap_) {
    running_.assign(ranks, {});
    rank_flows_.assign(ranks, 0);
    gpu_channels_.assign(ranks, {});
    std::vector<RankId> rank_at(std::size_t(topo_.num_gpus()), kNone);
    for (RankId r = 0; r < plan_.ranks; ++r) rank_at[std::size_t(plan_.gpu_of(r))] = r;
    for (int c = 0; c < topo_.num_channels(); ++c) {
      const topo::Link& l = topo_.channel_link(c);
      for (const int v : {l.a, l.b})
        if (v < topo_.num_gpus() && rank_at[std::size_t(v)] != kNone)
          gpu_channels_[std::size_t(rank_at[std::size_t(v)])].push_back(c);
    }
  }
  q_.reserve(1024);
  const auto G = std::size_t(topo_.num_gpus());
  paths_.assign(G <= kPathTableGpus ? G * G : std::size_t(1) << kPathCacheBits, {});
  if (opt_.progress) next_progress_ = SimOptions::kProgressOps;
  return {};
}

void Engine::touch(RankId r) {
  const auto R = std::size_t(r);
  const double dt = now_ - rank_last_s_[R];
  if (dt > 0) {
    if (comm_out_[R] > 0) res_.ranks[R].comm_busy_s += dt;
    if (compute_busy_[R])
      res_.ranks[R].compute_busy_s += dt;
    else if (comm_out_[R] > 0)
      res_.ranks[R].exposed_comm_s += dt;
  }
  rank_last_s_[R] = now_;
}

std::uint32_t Engine::group_end_from(std::uint32_t first, std::uint32_t end) const {
  // The index is lean (no per-op group table): the group runs while each op joins the one before it. Only
  // a grouped send or receive can have followers, so a lone op's next is not looked at (nor missed in cache).
  std::uint32_t e = first + 1;
  for (const Op* before = &plan_.op(idx_->at(first)); is_comm(*before) && before->group != kNone && e < end; ++e) {
    const Op& o = plan_.op(idx_->at(e));
    if (!PlanIndex::joins_group(*before, o)) break;
    before = &o;
  }
  return e;
}

void Engine::advance_head(int s) {
  // The group at the head of the stream: scanned once when the head gets
  // there, so a stream of g-op groups costs O(g) in all, not per dependency.
  const auto S = std::size_t(s);
  const std::uint32_t p = head_[S];
  group_end_[S] = p;
  waiting_[S] = 0;
  const std::uint32_t end = idx_->lane_end(S);
  if (p >= end) return;
  const std::uint32_t e = group_end_from(p, end);
  group_end_[S] = e;
  group_first_[S] = idx_->at(p);
  group_last_[S] = idx_->at(e - 1);
  for (std::uint32_t k = p; k < e; ++k) waiting_[S] += deps_left_[std::size_t(idx_->at(k))] > 0;
  // The lane's next ops are read when this group completes, long after: fetched into cache meanwhile (two:
  // a send and a receive grouped are the commonest group), where the plan is too large for the caches.
  for (std::uint32_t k = e; prefetch_ && k < e + 2 && k < end; ++k) {
    const auto next = std::size_t(idx_->at(k));
    __builtin_prefetch(&plan_.op(OpId(next)));
    __builtin_prefetch(&deps_left_[next]);
    __builtin_prefetch(&res_.start_s[next]);
    __builtin_prefetch(&res_.end_s[next]);
    idx_->prefetch(OpId(next));
  }
}

void Engine::try_issue(int s) {
  const auto S = std::size_t(s);
  if (outstanding_[S] > 0 || waiting_[S] > 0) return;
  const std::uint32_t p = head_[S], e = group_end_[S];
  if (p >= e) return;
  if (!issued_by_host_s_.empty()) {
    double ready = 0;
    for (std::uint32_t k = p; k < e; ++k) ready = std::max(ready, issued_by_host_s_[std::size_t(idx_->at(k))]);
    if (ready > now_) {  // the host has not issued the group yet: look again then
      q_.push(ready, kHostIssued, s);
      return;
    }
  }
  outstanding_[S] = static_cast<std::int32_t>(e - p);
  for (std::uint32_t k = p; k < e; ++k) issue(idx_->at(k));
}

void Engine::issue(OpId id) {
  const Op& o = plan_.op(id);
  res_.start_s[std::size_t(id)] = now_;
  touch(o.rank);
  if (is_comm(o)) {
    deps_left_[std::size_t(id)] = kIssued;
    ++comm_out_[std::size_t(o.rank)];
    const OpId p = idx_->partner(id);
    if (deps_left_[std::size_t(p)] == kIssued) {
      if (o.kind == OpKind::Send)
        start_flow(id, p);
      else
        start_flow(p, id);
    }
    return;
  }
  if (o.stream == Stream::Compute) compute_busy_[std::size_t(o.rank)] = 1;
  const Seconds work = opt_.compute ? op_seconds(o) : 0.0;
  if (overlap_ && o.kind == OpKind::Compute) {
    start_running(id, work);
    return;
  }
  q_.push(now_ + work, kOpDone, id);
}

// While a rank has a flow in flight its blocks run at 1/(1 + compute_slowdown); a block's
// end is re-planned whenever that changes: its end event moves (a keyed event, so that the queue holds
// no stale ends to skip).
void Engine::start_running(OpId id, Seconds work_s) {
  const RankId r = plan_.op(id).rank;
  auto& run = running_[std::size_t(r)];
  const double rate = rank_flows_[std::size_t(r)] == 0 ? 1.0 : 1.0 / (1.0 + topo_.stack.compute_slowdown);
  const double end_s = now_ + work_s / rate;
  run.push_back({id, q_.push_keyed(end_s, kOpDone, id), work_s, now_, rate, end_s});
  if (run.size() == 1) rescale_flows(r);
}

void Engine::stop_running(OpId id) {
  const RankId r = plan_.op(id).rank;
  auto& run = running_[std::size_t(r)];
  for (std::size_t k = 0; k < run.size(); ++k)
    if (run[k].op == id) {
      run[k] = run.back();
      run.pop_back();
      break;
    }
  if (run.empty()) rescale_flows(r);
}

void Engine::reschedule(RankId r) {
  const double rate = rank_flows_[std::size_t(r)] == 0 ? 1.0 : 1.0 / (1.0 + topo_.stack.compute_slowdown);
  for (Running& x : running_[std::size_t(r)]) {
    if (x.rate == rate) continue;
    x.left_s = std::max(0.0, x.left_s - (now_ - x.since_s) * x.rate);
    x.since_s = now_;
    x.rate = rate;
    x.end_s = now_ + x.left_s / rate;
    q_.move(x.key, x.end_s);
  }
}

// While a GPU computes, its own links carry 1/(1 + comm_slowdown) of their rate: the copy
// engines and NCCL's thread blocks compete with the kernels for SMs and HBM.
void Engine::rescale_flows(RankId r) {
  const double scale = running_[std::size_t(r)].empty() ? 1.0 : 1.0 / (1.0 + topo_.stack.comm_slowdown);
  for (const int c : gpu_channels_[std::size_t(r)]) net_.set_channel_scale(c, scale, now_);
}

void Engine::flow_endpoints(int f, int delta) {
  const OpId s = flow_send_[std::size_t(f)];
  for (const RankId r : {plan_.op(s).rank, plan_.op(idx_->partner(s)).rank}) {
    std::int32_t& n = rank_flows_[std::size_t(r)];
    const bool was_idle = n == 0;
    n += delta;
    if (was_idle != (n == 0)) reschedule(r);
  }
}

Seconds Engine::op_seconds(const Op& o) {
  if (o.kind != OpKind::Compute) return model_.op_seconds(o, plan_.workload);
  const auto bits = std::bit_cast<std::uint64_t>(o.flops);
  const std::uint64_t h =
      (bits ^ (bits >> 29) ^ (std::uint64_t(o.phase) << 7) ^ (std::uint64_t(o.mask) << 11)) * 0x9E3779B97F4A7C15ull;
  BlockTime& b = block_times_[std::size_t(h >> 58)];  // the top 6 bits: one of 64 slots
  if (!b.known || b.flops_bits != bits || b.phase != o.phase || b.mask != o.mask)
    b = {bits, o.phase, o.mask, true, model_.op_seconds(o, plan_.workload)};
  return b.s;
}

const Engine::Path& Engine::path_between(int src, int dst) {
  const auto G = std::uint64_t(topo_.num_gpus());
  const std::uint64_t pair = std::uint64_t(src) * G + std::uint64_t(dst);
  Path& p = paths_[G <= kPathTableGpus ? pair : (pair * 0x9E3779B97F4A7C15ull) >> (64 - kPathCacheBits)];
  if (p.src == src && p.dst == dst) return p;
  const topo::Route route = topo_.route(src, dst);
  p.latency_s = (topo_.latency_us(route) + topo_.stack.message_us) * 1e-6;
  p.channels = route;
  if (sym_.active()) {
    topo::Route rep;
    for (const std::int32_t c : route) rep.push_back(representative_channel(topo_, sym_, c));
    p.channels = rep;
  }
  p.src = src;
  p.dst = dst;
  return p;
}

void Engine::start_flow(OpId send, OpId recv) {
  const Op& s = plan_.op(send);
  // The receiver is s.peer: the receive's own rank in a full plan, its image's in a quotient plan.
  if (!opt_.comm) {
    q_.push(now_, kFlowDone, send);
    return;
  }
  const Path& path = path_between(plan_.gpu_of(s.rank), plan_.gpu_of(s.peer));
  if (s.bytes == 0) {
    q_.push(now_ + path.latency_s, kFlowDone, send);  // nothing to move: the pair completes after the latency
    return;
  }
  const int f = net_.add_flow(path.channels, double(s.bytes), now_);
  if (std::size_t(f) >= flow_send_.size()) {
    flow_send_.resize(std::size_t(f) + 1);
    flow_latency_s_.resize(std::size_t(f) + 1);
    drain_key_.resize(std::size_t(f) + 1, EventQueue::kNoKey);
  }
  flow_send_[std::size_t(f)] = send;
  flow_latency_s_[std::size_t(f)] = path.latency_s;
  if (overlap_) flow_endpoints(f, +1);
}

void Engine::complete(OpId id) {
  const Op& o = plan_.op(id);
  res_.end_s[std::size_t(id)] = now_;
  touch(o.rank);
  ++done_;
  if (is_comm(o))
    --comm_out_[std::size_t(o.rank)];
  else if (o.stream == Stream::Compute)
    compute_busy_[std::size_t(o.rank)] = 0;
  if (overlap_ && o.kind == OpKind::Compute) stop_running(id);
  auto& rs = res_.ranks[std::size_t(o.rank)];
  rs.end_s = std::max(rs.end_s, now_);
  const std::size_t S = PlanIndex::lane(o);
  for (const OpId d : idx_->dependents(id)) {
    if (--deps_left_[std::size_t(d)] == 0) {
      const std::size_t ds = PlanIndex::lane(plan_.op(d));
      // Only an op of the head group that is not issued yet was counted as waiting.
      if (outstanding_[ds] == 0 && head_[ds] < group_end_[ds] && d >= group_first_[ds] && d <= group_last_[ds])
        --waiting_[ds];
      try_issue(static_cast<int>(ds));
    }
  }
  if (--outstanding_[S] == 0) {
    head_[S] = group_end_[S];
    advance_head(static_cast<int>(S));
    try_issue(static_cast<int>(S));
  }
}

Expected<SimResult> Engine::run() {
  if (topo_.num_gpus() < plan_.ranks)
    return Error{"--topology", fmt::format("the plan has {} ranks but topology '{}' has only {} GPUs", plan_.ranks,
                                           topo_.name, topo_.num_gpus())};
  if (auto st = check_placement(plan_, topo_); !st) return st.error();
  if (sym_.active())
    if (auto st = check_topology_symmetry(sym_, topo_, plan_.ranks); !st) return st.error();
  if (auto st = build(); !st) return st.error();
  for (std::size_t s = 0; s < idx_->lanes(); ++s) try_issue(static_cast<int>(s));
  // A flow's drain event moves with its rate: one per flow in the queue (none while it has no rate).
  auto on_change = [&](int f) {
    const double left = net_.time_left_s(f);
    std::uint32_t& key = drain_key_[std::size_t(f)];
    if (left == FairShareNetwork::kInf) {
      if (key != EventQueue::kNoKey) q_.erase(std::exchange(key, EventQueue::kNoKey));
    } else if (key == EventQueue::kNoKey) {
      key = q_.push_keyed(now_ + left, kFlowDrained, f);
    } else {
      q_.move(key, now_ + left);
    }
  };
  for (;;) {
    if (net_.dirty() && (q_.empty() || q_.top_time_s() > now_)) net_.resolve(now_, on_change);
    if (q_.empty()) break;
    const Event e = q_.pop();
    ++res_.events;
    now_ = e.time_s;
    switch (e.kind) {
    case kOpDone:
      complete(e.id);
      break;
    case kFlowDrained: {
      drain_key_[std::size_t(e.id)] = EventQueue::kNoKey;
      if (overlap_) flow_endpoints(e.id, -1);
      net_.remove_flow(e.id, now_);  // the slot may be reused at once: the done event names the send
      q_.push(now_ + flow_latency_s_[std::size_t(e.id)], kFlowDone, flow_send_[std::size_t(e.id)]);
      break;
    }
    case kFlowDone: {
      const OpId s = e.id, r = idx_->partner(e.id);
      complete(s);
      complete(r);
      break;
    }
    case kHostIssued:
      try_issue(e.id);
      break;
    default:
      break;
    }
    if (done_ >= next_progress_) report_progress();
  }
  if (opt_.progress) opt_.progress(done_, plan_.size());
  if (done_ != plan_.size()) return deadlock();
  finish();
  return std::move(res_);
}

Error Engine::deadlock() const {
  OpId stuck = kNone;
  for (std::size_t s = 0; s < idx_->lanes() && stuck == kNone; ++s)
    if (head_[s] < idx_->lane_end(s)) stuck = idx_->at(head_[s]);
  std::string what = "?";
  if (stuck != kNone) {
    const Op& so = plan_.op(stuck);
    what = fmt::format("rank {} stream {} {}", so.rank, to_string(so.stream), to_string(so.kind));
    if (is_comm(so)) what += fmt::format(" peer {} tag {}", so.peer, so.tag);
  }
  return Error{
      "simulate",
      fmt::format("the plan deadlocks: {} of {} ops completed; stuck at op {} ({})", done_, plan_.size(), stuck, what),
      ErrorKind::RunFailed};
}

void Engine::finish() {
  res_.makespan_s = now_;
  for (int r = 0; r < simulated_ranks(); ++r) {
    auto& rs = res_.ranks[std::size_t(r)];
    now_ = res_.makespan_s;
    touch(RankId(r));
    rs.idle_s = res_.makespan_s - rs.compute_busy_s;
  }
  res_.channels.resize(std::size_t(topo_.num_channels()));
  for (int c = 0; c < topo_.num_channels(); ++c) {
    const int k = representative_channel(topo_, sym_, c);
    res_.channels[std::size_t(c)] = {net_.channel_bytes(k), net_.channel_busy_s(k), net_.channel_max_flows(k)};
  }
  if (opt_.critical_path) critical_path();
  release_replay_state();  // before peak_memory's tables, so the two never add up
  if (opt_.peak_memory) peak_memory();
  // A quotient plan's other ranks live their representative's timeline.
  for (int r = simulated_ranks(); r < plan_.ranks; ++r)
    res_.ranks[std::size_t(r)] = res_.ranks[std::size_t(sym_.rep(r))];
  // The rank that finishes last: the lowest whose end is within a relative 1e-9 of the latest, so that float
  // noise between ranks that end together cannot move it (exposed_comm_ms is this rank's).
  Seconds latest = 0;
  for (const auto& rk : res_.ranks) latest = std::max(latest, rk.end_s);
  int last = 0;
  while (last + 1 < plan_.ranks && res_.ranks[std::size_t(last)].end_s < latest * (1 - 1e-9)) ++last;
  res_.last_rank = last;
}

void Engine::critical_path() {
  // Walk back from the op that ends last: at each op, the predecessor is the
  // input that arrived last — a dependency, the previous op of its stream, or,
  // for a send/recv whose partner was issued later, the partner.
  const std::size_t n = plan_.size();
  if (n == 0) return;
  OpId cur = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (res_.end_s[i] > res_.end_s[std::size_t(cur)]) cur = OpId(i);
  std::vector<OpId> path;
  constexpr double kTol = 1e-12;
  while (cur != kNone && path.size() < n) {
    path.push_back(cur);
    if (is_comm(plan_.op(cur))) {
      const OpId p = idx_->partner(cur);
      if (res_.start_s[std::size_t(p)] > res_.start_s[std::size_t(cur)] + kTol) {
        cur = p;
        path.push_back(cur);
      }
    }
    const double start = res_.start_s[std::size_t(cur)];
    OpId best = kNone;
    double best_end = -1;
    auto consider = [&](OpId c) {
      const double e = res_.end_s[std::size_t(c)];
      if (e <= start + kTol && e > best_end) {
        best_end = e;
        best = c;
      }
    };
    // The issue group of cur, then the op before the group on its stream. A lane's ops are in id order:
    // cur's place is found by bisection, its group by the ops that join the one before (a lean index).
    const std::size_t lane = PlanIndex::lane(plan_.op(cur));
    const std::uint32_t lb = idx_->lane_begin(lane), le = idx_->lane_end(lane);
    const auto order = idx_->stream_order();
    auto gb = std::uint32_t(std::lower_bound(order.begin() + lb, order.begin() + le, cur) - order.begin());
    while (gb > lb && PlanIndex::joins_group(plan_.op(idx_->at(gb - 1)), plan_.op(idx_->at(gb)))) --gb;
    for (std::uint32_t k = gb, ge = group_end_from(gb, le); k < ge; ++k)
      for (OpId d : plan_.deps(idx_->at(k))) consider(d);
    if (gb > lb) consider(idx_->at(gb - 1));
    if (start <= kTol && best_end <= kTol) break;
    cur = best;
  }
  std::reverse(path.begin(), path.end());
  res_.critical_flow_start_s.resize(path.size());
  for (std::size_t k = 0; k < path.size(); ++k) {
    const auto i = std::size_t(path[k]);
    res_.critical_flow_start_s[k] =
        is_comm(plan_.op(path[k])) ? transfer_start(res_, path[k], idx_->partner(path[k])) : res_.start_s[i];
  }
  res_.critical_path = std::move(path);
}

void Engine::release_replay_state() {
  // The index and the per-op replay state are done with once the critical path is
  // known: at cluster scale they are ~30 bytes an op, freed before peak_memory's tables.
  idx_ = nullptr;
  own_idx_.reset();
  std::vector<std::int32_t>().swap(deps_left_);
}

void Engine::peak_memory() {
  const auto& bufs = plan_.buffers();
  const std::size_t B = bufs.size();
  std::vector<double> first(B, -1), last(B, -1);
  // Plan::storage(b) for every buffer, in one pass: parents and reused buffers come
  // before the buffers that name them, so each answer extends an earlier one
  // (walking a reuse chain per access costs its length, which grows with the ranks).
  std::vector<BufferId> storage(B);
  {
    std::vector<BufferId> chain_end(B), root(B);  // end of b's reuse chain; b's root
    for (std::size_t k = 0; k < B; ++k) {
      const Buffer& b = bufs[k];
      chain_end[k] = b.reuse == kNone ? BufferId(k) : chain_end[std::size_t(b.reuse)];
      root[k] = b.parent == kNone ? BufferId(k) : root[std::size_t(b.parent)];
      storage[k] = chain_end[std::size_t(root[k])];
    }
  }
  for (std::size_t i = 0; i < plan_.size(); ++i) {
    for_each_access(plan_.op(OpId(i)), [&](BufferId b, int, bool) {
      if (b == kNone) return;  // hand-built plans (tests) may leave slots empty
      const auto k =
          std::size_t(storage[std::size_t(b)]);  // a view lives in its root's storage, a reuse in its chain's
      if (first[k] < 0 || res_.start_s[i] < first[k]) first[k] = res_.start_s[i];
      last[k] = std::max(last[k], res_.end_s[i]);
    });
  }
  for (const auto& rr : plan_.results())
    for (BufferId b : {rr.out, rr.dq, rr.dkv})
      if (b != kNone) last[std::size_t(b)] = res_.makespan_s;
  // Sweep per rank: allocations at first access (Input buffers at 0), frees after the last one.
  // The events of all ranks in one array, rank by rank (two passes: count, then place).
  const auto R = std::size_t(plan_.ranks);
  auto lives = [&](std::size_t k) {
    const Buffer& b = bufs[k];
    return b.parent == kNone && b.reuse == kNone && (first[k] >= 0 || b.init == BufInit::Input);
  };
  std::vector<std::size_t> at(R + 1, 0);
  for (std::size_t k = 0; k < B; ++k)
    if (lives(k)) at[std::size_t(bufs[k].rank) + 1] += 2;
  for (std::size_t r = 0; r < R; ++r) at[r + 1] += at[r];
  std::vector<std::pair<double, std::int64_t>> ev(at[R]);
  std::vector<std::size_t> fill(at.begin(), at.end() - 1);
  for (std::size_t k = 0; k < B; ++k) {
    if (!lives(k)) continue;
    const Buffer& b = bufs[k];
    const double from = b.init == BufInit::Input ? 0.0 : first[k];
    const double to = std::max(from, last[k] < 0 ? res_.makespan_s : last[k]);
    auto& f = fill[std::size_t(b.rank)];
    ev[f++] = {from, std::int64_t(b.bytes)};
    ev[f++] = {to, -std::int64_t(b.bytes)};
  }
  for (std::size_t r = 0; r < R; ++r) {
    const auto e = ev.begin() + std::ptrdiff_t(at[r]), end = ev.begin() + std::ptrdiff_t(at[r + 1]);
    // At equal times, allocate before freeing (a buffer read by the op that fills the next is still live).
    std::sort(e, end, [](const auto& a, const auto& b) {
      return a.first < b.first || (a.first == b.first && a.second > b.second);
    });
    std::int64_t cur = 0, peak = 0;
    for (auto it = e; it != end; ++it) {
      cur += it->second;
      peak = std::max(peak, cur);
    }
    res_.ranks[r].peak_mem_bytes = Bytes(peak);
  }
}

}  // namespace

Status check_topology_symmetry(const RankSymmetry& s, const topo::Topology& t, int ranks) {
  if (auto st = check_symmetry_shape(s, ranks); !st) return st;
  const topo::BlockLayout& b = t.blocks;
  const auto refuse = [&](const std::string& why) {
    return Error{"symmetry", fmt::format("topology '{}' cannot run a quotient plan ({} symmetry in blocks of {} "
                                         "rank{}): {}",
                                         t.name, to_string(s.kind), s.block, s.block == 1 ? "" : "s", why)};
  };
  if (!t.routes_by_block()) return refuse("its routes are a GPU-by-GPU table, not copies of one block's");
  if (!t.route_overrides.empty()) return refuse("it overrides routes");
  if (s.block % b.gpus != 0 || ranks % b.gpus != 0)
    return refuse(fmt::format("its blocks of {} GPUs do not tile the classes", b.gpus));
  if (s.kind == RankSymmetry::Kind::Xor && (b.gpus & (b.gpus - 1)) != 0)
    return refuse(fmt::format("xor maps blocks of {} GPUs to none", b.gpus));
  // Two blocks of one class would share a representative channel that a route between them crossed twice.
  if (!t.block_routes_cross_each_channel_once())
    return refuse("a route between two of its blocks crosses one link of both blocks' copies");
  return {};
}

Status check_placement(const Plan& plan, const topo::Topology& t) {
  if (plan.gpus.empty()) return {};
  if (plan.gpus.size() != std::size_t(plan.ranks))
    return Error{"plan", fmt::format("places {} ranks on GPUs, but it has {}", plan.gpus.size(), plan.ranks)};
  std::vector<RankId> rank_at(std::size_t(t.num_gpus()), kNone);
  for (RankId r = 0; r < plan.ranks; ++r) {
    const int g = plan.gpus[std::size_t(r)];
    if (g < 0 || g >= t.num_gpus())
      return Error{"--topology", fmt::format("the plan places rank {} on GPU {}, but topology '{}' has {} GPUs", r, g,
                                             t.name, t.num_gpus())};
    if (rank_at[std::size_t(g)] != kNone)
      return Error{"plan", fmt::format("ranks {} and {} are both placed on GPU {}", rank_at[std::size_t(g)], r, g)};
    rank_at[std::size_t(g)] = r;
  }
  // A quotient's classes must be the same GPUs' classes: its rotation moves every rank's GPU alike.
  const RankSymmetry& s = plan.symmetry;
  // Generators: element 1 of a rotation; elements 1, 2, 4, ... of an xor group.
  for (int g = 1; s.active() && g < s.elements(plan.ranks); g = s.kind == RankSymmetry::Kind::Xor ? 2 * g : plan.ranks)
    for (RankId r = 0; r < plan.ranks; ++r)
      if (plan.gpu_of(s.apply(g, r, plan.ranks)) != s.apply(g, plan.gpu_of(r), plan.ranks))
        return Error{"plan", fmt::format("its placement does not have its symmetry ({} of {} ranks): rank {} on GPU {}",
                                         to_string(s.kind), s.block, r, plan.gpu_of(r))};
  return {};
}

Expected<RankSymmetry> topology_quotient(const RankSymmetry& plan_sym, const topo::Topology& t, int ranks) {
  CHARM_ASSERT(plan_sym.active(), "a quotient coarsens a plan's symmetry");
  RankSymmetry s = plan_sym;
  if (t.blocks.gpus >= 1) s.block = std::lcm(plan_sym.block, t.blocks.gpus);  // else check refuses: no blocks
  if (auto st = check_topology_symmetry(s, t, ranks); !st) return st.error();
  return s;
}

RankSymmetry quotient_symmetry(const RankSymmetry& plan_sym, const topo::Topology& t, int ranks) {
  if (!plan_sym.active()) return {};
  auto s = topology_quotient(plan_sym, t, ranks);
  return s ? *s : RankSymmetry{};
}

int representative_channel(const topo::Topology& t, const RankSymmetry& s, int ch) {
  if (!s.active()) return ch;
  const int per_block = 2 * t.blocks.links, blocks_per_class = s.block / t.blocks.gpus;
  const int block = ch / per_block;
  return (block % blocks_per_class) * per_block + ch % per_block;
}

Expected<SimResult> simulate(const Plan& plan, const topo::Topology& topology, const ComputeModel& model,
                             SimOptions options) {
  Engine e(plan, topology, model, options);
  return e.run();
}

}  // namespace charm::sim
