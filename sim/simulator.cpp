#include "sim/simulator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <optional>
#include <string>
#include <utility>

#include "scheduler/ir/plan_index.hpp"

#include "sim/engine.hpp"
#include "sim/event_queue.hpp"
#include "sim/fair_share_network.hpp"

namespace charm::sim {

using namespace charm::ir;

namespace {

enum EventKind : std::uint32_t { kOpDone, kFlowDrained, kFlowDone, kHostIssued };

}  // namespace

std::vector<Seconds> host_issue_times(const Plan& plan, Seconds host_s) {
  std::vector<Seconds> at;
  if (host_s <= 0) return at;
  std::vector<Seconds> clock(std::size_t(plan.ranks), 0.0);
  at.resize(plan.size());
  for (std::size_t i = 0; i < plan.size(); ++i) at[i] = clock[std::size_t(plan.op(OpId(i)).rank)] += host_s;
  return at;
}

namespace detail {

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
  if (o.mask == MaskPiece::Positions) {  // the varlen kernel's time depends on whose shards meet
    const int n = plan_.group_ranks();
    if (!document_shards_) document_shards_.emplace(plan_.workload, n);
    const BlockKey key{document_shards_->shape(o.q_owner % n, o.kv_owner % n), o.phase,
                       std::bit_cast<std::uint64_t>(o.flops)};
    const auto [it, added] = position_times_.try_emplace(key, 0.0);
    if (added) it->second = model_.op_seconds(o, plan_.workload, &*document_shards_);
    return it->second;
  }
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
    return Error{Field::Topology, fmt::format("the plan has {} ranks but topology '{}' has only {} GPUs", plan_.ranks,
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

void Engine::release_replay_state() {
  // The index and the per-op replay state are done with once the critical path is
  // known: at cluster scale they are ~30 bytes an op, freed before peak_memory's tables.
  idx_ = nullptr;
  own_idx_.reset();
  std::vector<std::int32_t>().swap(deps_left_);
}

}  // namespace detail

using detail::Engine;

Expected<SimResult> simulate(const Plan& plan, const topo::Topology& topology, const ComputeModel& model,
                             SimOptions options) {
  Engine e(plan, topology, model, options);
  return e.run();
}

}  // namespace charm::sim
