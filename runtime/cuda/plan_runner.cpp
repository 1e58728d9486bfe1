#include "runtime/cuda/plan_runner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <thread>

#include "runtime/cuda/cuda_check.hpp"
#include "runtime/cuda/kernels.hpp"
#include "scheduler/ir/buffer_rules.hpp"

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

char* PlanRunner::base(ir::BufferId b) const {
  const DeviceBuffer& d = dev_[b];
  return static_cast<char*>(buffers_[std::size_t(d.root)]) + d.offset;
}

char* PlanRunner::section(ir::BufferId b, ir::RankId x, int sec) const {
  const DeviceBuffer& d = dev_[b];
  return base(b) + d.block_at(x) + d.layout.sections[std::size_t(sec)].offset;
}

char* PlanRunner::wire_section(ir::BufferId b, ir::RankId x, int sec) const {
  const DeviceBuffer& d = dev_[b];
  return static_cast<char*>(wire_[std::size_t(d.root)]) + d.wire_offset +
         std::size_t(x - d.region.owner_begin) * d.wire.bytes + d.wire.sections[std::size_t(sec)].offset;
}

Status PlanRunner::init_buffers(const GlobalTensors& in) {
  const auto fill = input_filler(plan_, in);
  const auto dtype = plan_.workload.dtype;
  for (std::size_t b = 0; b < buffers_.size(); ++b) {
    if (buffers_[b] == nullptr) continue;
    const auto& buf = plan_.buffers()[b];
    const DeviceBuffer& d = dev_.buf[b];
    const auto& lay = d.layout;
    if (buf.init == ir::BufInit::Input) {  // one whole shard (ir::check_buffer)
      auto& host = host_inputs_[b];
      if (host.empty()) {
        host.resize(std::size_t(lay.host_elems()));
        CHARM_TRY(fill(buf, host));
      }
      CHARM_CUDA_TRY(cudaMemcpy(staging_, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
      std::int64_t at = 0;
      for (std::size_t s = 0; s < lay.sections.size(); ++s) {
        const auto& sec = lay.sections[s];
        char* dst = section(ir::BufferId(b), buf.owner, int(s));
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
      // Empty accumulators: zero, except an output's LSE, which is -inf (every owner's block).
      CHARM_CUDA_TRY(cudaMemset(buffers_[b], 0, d.bytes()));
      if (buf.kind == BufKind::Out)
        for (ir::RankId x = d.region.owner_begin; x < d.region.owner_end; ++x)
          CHARM_TRY(fill_f32(f32(ir::BufferId(b), x, 1), lay.sections[1].elems, -std::numeric_limits<float>::infinity(),
                             nullptr));
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
    CHARM_CUDA_TRY(cudaStreamWaitEvent(l.cs, start_ev_[std::size_t(peer)], 0));
    CHARM_TRY(local_transfer(id, sb, rb, l.cs));
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
                        [&](const ir::ComputeFwdArgs& c) { return compute_fwd(id, c); },
                        [&](const ir::ComputeBwdArgs& c) { return compute_bwd(id, c); },
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
    if (dev_[b].root == ir::kNone || buffers_[std::size_t(dev_[b].root)] == nullptr)
      return Error{op_where(plan_, id), fmt::format("buffer {} is not on this rank", b)};
  return {};
}

Status PlanRunner::same_region(OpId id, ir::BufferId a, ir::BufferId b, const char* what) const {
  if (dev_[a].region == dev_[b].region) return {};
  return Error{op_where(plan_, id), fmt::format("{}: {} and {} hold different regions", what,
                                                ir::buffer_label(plan_, a), ir::buffer_label(plan_, b))};
}

Status PlanRunner::local_transfer(OpId id, ir::BufferId sb, ir::BufferId rb, cudaStream_t s) {
  // A transfer moves a whole buffer or view: both sides hold one kind over one region.
  CHARM_TRY(local_buffers(id, {sb, rb}));
  const auto &src = plan_.buffer(sb), &dst = plan_.buffer(rb);
  if (src.kind != dst.kind || dev_[sb].region != dev_[rb].region)
    return Error{op_where(plan_, id), fmt::format("receives {} into {}: a transfer needs the same kind and region on "
                                                  "both sides",
                                                  ir::buffer_label(plan_, sb), ir::buffer_label(plan_, rb))};
  const DeviceBuffer& d = dev_[rb];
  if (!d.staged) {
    CHARM_CUDA_TRY(cudaMemcpyAsync(base(rb), base(sb), d.bytes(), cudaMemcpyDeviceToDevice, s));
    return {};
  }
  // O goes through the dtype, as it would over the wire; LSE stays fp32.
  const auto dtype = plan_.workload.dtype;
  for (ir::RankId x = d.region.owner_begin; x < d.region.owner_end; ++x) {
    const std::int64_t nq = d.layout.sections[0].elems, nl = d.layout.sections[1].elems;
    CHARM_TRY(convert_from_f32(dtype, f32(sb, x, 0), wire_section(rb, x, 0), nq, s));
    CHARM_TRY(convert_to_f32(dtype, wire_section(rb, x, 0), f32(rb, x, 0), nq, s));
    CHARM_CUDA_TRY(
        cudaMemcpyAsync(f32(rb, x, 1), f32(sb, x, 1), std::size_t(nl) * sizeof(float), cudaMemcpyDeviceToDevice, s));
  }
  return {};
}

Status PlanRunner::convert_wire(ir::BufferId b, bool to_wire, cudaStream_t s) {
  const DeviceBuffer& d = dev_[b];
  const std::int64_t nq = d.layout.sections[0].elems, nl = d.layout.sections[1].elems;
  const auto dtype = plan_.workload.dtype;
  for (ir::RankId x = d.region.owner_begin; x < d.region.owner_end; ++x) {
    char *wire_lse = wire_section(b, x, 1), *lse = section(b, x, 1);
    if (to_wire)
      CHARM_TRY(convert_from_f32(dtype, f32(b, x, 0), wire_section(b, x, 0), nq, s));
    else
      CHARM_TRY(convert_to_f32(dtype, wire_section(b, x, 0), f32(b, x, 0), nq, s));
    CHARM_CUDA_TRY(cudaMemcpyAsync(to_wire ? wire_lse : lse, to_wire ? lse : wire_lse, std::size_t(nl) * sizeof(float),
                                   cudaMemcpyDeviceToDevice, s));
  }
  return {};
}

Status PlanRunner::stage_group(std::span<const OpId> group, bool before, cudaStream_t s) {
  for (OpId id : group) {
    const bool send = plan_.op(id).kind == OpKind::Send;
    if (send != before) continue;
    auto a = ir::decode(plan_, id);
    if (!a) return Error{op_where(plan_, id), a.error().what};
    const ir::BufferId b = send ? std::get<ir::SendArgs>(*a).src : std::get<ir::RecvArgs>(*a).dst;
    CHARM_TRY(local_buffers(id, {b}));
    if (!dev_[b].staged) continue;
    CHARM_TRY(convert_wire(b, /*to_wire=*/send, s));
  }
  return {};
}

Expected<PlanRunner::Transfer> PlanRunner::transfer(OpId id) const {
  auto a = ir::decode(plan_, id);
  if (!a) return Error{op_where(plan_, id), a.error().what};
  if (!is_comm(plan_.op(id))) return Error{op_where(plan_, id), "not a transfer"};
  const ir::BufferId b =
      plan_.op(id).kind == OpKind::Send ? std::get<ir::SendArgs>(*a).src : std::get<ir::RecvArgs>(*a).dst;
  CHARM_TRY(local_buffers(id, {b}));
  const DeviceBuffer& d = dev_[b];
  if (d.staged) return Transfer{wire_section(b, d.region.owner_begin, 0), d.wire_bytes()};
  return Transfer{base(b), d.bytes()};
}

Status PlanRunner::compute_fwd(OpId id, const ir::ComputeFwdArgs& a) {
  CHARM_TRY(local_buffers(id, {a.q, a.kv, a.out}));
  BlockAttention* attn = attn_[std::size_t(id)];
  if (attn == nullptr) return Error{op_where(plan_, id), "internal: no attention kernels for this op"};
  for (const ComputeBlock& k : blocks_[std::size_t(id)].blocks)
    CHARM_TRY(attn->fwd(dat(a.q, k.x, 0), dat(a.kv, k.y, 0), dat(a.kv, k.y, 1), vis_ + k.mask, f32(a.out, k.x, 0),
                        f32(a.out, k.x, 1)));
  return {};
}

Status PlanRunner::compute_bwd(OpId id, const ir::ComputeBwdArgs& a) {
  CHARM_TRY(local_buffers(id, {a.qbundle, a.kv, a.dq, a.dkv}));
  BlockAttention* attn = attn_[std::size_t(id)];
  if (attn == nullptr) return Error{op_where(plan_, id), "internal: no attention kernels for this op"};
  for (const ComputeBlock& k : blocks_[std::size_t(id)].blocks)
    CHARM_TRY(attn->bwd(dat(a.qbundle, k.x, 0), dat(a.qbundle, k.x, 1), f32(a.qbundle, k.x, 2), f32(a.qbundle, k.x, 3),
                        dat(a.kv, k.y, 0), dat(a.kv, k.y, 1), vis_ + k.mask, f32(a.dq, k.x, 0), f32(a.dkv, k.y, 0),
                        f32(a.dkv, k.y, 1)));
  return {};
}

Status PlanRunner::merge(Lane& l, OpId id, const ir::MergeArgs& a) {
  CHARM_TRY(local_buffers(id, {a.partial, a.acc}));
  CHARM_TRY(same_region(id, a.partial, a.acc, "merges a partial into another output"));
  const DeviceBuffer& d = dev_[a.acc];
  const ShardShape& bs = d.block;
  for (ir::RankId x = d.region.owner_begin; x < d.region.owner_end; ++x)
    CHARM_TRY(merge_out(f32(a.partial, x, 0), f32(a.partial, x, 1), false, f32(a.acc, x, 0), f32(a.acc, x, 1), bs.batch,
                        bs.tokens, bs.heads, bs.head_dim, l.cs));
  return {};
}

Status PlanRunner::accumulate(Lane& l, OpId id, const ir::AccumulateArgs& a) {
  CHARM_TRY(local_buffers(id, {a.partial, a.acc}));
  CHARM_TRY(same_region(id, a.partial, a.acc, "adds a gradient to another region"));
  const DeviceBuffer& d = dev_[a.acc];
  for (ir::RankId x = d.region.owner_begin; x < d.region.owner_end; ++x)
    for (std::size_t s = 0; s < d.layout.sections.size(); ++s)
      CHARM_TRY(add_f32(f32(a.partial, x, int(s)), f32(a.acc, x, int(s)), d.layout.sections[s].elems, l.cs));
  return {};
}

Status PlanRunner::pack(Lane& l, OpId id, const ir::PackArgs& a) {
  CHARM_TRY(local_buffers(id, {a.q, a.dout, a.out, a.qbundle}));
  for (ir::BufferId b : {a.q, a.dout, a.out})
    CHARM_TRY(same_region(id, b, a.qbundle, "packs tensors of another region into the bundle"));
  const DeviceBuffer& d = dev_[a.qbundle];
  const ShardShape& bs = d.block;
  const auto dtype = plan_.workload.dtype;
  const std::size_t data_bytes = std::size_t(bs.q_elems()) * ir::dtype_size(dtype);
  for (ir::RankId x = d.region.owner_begin; x < d.region.owner_end; ++x) {
    CHARM_CUDA_TRY(cudaMemcpyAsync(dat(a.qbundle, x, 0), dat(a.q, x, 0), data_bytes, cudaMemcpyDeviceToDevice, l.cs));
    CHARM_CUDA_TRY(
        cudaMemcpyAsync(dat(a.qbundle, x, 1), dat(a.dout, x, 0), data_bytes, cudaMemcpyDeviceToDevice, l.cs));
    CHARM_CUDA_TRY(cudaMemcpyAsync(dat(a.qbundle, x, 2), dat(a.out, x, 1), std::size_t(bs.lse_elems()) * sizeof(float),
                                   cudaMemcpyDeviceToDevice, l.cs));
    CHARM_TRY(bundle_delta(dtype, dat(a.dout, x, 0), f32(a.out, x, 0), f32(a.qbundle, x, 3), bs.batch, bs.tokens,
                           bs.heads, bs.head_dim, l.cs));
  }
  return {};
}

Status PlanRunner::copy(Lane& l, OpId id, const ir::CopyArgs& a) {
  CHARM_TRY(local_buffers(id, {a.src, a.dst}));
  const DeviceBuffer &s = dev_[a.src], &d = dev_[a.dst];
  const BufKind kind = plan_.buffer(a.src).kind;
  if (plan_.buffer(a.dst).kind != kind || (!s.region.contains(d.region) && !d.region.contains(s.region)))
    return Error{op_where(plan_, id),
                 fmt::format("copies between {} and {}, which are of other kinds or neither of whose regions "
                             "contains the other",
                             ir::buffer_label(plan_, a.src), ir::buffer_label(plan_, a.dst))};
  if (s.region == d.region) {
    CHARM_CUDA_TRY(cudaMemcpyAsync(base(a.dst), base(a.src), d.bytes(), cudaMemcpyDeviceToDevice, l.cs));
    return {};
  }
  const char* from = base(a.src);
  char* to = base(a.dst);
  for (const Copy2D& c : region_copies(plan_.workload, plan_.ranks, plan_.parts, kind, s, d))
    CHARM_CUDA_TRY(cudaMemcpy2DAsync(to + c.dst, c.dst_pitch, from + c.src, c.src_pitch, c.width, c.height,
                                     cudaMemcpyDeviceToDevice, l.cs));
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
    if (b < 0 || std::size_t(b) >= plan_.buffers().size() || plan_.buffer(b).kind != k ||
        plan_.buffer(b).owner != rank || dev_[b].root == ir::kNone)
      return Error{fmt::format("rank {}", rank),
                   fmt::format("result buffer {} is not this rank's {}", b, ir::to_string(k))};
    if (!ir::is_whole_shard(plan_, b, rank))
      return Error{fmt::format("rank {}", rank),
                   fmt::format("result buffer {} ({}) is not one whole shard", b, ir::buffer_label(plan_, b))};
    const auto& s = dev_[b].layout.sections[std::size_t(sec)];
    dst.resize(std::size_t(s.elems));
    CHARM_CUDA_TRY(cudaMemcpy(dst.data(), section(b, rank, sec), dst.size() * sizeof(float), cudaMemcpyDeviceToHost));
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
