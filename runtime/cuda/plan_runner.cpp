#include "runtime/cuda/plan_runner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <thread>

#include "runtime/cuda/cuda_check.hpp"
#include "runtime/cuda/kernels.hpp"

namespace charm::rt::cuda {

using ir::BufKind;
using ir::is_comm;
using ir::OpId;
using ir::OpKind;
using Clock = std::chrono::steady_clock;

namespace {

std::string op_where(const ir::Plan& plan, OpId id) {
  return fmt::format("rank {} op {} ({})", plan.op(id).rank, id, ir::op_label(plan, id));
}

}  // namespace

Expected<std::unique_ptr<PlanRunner>> PlanRunner::create(const ir::Plan& plan, std::vector<ir::RankId> local_ranks,
                                                         const CudaRunOptions& opt, Hooks hooks) {
  std::unique_ptr<PlanRunner> p(new PlanRunner(plan, std::move(hooks)));
  p->opt_ = opt;
  p->shape_ = ShardShape::of(plan.workload, plan.ranks);
  for (int k = 0; k < ir::kNumBufKinds; ++k)
    p->layouts_[k] = DeviceLayout::of(BufKind(k), p->shape_, plan.workload.dtype);
  CHARM_TRY(p->set_local_ranks(local_ranks));
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
  CHARM_TRY(p->create_streams(opt));
  CHARM_TRY(p->allocate_buffers());
  CHARM_TRY(p->upload_masks());
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
  const auto& w = plan_.workload;
  int least = 0, greatest = 0;
  CHARM_CUDA_TRY(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  const BlockDims dims{w.batch,
                       w.heads,
                       w.kv_heads,
                       w.head_dim,
                       shape_.tokens,
                       shape_.tokens,
                       float(1.0 / std::sqrt(double(w.head_dim)))};
  for (auto& l : lanes_) {
    // Transfers get the higher priority so that they overlap with attention instead of queueing behind it.
    const int prio = l.stream == ir::Stream::Compute ? least : greatest;
    CHARM_CUDA_TRY(cudaStreamCreateWithPriority(l.cs.out(), cudaStreamNonBlocking, prio));
    bool has_compute = false;
    for (OpId id : l.ops) has_compute = has_compute || plan_.op(id).kind == OpKind::Compute;
    if (has_compute) {
      auto a = BlockAttention::create(w.dtype, dims, l.cs, opt.tile_budget_bytes);
      if (!a) return a.error();
      l.attn = std::move(*a);
    }
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

Status PlanRunner::allocate_buffers() {
  // Buffers of the local ranks, all allocated up front (allocation is not timed).
  buffers_.resize(plan_.buffers().size());
  host_inputs_.resize(plan_.buffers().size());
  for (std::size_t b = 0; b < plan_.buffers().size(); ++b) {
    const auto& buf = plan_.buffers()[b];
    if (!local_[std::size_t(buf.rank)]) continue;
    const auto& lay = layouts_[int(buf.kind)];
    CHARM_CUDA_TRY(cudaMalloc(buffers_[b].out(), lay.bytes));
    rank_bytes_[std::size_t(buf.rank)] += lay.bytes;
    staging_elems_ = std::max(staging_elems_, std::size_t(lay.host_elems()));
  }
  if (staging_elems_ > 0) CHARM_CUDA_TRY(cudaMalloc(staging_.out(), staging_elems_ * sizeof(float)));
  return {};
}

Status PlanRunner::upload_masks() {
  // Visible key counts per (q owner, kv owner) of the local Compute ops.
  const auto& w = plan_.workload;
  const std::int64_t T = shape_.tokens;
  const std::size_t n = std::size_t(plan_.ranks);
  CHARM_CUDA_TRY(cudaMalloc(vis_.out(), n * n * std::size_t(T) * sizeof(int)));
  vis_ready_.assign(n * n, 0);
  std::vector<std::vector<std::int64_t>> pos;
  for (int r = 0; r < plan_.ranks; ++r) pos.push_back(token_positions(w, r, plan_.ranks));
  std::vector<int> counts(static_cast<std::size_t>(T));
  for (const auto& l : lanes_)
    for (OpId id : l.ops) {
      const auto& op = plan_.op(id);
      if (op.kind != OpKind::Compute || op.q_owner < 0 || op.kv_owner < 0 || op.q_owner >= plan_.ranks ||
          op.kv_owner >= plan_.ranks)
        continue;
      const std::size_t pair = std::size_t(op.q_owner) * n + std::size_t(op.kv_owner);
      if (vis_ready_[pair]) continue;
      const auto& qp = pos[std::size_t(op.q_owner)];
      const auto& kp = pos[std::size_t(op.kv_owner)];
      for (std::size_t i = 0; i < std::size_t(T); ++i)
        counts[i] = w.causal ? int(std::upper_bound(kp.begin(), kp.end(), qp[i]) - kp.begin()) : int(T);
      CHARM_CUDA_TRY(cudaMemcpy(vis_ + pair * std::size_t(T), counts.data(), sizeof(int) * std::size_t(T),
                                cudaMemcpyHostToDevice));
      vis_ready_[pair] = 1;
    }
  return {};
}

PlanRunner::~PlanRunner() {
  if (poisoned_) {
    // Freeing would wait for work that never ends; the process is going down: give every
    // handle up instead of letting its owner free it.
    for (auto& l : lanes_) {
      (void)l.attn.release();
      (void)l.cs.release();
    }
    for (auto* v : {&start_ev_, &end_ev_, &copy_ev_})
      for (auto& e : *v) (void)e.release();
    (void)t0_.release();
    for (auto& b : buffers_) (void)b.release();
    (void)staging_.release();
    (void)vis_.release();
    return;
  }
  // Errors cannot leave a destructor; run() and init_buffers() synchronised and checked already.
  // The members free themselves: events, device memory, then each lane's kernels and stream.
  (void)cudaDeviceSynchronize();
}

char* PlanRunner::section(ir::BufferId b, int i) const {
  const auto& buf = plan_.buffer(b);
  return static_cast<char*>(buffers_[std::size_t(b)]) + layouts_[int(buf.kind)].sections[std::size_t(i)].offset;
}

Status PlanRunner::init_buffers(const GlobalTensors& in) {
  const auto fill = input_filler(plan_, in);
  const auto dtype = plan_.workload.dtype;
  for (std::size_t b = 0; b < buffers_.size(); ++b) {
    if (buffers_[b] == nullptr) continue;
    const auto& buf = plan_.buffers()[b];
    const auto& lay = layouts_[int(buf.kind)];
    if (buf.init == ir::BufInit::Input) {
      auto& host = host_inputs_[b];
      if (host.empty()) {
        host.resize(std::size_t(lay.host_elems()));
        CHARM_TRY(fill(buf, host));
      }
      CHARM_CUDA_TRY(cudaMemcpy(staging_, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
      std::int64_t at = 0;
      for (std::size_t s = 0; s < lay.sections.size(); ++s) {
        const auto& sec = lay.sections[s];
        char* dst = section(ir::BufferId(b), int(s));
        if (sec.f32)
          CHARM_CUDA_TRY(
              cudaMemcpy(dst, staging_ + at, std::size_t(sec.elems) * sizeof(float), cudaMemcpyDeviceToDevice));
        else
          CHARM_TRY(convert_from_f32(dtype, staging_ + at, dst, sec.elems, nullptr));
        at += sec.elems;
      }
      // The staging area is reused by the next buffer: finish this one first.
      CHARM_CUDA_TRY(cudaDeviceSynchronize());
    } else if (buf.init == ir::BufInit::Zero) {
      // Empty accumulators: zero, except an output's LSE, which is -inf.
      CHARM_CUDA_TRY(cudaMemset(buffers_[b], 0, lay.bytes));
      if (buf.kind == BufKind::Out)
        CHARM_TRY(fill_f32(reinterpret_cast<float*>(section(ir::BufferId(b), 1)), lay.sections[1].elems,
                           -std::numeric_limits<float>::infinity(), nullptr));
    }
  }
  CHARM_CUDA_TRY(cudaDeviceSynchronize());
  return {};
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
    CHARM_TRY(hooks_.issue_group(std::span<const OpId>(l.ops.data() + l.next, end - l.next), l.cs));
    for (std::size_t i = l.next; i < end; ++i) {
      CHARM_CUDA_TRY(cudaEventRecord(end_ev_[std::size_t(l.ops[i])], l.cs));
      enqueued_[std::size_t(l.ops[i])] = 1;
    }
    l.next = end;
    return true;
  }
  return step_local_group(l, end);
}

Expected<bool> PlanRunner::step_local_group(Lane& l, std::size_t end) {
  bool moved = false;
  if (!l.open) {
    for (std::size_t i = l.next; i < end; ++i)
      if (!deps_enqueued(l.ops[i])) return false;
    for (std::size_t i = l.next; i < end; ++i) {
      const OpId id = l.ops[i];
      CHARM_TRY(wait_deps(l, id));
      CHARM_CUDA_TRY(cudaEventRecord(start_ev_[std::size_t(id)], l.cs));
      opened_[std::size_t(id)] = 1;
    }
    l.open = moved = true;
  }
  bool complete = true;
  for (std::size_t i = l.next; i < end; ++i) {
    const OpId id = l.ops[i];
    const OpId peer = idx_.partner(id);
    const auto& op = plan_.op(id);
    if (op.kind == OpKind::Send) {
      complete = complete && peer != ir::kNone && copied_[std::size_t(peer)];
      continue;
    }
    if (copied_[std::size_t(id)]) continue;
    if (peer == ir::kNone || !opened_[std::size_t(peer)]) {
      complete = false;
      continue;
    }
    // The sender has reached its send: copy its source into our destination.
    auto sa = ir::decode(plan_, peer);
    if (!sa) return Error{op_where(plan_, peer), sa.error().what};
    auto ra = ir::decode(plan_, id);
    if (!ra) return Error{op_where(plan_, id), ra.error().what};
    const ir::BufferId sb = std::get<ir::SendArgs>(*sa).src, rb = std::get<ir::RecvArgs>(*ra).dst;
    CHARM_TRY(local_buffers(id, {sb, rb}));
    const auto& src = plan_.buffer(sb);
    const auto& dst = plan_.buffer(rb);
    if (src.kind != dst.kind)
      return Error{op_where(plan_, id), fmt::format("receives a {} buffer into a {} buffer", ir::to_string(src.kind),
                                                    ir::to_string(dst.kind))};
    CHARM_CUDA_TRY(cudaStreamWaitEvent(l.cs, start_ev_[std::size_t(peer)], 0));
    CHARM_CUDA_TRY(cudaMemcpyAsync(buffers_[std::size_t(rb)], buffers_[std::size_t(sb)], layouts_[int(dst.kind)].bytes,
                                   cudaMemcpyDeviceToDevice, l.cs));
    CHARM_CUDA_TRY(cudaEventRecord(copy_ev_[std::size_t(id)], l.cs));
    copied_[std::size_t(id)] = 1;
    moved = true;
  }
  if (!complete) return moved;
  for (std::size_t i = l.next; i < end; ++i) {
    const OpId id = l.ops[i];
    if (plan_.op(id).kind == OpKind::Send)
      CHARM_CUDA_TRY(cudaStreamWaitEvent(l.cs, copy_ev_[std::size_t(idx_.partner(id))], 0));
  }
  for (std::size_t i = l.next; i < end; ++i) {
    CHARM_CUDA_TRY(cudaEventRecord(end_ev_[std::size_t(l.ops[i])], l.cs));
    enqueued_[std::size_t(l.ops[i])] = 1;
  }
  l.open = false;
  l.next = end;
  return true;
}

Status PlanRunner::run_local(Lane& l, OpId id) {
  auto a = ir::decode(plan_, id);
  if (!a) return Error{op_where(plan_, id), a.error().what};
  return std::visit(ir::Overloaded{
                        [&](const ir::ComputeFwdArgs& c) { return compute_fwd(l, id, c); },
                        [&](const ir::ComputeBwdArgs& c) { return compute_bwd(l, id, c); },
                        [&](const ir::MergeArgs& m) { return merge(l, id, m); },
                        [&](const ir::AccumulateArgs& m) { return accumulate(l, id, m); },
                        [&](const ir::PackArgs& k) { return pack(l, id, k); },
                        [&](const ir::CopyArgs& c) { return copy(l, id, c); },
                        [&](const ir::SendArgs&) {
                          return Status(Error{op_where(plan_, id), "not a local op"});
                        },
                        [&](const ir::RecvArgs&) {
                          return Status(Error{op_where(plan_, id), "not a local op"});
                        },
                    },
                    *a);
}

Status PlanRunner::local_buffers(OpId id, std::initializer_list<ir::BufferId> bufs) const {
  for (ir::BufferId b : bufs)
    if (buffers_[std::size_t(b)] == nullptr)
      return Error{op_where(plan_, id), fmt::format("buffer {} is not on this rank", b)};
  return {};
}

Expected<const int*> PlanRunner::compute_mask(Lane& l, OpId id, ir::BufferId q, ir::BufferId kv) const {
  const ir::Op& op = plan_.op(id);
  if (l.attn == nullptr) return Error{op_where(plan_, id), "internal: no attention kernels on this stream"};
  const ir::RankId qo = plan_.buffer(q).owner, ko = plan_.buffer(kv).owner;
  if (qo != op.q_owner || ko != op.kv_owner)
    return Error{op_where(plan_, id),
                 fmt::format("op names Q{}*KV{} but its buffers hold Q{}, KV{}", op.q_owner, op.kv_owner, qo, ko)};
  const std::size_t pair = std::size_t(qo) * std::size_t(plan_.ranks) + std::size_t(ko);
  if (!vis_ready_[pair]) return Error{op_where(plan_, id), "internal: no mask for this block"};
  return static_cast<const int*>(vis_ + pair * std::size_t(shape_.tokens));
}

Status PlanRunner::compute_fwd(Lane& l, OpId id, const ir::ComputeFwdArgs& a) {
  CHARM_TRY(local_buffers(id, {a.q, a.kv, a.out}));
  auto vis = compute_mask(l, id, a.q, a.kv);
  if (!vis) return vis.error();
  if (plan_.buffer(a.out).owner != plan_.buffer(a.q).owner)
    return Error{op_where(plan_, id), fmt::format("accumulates into the output of rank {}", plan_.buffer(a.out).owner)};
  return l.attn->fwd(dat(a.q, 0), dat(a.kv, 0), dat(a.kv, 1), *vis, f32(a.out, 0), f32(a.out, 1));
}

Status PlanRunner::compute_bwd(Lane& l, OpId id, const ir::ComputeBwdArgs& a) {
  CHARM_TRY(local_buffers(id, {a.qbundle, a.kv, a.dq, a.dkv}));
  auto vis = compute_mask(l, id, a.qbundle, a.kv);
  if (!vis) return vis.error();
  const ir::RankId dqo = plan_.buffer(a.dq).owner, dkvo = plan_.buffer(a.dkv).owner;
  if (dqo != plan_.buffer(a.qbundle).owner || dkvo != plan_.buffer(a.kv).owner)
    return Error{op_where(plan_, id), fmt::format("gradients go to dQ{} and dKV{}", dqo, dkvo)};
  return l.attn->bwd(dat(a.qbundle, 0), dat(a.qbundle, 1), f32(a.qbundle, 2), f32(a.qbundle, 3), dat(a.kv, 0),
                     dat(a.kv, 1), *vis, f32(a.dq, 0), f32(a.dkv, 0), f32(a.dkv, 1));
}

Status PlanRunner::merge(Lane& l, OpId id, const ir::MergeArgs& a) {
  CHARM_TRY(local_buffers(id, {a.partial, a.acc}));
  const ir::RankId po = plan_.buffer(a.partial).owner, ao = plan_.buffer(a.acc).owner;
  if (po != ao) return Error{op_where(plan_, id), fmt::format("merges O{} into O{}", po, ao)};
  const ShardShape& ss = shape_;
  return merge_out(f32(a.partial, 0), f32(a.partial, 1), false, f32(a.acc, 0), f32(a.acc, 1), ss.batch, ss.tokens,
                   ss.heads, ss.head_dim, l.cs);
}

Status PlanRunner::accumulate(Lane& l, OpId id, const ir::AccumulateArgs& a) {
  CHARM_TRY(local_buffers(id, {a.partial, a.acc}));
  const ir::RankId po = plan_.buffer(a.partial).owner, ao = plan_.buffer(a.acc).owner;
  if (po != ao) return Error{op_where(plan_, id), fmt::format("adds a gradient of {} to one of {}", po, ao)};
  const auto& lay = layouts_[int(plan_.buffer(a.acc).kind)];
  for (std::size_t s = 0; s < lay.sections.size(); ++s)
    CHARM_TRY(add_f32(f32(a.partial, int(s)), f32(a.acc, int(s)), lay.sections[s].elems, l.cs));
  return {};
}

Status PlanRunner::pack(Lane& l, OpId id, const ir::PackArgs& a) {
  CHARM_TRY(local_buffers(id, {a.q, a.dout, a.out, a.qbundle}));
  const ir::RankId o = plan_.buffer(a.qbundle).owner;
  if (plan_.buffer(a.q).owner != o || plan_.buffer(a.dout).owner != o || plan_.buffer(a.out).owner != o)
    return Error{op_where(plan_, id), "packs tensors of different owners into one bundle"};
  const ShardShape& ss = shape_;
  const auto dtype = plan_.workload.dtype;
  const std::size_t data_bytes = std::size_t(ss.q_elems()) * ir::dtype_size(dtype);
  CHARM_CUDA_TRY(cudaMemcpyAsync(dat(a.qbundle, 0), dat(a.q, 0), data_bytes, cudaMemcpyDeviceToDevice, l.cs));
  CHARM_CUDA_TRY(cudaMemcpyAsync(dat(a.qbundle, 1), dat(a.dout, 0), data_bytes, cudaMemcpyDeviceToDevice, l.cs));
  CHARM_CUDA_TRY(cudaMemcpyAsync(dat(a.qbundle, 2), dat(a.out, 1), std::size_t(ss.lse_elems()) * sizeof(float),
                                 cudaMemcpyDeviceToDevice, l.cs));
  return bundle_delta(dtype, dat(a.dout, 0), f32(a.out, 0), f32(a.qbundle, 3), ss.batch, ss.tokens, ss.heads,
                      ss.head_dim, l.cs);
}

Status PlanRunner::copy(Lane& l, OpId id, const ir::CopyArgs& a) {
  CHARM_TRY(local_buffers(id, {a.src, a.dst}));
  CHARM_CUDA_TRY(cudaMemcpyAsync(buffers_[std::size_t(a.dst)], buffers_[std::size_t(a.src)],
                                 layouts_[int(plan_.buffer(a.src).kind)].bytes, cudaMemcpyDeviceToDevice, l.cs));
  return {};
}

std::string PlanRunner::stuck_message(bool enqueue) const {
  // The op that explains the stall best: a transfer without a counterpart, else a transfer, else any.
  const Lane* pick = nullptr;
  bool orphan = false;
  for (const auto& l : lanes_) {
    const std::size_t at = enqueue ? l.next : l.done;
    if (at >= l.ops.size()) continue;
    const OpId id = l.ops[at];
    const bool comm = is_comm(plan_.op(id));
    const bool lone = comm && !hooks_.issue_group && idx_.partner(id) == ir::kNone;
    if (lone && !orphan) {
      pick = &l;
      orphan = true;
    } else if (pick == nullptr ||
               (!orphan && comm && !is_comm(plan_.op(pick->ops[enqueue ? pick->next : pick->done])))) {
      pick = &l;
    }
  }
  if (pick == nullptr) return "stall: no op is waiting";
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
  std::size_t stuck = 0;
  for (const auto& l : lanes_) stuck += (enqueue ? l.next : l.done) < l.ops.size() ? 1 : 0;
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

Expected<RankOutputs> PlanRunner::outputs(ir::RankId rank) {
  RankOutputs o;
  const auto& res = plan_.results()[std::size_t(rank)];
  const auto pass = plan_.workload.pass;
  auto take = [&](ir::BufferId b, BufKind k, int sec, std::vector<float>& dst) -> Status {
    if (b == ir::kNone)
      return Error{fmt::format("rank {}", rank), fmt::format("the plan names no {} result", ir::to_string(k))};
    if (plan_.buffer(b).kind != k || plan_.buffer(b).owner != rank || buffers_[std::size_t(b)] == nullptr)
      return Error{fmt::format("rank {}", rank),
                   fmt::format("result buffer {} is not this rank's {}", b, ir::to_string(k))};
    const auto& s = layouts_[int(k)].sections[std::size_t(sec)];
    dst.resize(std::size_t(s.elems));
    CHARM_CUDA_TRY(cudaMemcpy(dst.data(), section(b, sec), dst.size() * sizeof(float), cudaMemcpyDeviceToHost));
    return {};
  };
  if (pass != ir::PassKind::Bwd) {
    CHARM_TRY(take(res.out, BufKind::Out, 0, o.out));
    CHARM_TRY(take(res.out, BufKind::Out, 1, o.lse));
  }
  if (pass != ir::PassKind::Fwd) {
    CHARM_TRY(take(res.dq, BufKind::Dq, 0, o.dq));
    CHARM_TRY(take(res.dkv, BufKind::Dkv, 0, o.dk));
    CHARM_TRY(take(res.dkv, BufKind::Dkv, 1, o.dv));
  }
  return o;
}

}  // namespace charm::rt::cuda
