#include "runtime/cuda/plan_runner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "runtime/cuda/cuda_check.hpp"
#include "runtime/stall.hpp"

namespace charm::rt::cuda {

using ir::is_comm;
using ir::OpId;
using ir::OpKind;
using Clock = std::chrono::steady_clock;

Expected<std::unique_ptr<PlanRunner>> PlanRunner::create(const ir::Plan& plan, std::vector<ir::RankId> local_ranks,
                                                         const CudaRunOptions& opt, Hooks hooks) {
  std::unique_ptr<PlanRunner> p(new PlanRunner(plan, std::move(hooks)));
  p->opt_ = opt;
  CHARM_TRY(p->set_local_ranks(local_ranks));
  auto dev = DeviceBuffers::of(plan, p->local_);
  if (!dev) return dev.error();
  p->dev_ = std::move(*dev);
  const std::size_t nops = plan.size();
  p->start_ev_.resize(nops);
  p->end_ev_.resize(nops);
  p->copy_ev_.resize(nops);
  p->enqueued_.assign(nops, 0);
  p->opened_.assign(nops, 0);
  p->copied_.assign(nops, 0);
  p->start_ms_.assign(nops, std::nan(""));
  p->end_ms_.assign(nops, std::nan(""));
  p->rank_bytes_.assign(std::size_t(plan.ranks), 0);
  p->build_lanes();
  CHARM_TRY(p->plan_computes());
  CHARM_TRY(p->create_streams(opt));
  CHARM_TRY(p->allocate_buffers());
  return p;
}

Status PlanRunner::set_local_ranks(const std::vector<ir::RankId>& local_ranks) {
  local_.assign(std::size_t(plan_.ranks), 0);
  for (auto r : local_ranks) {
    if (r < 0 || r >= plan_.ranks) return Error{"cuda", fmt::format("rank {} is not in the plan", r)};
    local_[std::size_t(r)] = 1;
  }
  return {};
}

void PlanRunner::build_lanes() {
  // One lane per (local rank, stream) with ops, in the order of their first ops.
  for (ir::RankId r = 0; r < plan_.ranks; ++r) {
    if (!local_[std::size_t(r)]) continue;
    for (int s = 0; s < ir::kNumStreams; ++s) {
      const auto ops = idx_.ops_of(r, ir::Stream(s));
      if (ops.empty()) continue;
      lanes_.emplace_back();
      lanes_.back().rank = r;
      lanes_.back().stream = ir::Stream(s);
      lanes_.back().ops = ops;
    }
  }
  std::sort(lanes_.begin(), lanes_.end(), [](const Lane& a, const Lane& b) { return a.ops.front() < b.ops.front(); });
}

Status PlanRunner::create_streams(const CudaRunOptions& opt) {
  int least = 0, greatest = 0;
  CHARM_CUDA_TRY(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  for (auto& l : lanes_) {
    // Transfers get the higher priority so that they overlap with attention instead of queueing behind it.
    const int prio = l.stream == ir::Stream::Compute ? least : greatest;
    CHARM_CUDA_TRY(cudaStreamCreateWithPriority(l.cs.out(), cudaStreamNonBlocking, prio));
    CHARM_TRY(create_kernels(l, opt));
    for (OpId id : l.ops) {
      CHARM_CUDA_TRY(cudaEventCreate(start_ev_[std::size_t(id)].out()));
      CHARM_CUDA_TRY(cudaEventCreate(end_ev_[std::size_t(id)].out()));
      if (plan_.op(id).kind == OpKind::Recv && !hooks_.issue_group)
        CHARM_CUDA_TRY(cudaEventCreateWithFlags(copy_ev_[std::size_t(id)].out(), cudaEventDisableTiming));
    }
  }
  CHARM_CUDA_TRY(cudaEventCreate(t0_.out()));
  return {};
}

Status PlanRunner::create_kernels(Lane& l, const CudaRunOptions& opt) {
  // One set of block kernels per block shape among the lane's computes (a plain plan has one;
  // region plans may have a few: heads of a range, tokens of some parts).
  std::vector<BlockDims> shapes;
  auto same = [](const BlockDims& a, const BlockDims& b) {
    return a.heads == b.heads && a.kv_heads == b.kv_heads && a.tq == b.tq && a.tk == b.tk;
  };
  for (OpId id : l.ops) {
    if (plan_.op(id).kind != OpKind::Compute) continue;
    const BlockDims& d = blocks_[std::size_t(id)].dims;
    std::size_t k = 0;
    while (k < shapes.size() && !same(shapes[k], d)) ++k;
    if (k == shapes.size()) {
      auto a = BlockAttention::create(plan_.workload.dtype, d, l.cs, opt.tile_budget_bytes);
      if (!a) return a.error();
      shapes.push_back(d);
      l.attn.push_back(std::move(*a));
    }
    attn_[std::size_t(id)] = l.attn[k].get();
  }
  return {};
}

Status PlanRunner::allocate_buffers() {
  // The roots of the local ranks (a view lives in its root), all allocated up front (allocation
  // is not timed); an Out root that travels in a half dtype also gets its wire area.
  buffers_.resize(plan_.buffers().size());
  wire_.resize(plan_.buffers().size());
  host_inputs_.resize(plan_.buffers().size());
  for (std::size_t b = 0; b < plan_.buffers().size(); ++b) {
    const auto& buf = plan_.buffers()[b];
    const DeviceBuffer& d = dev_.buf[b];
    if (d.root != ir::BufferId(b)) continue;
    CHARM_CUDA_TRY(cudaMalloc(buffers_[b].out(), d.bytes()));
    rank_bytes_[std::size_t(buf.rank)] += d.bytes();
    if (dev_.wire_root[b]) {
      CHARM_CUDA_TRY(cudaMalloc(wire_[b].out(), d.wire_bytes()));
      rank_bytes_[std::size_t(buf.rank)] += d.wire_bytes();
    }
    if (buf.init == ir::BufInit::Input) staging_elems_ = std::max(staging_elems_, std::size_t(d.layout.host_elems()));
  }
  if (staging_elems_ > 0) CHARM_CUDA_TRY(cudaMalloc(staging_.out(), staging_elems_ * sizeof(float)));
  return {};
}

Status PlanRunner::plan_computes() {
  // The blocks of every local Compute op and their visible key counts, uploaded once.
  MaskTable masks(plan_.workload, plan_.ranks, plan_.parts);
  blocks_.resize(plan_.size());
  attn_.assign(plan_.size(), nullptr);
  for (const auto& l : lanes_)
    for (OpId id : l.ops) {
      if (plan_.op(id).kind != OpKind::Compute) continue;
      auto c = compute_blocks(plan_, id, dev_, masks);
      if (!c) return c.error();
      blocks_[std::size_t(id)] = std::move(*c);
    }
  const auto& counts = masks.counts();
  if (counts.empty()) return {};
  CHARM_CUDA_TRY(cudaMalloc(vis_.out(), counts.size() * sizeof(int)));
  CHARM_CUDA_TRY(cudaMemcpy(vis_, counts.data(), counts.size() * sizeof(int), cudaMemcpyHostToDevice));
  return {};
}

PlanRunner::~PlanRunner() {
  if (poisoned_) {
    // Freeing would wait for work that never ends; the process is going down: give every
    // handle up instead of letting its owner free it.
    for (auto& l : lanes_) {
      for (auto& a : l.attn) (void)a.release();
      (void)l.cs.release();
    }
    for (auto* v : {&start_ev_, &end_ev_, &copy_ev_})
      for (auto& e : *v) (void)e.release();
    (void)t0_.release();
    for (auto* v : {&buffers_, &wire_})
      for (auto& b : *v) (void)b.release();
    (void)staging_.release();
    (void)vis_.release();
    return;
  }
  // Errors cannot leave a destructor; run() and init_buffers() synchronised and checked already.
  // The members free themselves: events, device memory, then each lane's kernels and stream.
  (void)cudaDeviceSynchronize();
}

std::size_t PlanRunner::group_end(const Lane& l) const { return l.next + idx_.group(l.ops[l.next]).size(); }

bool PlanRunner::deps_enqueued(OpId id) const {
  for (OpId d : plan_.deps(id))
    if (!enqueued_[std::size_t(d)]) return false;
  return true;
}

Status PlanRunner::wait_deps(const Lane& l, OpId id) {
  for (OpId d : plan_.deps(id))
    if (plan_.op(d).stream != l.stream) CHARM_CUDA_TRY(cudaStreamWaitEvent(l.cs, end_ev_[std::size_t(d)], 0));
  return {};
}

Expected<bool> PlanRunner::step(Lane& l) {
  const ErrorRankScope named(l.rank);  // an error of this lane's op names its rank
  const OpId id = l.ops[l.next];
  const auto& op = plan_.op(id);
  if (!is_comm(op)) {
    if (!deps_enqueued(id)) return false;
    CHARM_TRY(wait_deps(l, id));
    CHARM_CUDA_TRY(cudaEventRecord(start_ev_[std::size_t(id)], l.cs));
    CHARM_TRY(run_local(l, id));
    CHARM_CUDA_TRY(cudaEventRecord(end_ev_[std::size_t(id)], l.cs));
    enqueued_[std::size_t(id)] = 1;
    ++l.next;
    return true;
  }
  const std::size_t end = group_end(l);
  if (hooks_.issue_group) {
    for (std::size_t i = l.next; i < end; ++i)
      if (!deps_enqueued(l.ops[i])) return false;
    for (std::size_t i = l.next; i < end; ++i) {
      CHARM_TRY(wait_deps(l, l.ops[i]));
      CHARM_CUDA_TRY(cudaEventRecord(start_ev_[std::size_t(l.ops[i])], l.cs));
    }
    const std::span<const OpId> group(l.ops.data() + l.next, end - l.next);
    CHARM_TRY(stage_group(group, true, l.cs));
    CHARM_TRY(hooks_.issue_group(group, l.cs));
    CHARM_TRY(stage_group(group, false, l.cs));
    for (std::size_t i = l.next; i < end; ++i) {
      CHARM_CUDA_TRY(cudaEventRecord(end_ev_[std::size_t(l.ops[i])], l.cs));
      enqueued_[std::size_t(l.ops[i])] = 1;
    }
    l.next = end;
    return true;
  }
  return step_local_group(l, end);
}

std::string PlanRunner::stuck_message(bool enqueue) const {
  // The op that explains the stall best (stall_root_cause), of each stuck lane's next op.
  std::vector<const Lane*> stuck_lanes;
  std::vector<WaitingOp> waiting;
  for (const auto& l : lanes_) {
    const std::size_t at = enqueue ? l.next : l.done;
    if (at >= l.ops.size()) continue;
    const OpId id = l.ops[at];
    const bool comm = is_comm(plan_.op(id));
    stuck_lanes.push_back(&l);
    waiting.push_back({comm, comm && !hooks_.issue_group && idx_.partner(id) == ir::kNone});
  }
  const std::size_t at = stall_root_cause(waiting);
  if (at == waiting.size()) return "stall: no op is waiting";
  const Lane* pick = stuck_lanes[at];
  const bool orphan = waiting[at].orphan;
  const OpId id = pick->ops[enqueue ? pick->next : pick->done];
  std::string why;
  if (orphan)
    why = "the plan has no matching peer op";
  else if (is_comm(plan_.op(id)))
    why = "its peer has not matched it";
  else {
    for (OpId d : plan_.deps(id)) {
      const bool pending =
          enqueue ? !enqueued_[std::size_t(d)] : cudaEventQuery(end_ev_[std::size_t(d)]) == cudaErrorNotReady;
      if (pending) {
        why = fmt::format("it waits for op {} '{}'", d, ir::op_label(plan_, d));
        break;
      }
    }
    if (why.empty()) why = "its kernel has not finished";
  }
  const std::size_t stuck = stuck_lanes.size();
  return fmt::format("stall: {}: rank {} stream {} waits on op {} '{}' ({}); {} stream(s) blocked",
                     enqueue ? "the plan cannot be issued" : fmt::format("no progress for {:.1f} s", opt_.timeout_s),
                     pick->rank, ir::to_string(pick->stream), id, ir::op_label(plan_, id), why, stuck);
}

Status PlanRunner::run() {
  std::fill(enqueued_.begin(), enqueued_.end(), 0);
  std::fill(opened_.begin(), opened_.end(), 0);
  std::fill(copied_.begin(), copied_.end(), 0);
  for (auto& l : lanes_) l.next = l.done = 0, l.open = false;
  if (lanes_.empty()) return {};
  const auto h0 = Clock::now();
  // Every stream starts after t0, so that all times share one origin.
  CHARM_CUDA_TRY(cudaEventRecord(t0_, lanes_.front().cs));
  for (auto& l : lanes_) CHARM_CUDA_TRY(cudaStreamWaitEvent(l.cs, t0_, 0));
  for (bool moved = true; moved;) {
    moved = false;
    for (auto& l : lanes_)
      while (l.next < l.ops.size()) {
        auto m = step(l);
        if (!m) return m.error();
        if (!*m) break;
        moved = true;
      }
  }
  enqueue_ms_ = std::chrono::duration<double, std::milli>(Clock::now() - h0).count();
  for (const auto& l : lanes_)
    if (l.next < l.ops.size()) {
      // What was enqueued still completes (no stream waits on an unrecorded event); the rest never will.
      (void)cudaDeviceSynchronize();
      return Error{"", stuck_message(true)};
    }
  CHARM_TRY(wait_all());
  makespan_ms_ = 0;
  for (const auto& l : lanes_)
    for (OpId id : l.ops) {
      float a = 0, b = 0;
      CHARM_CUDA_TRY(cudaEventElapsedTime(&a, t0_, start_ev_[std::size_t(id)]));
      CHARM_CUDA_TRY(cudaEventElapsedTime(&b, t0_, end_ev_[std::size_t(id)]));
      start_ms_[std::size_t(id)] = a;
      end_ms_[std::size_t(id)] = b;
      makespan_ms_ = std::max(makespan_ms_, double(b));
    }
  return {};
}

Status PlanRunner::wait_all() {
  auto last_change = Clock::now();
  std::size_t last = ~std::size_t(0);
  for (;;) {
    std::size_t done = 0;
    bool all = true;
    for (auto& l : lanes_) {
      const ErrorRankScope named(l.rank);
      while (l.done < l.ops.size()) {
        const cudaError_t q = cudaEventQuery(end_ev_[std::size_t(l.ops[l.done])]);
        if (q == cudaErrorNotReady) break;
        if (q != cudaSuccess) {
          poisoned_ = true;
          if (hooks_.abort) hooks_.abort();
          return cuda_error(q, "cudaEventQuery(op end)", __FILE__, __LINE__);
        }
        ++l.done;
      }
      done += l.done;
      all = all && l.done == l.ops.size();
    }
    if (all) break;
    if (hooks_.poll) {
      if (auto s = hooks_.poll(); !s) {
        poisoned_ = true;
        if (hooks_.abort) hooks_.abort();
        return s;
      }
    }
    const auto now = Clock::now();
    if (done != last) {
      last = done;
      last_change = now;
    } else if (opt_.timeout_s > 0 && std::chrono::duration<double>(now - last_change).count() > opt_.timeout_s) {
      poisoned_ = true;
      if (hooks_.abort) hooks_.abort();
      return Error{"", stuck_message(false)};
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  for (auto& l : lanes_) CHARM_CUDA_TRY(cudaStreamSynchronize(l.cs));
  return {};
}

}  // namespace charm::rt::cuda
