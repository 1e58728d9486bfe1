#include "runtime/rank_executor.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "runtime/global_tensors.hpp"
#include "runtime/region_copy.hpp"
#include "scheduler/ir/buffer_rules.hpp"

namespace charm::rt {

using ir::BufKind;
using ir::is_comm;
using ir::OpId;
using ir::OpKind;

namespace {

constexpr auto kPoll = std::chrono::milliseconds(20);

std::vector<float>& partial_scratch() {
  thread_local std::vector<float> v;
  return v;
}

}  // namespace

RankExecutor::RankExecutor(const ir::Plan& plan, ir::RankId rank, Transport& transport, BufferStore::FillInput fill)
    : RankExecutor(plan, std::make_unique<ir::PlanIndex>(plan), rank, transport, std::move(fill)) {}

RankExecutor::RankExecutor(const ir::Plan& plan, const ir::PlanIndex& index, ir::RankId rank, Transport& transport,
                           BufferStore::FillInput fill)
    : RankExecutor(plan, nullptr, rank, transport, std::move(fill), &index) {}

RankExecutor::RankExecutor(const ir::Plan& plan, std::unique_ptr<ir::PlanIndex> own, ir::RankId rank,
                           Transport& transport, BufferStore::FillInput fill, const ir::PlanIndex* index)
    : own_index_(std::move(own)), plan_(plan), idx_(index != nullptr ? index : own_index_.get()), rank_(rank),
      transport_(transport), store_(plan, rank, std::move(fill)), positions_(plan.workload, plan.ranks, plan.parts) {
  const auto& w = plan.workload;
  shape_ = AttnShape{w.batch,
                     w.heads,
                     w.kv_heads,
                     w.head_dim,
                     static_cast<float>(1.0 / std::sqrt(double(w.head_dim))),
                     w.causal,
                     w.position_mask() ? &plan.workload : nullptr};
  op_done_.assign(plan.size(), 0);
  if (rank < 0 || rank >= plan.ranks) return;  // no ops: outputs() reports it
  for (int s = 0; s < ir::kNumStreams; ++s) {
    const auto ops = idx_->ops_of(rank, ir::Stream(s));
    if (ops.empty()) continue;
    workers_.push_back(std::make_unique<Worker>());
    workers_.back()->stream = ir::Stream(s);
    workers_.back()->ops = ops;
  }
  check_pairs();
}

void RankExecutor::check_pairs() {
  // A transfer moves a whole buffer: each receive's sender must hold the same kind over the same region.
  auto valid = [&](ir::BufferId b) { return b >= 0 && std::size_t(b) < plan_.buffers().size(); };
  for (const auto& w : workers_)
    for (OpId id : w->ops) {
      if (plan_.op(id).kind != OpKind::Recv) continue;
      const OpId send = idx_->partner(id);
      if (send == ir::kNone) continue;  // no sender: the watchdog reports it
      const ir::BufferId src = std::get<ir::SendArgs>(ir::args(plan_.op(send))).src;
      const ir::BufferId dst = std::get<ir::RecvArgs>(ir::args(plan_.op(id))).dst;
      if (!valid(src) || !valid(dst)) continue;  // decode reports it
      if (plan_.buffer(src).kind != plan_.buffer(dst).kind || plan_.region(src) != plan_.region(dst))
        pair_errors_.emplace(
            id, fmt::format("receives {} (op {} of rank {}) into {}: a transfer needs the same kind and "
                            "region on both sides",
                            ir::buffer_label(plan_, src), send, plan_.op(id).peer, ir::buffer_label(plan_, dst)));
    }
}

RankExecutor::~RankExecutor() {
  stop();
  join();
}

void RankExecutor::start() {
  for (auto& w : workers_) threads_.emplace_back([this, wp = w.get()] { work(*wp); });
}

void RankExecutor::stop() {
  stop_.store(true);
  std::lock_guard lk(mu_);
  cv_.notify_all();
}

void RankExecutor::join() {
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

std::optional<Error> RankExecutor::error() const {
  std::lock_guard lk(mu_);
  return error_;
}

void RankExecutor::fail(Error e) {
  std::lock_guard lk(mu_);
  if (!error_) error_ = std::move(e);
  stop_.store(true);
  cv_.notify_all();
}

bool RankExecutor::wait_deps(std::span<const OpId> ops) {
  std::unique_lock lk(mu_);
  for (;;) {
    bool ready = true;
    for (OpId id : ops)
      for (OpId d : plan_.deps(id)) ready = ready && op_done_[std::size_t(d)] != 0;
    if (ready) return true;
    if (stop_.load()) return false;
    cv_.wait_for(lk, kPoll);
  }
}

void RankExecutor::finish(std::span<const OpId> ops) {
  {
    std::lock_guard lk(mu_);
    for (OpId id : ops) op_done_[std::size_t(id)] = 1;
    cv_.notify_all();
  }
  completed_.fetch_add(ops.size());
  for (OpId id : ops) store_.release(plan_.op(id));
}

void RankExecutor::work(Worker& w) {
  try {
    std::size_t i = 0;
    while (i < w.ops.size()) {
      if (stop_.load()) return;
      const auto& first = plan_.op(w.ops[i]);
      const std::span<const OpId> members = idx_->group(w.ops[i]);
      const std::size_t j = i + members.size();
      w.at.store(w.ops[i]);
      w.state.store(int(State::WaitingDeps));
      if (!wait_deps(members)) return;
      const auto since_t0 = [this] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
      };
      const double began = timeline_ != nullptr ? since_t0() : 0;
      Status s;
      if (is_comm(first)) {
        w.state.store(int(State::InTransport));
        bool stopped = false;
        s = run_comm(members, stopped);
        if (s && stopped) return;
      } else {
        w.state.store(int(State::Running));
        s = run_local(w.ops[i]);
      }
      if (!s) {
        fail(s.error());
        return;
      }
      if (timeline_ != nullptr) {
        const double ended = since_t0();
        for (OpId id : members) timeline_->record(id, began, ended);
      }
      finish(members);
      i = j;
    }
    w.state.store(int(State::Finished));
    finished_workers_.fetch_add(1);
  } catch (const std::bad_alloc&) {
    fail(Error{fmt::format("rank {}", rank_), "out of memory"});
  }
}

Status RankExecutor::run_comm(std::span<const OpId> ops, bool& stopped) {
  std::vector<RequestPtr> reqs;
  // Partial outputs travel in the workload's dtype (Workload::out_bytes): what a peer
  // receives is the sender's fp32 accumulator rounded, O only (LSE is fp32); so do the
  // gradient partials the plan holds in the dtype (Buffer::activations_dtype). The staged
  // copies live until every transfer of the group completed.
  std::vector<std::vector<float>> staged;
  staged.reserve(ops.size());
  const ir::DType dtype = plan_.workload.dtype;
  for (OpId id : ops) {
    const auto& op = plan_.op(id);
    if (auto e = pair_errors_.find(id); e != pair_errors_.end()) return Error{where(id), e->second};
    auto a = ir::decode(plan_, id);
    if (!a) return Error{where(id), a.error().what};
    const ir::BufferId b = op.kind == OpKind::Send ? std::get<ir::SendArgs>(*a).src : std::get<ir::RecvArgs>(*a).dst;
    auto data = store_.get(b);
    if (!data) return Error{where(id), data.error().message()};
    std::span<float> payload = *data;
    const ir::Buffer& sb = plan_.buffer(b);
    if (op.kind == OpKind::Send && dtype != ir::DType::FP32 && (sb.kind == BufKind::Out || sb.activations_dtype)) {
      auto& copy = staged.emplace_back(payload.begin(), payload.end());
      if (sb.activations_dtype) {
        round_all(dtype, copy);  // a gradient partial, all of it as the kernel wrote it
      } else {
        const RegionLayout& l = store_.layout(b);  // O of every owner's block; LSE stays fp32
        const std::int64_t q = l.block.q_elems();
        for (std::int64_t k = 0; k < l.region.owners(); ++k)
          round_all(dtype, std::span<float>(copy).subspan(std::size_t(k * l.block_elems), std::size_t(q)));
      }
      payload = copy;
    }
    Expected<RequestPtr> r = op.kind == OpKind::Send
                                 ? transport_.post_send({op.stream, rank_, op.peer, op.tag}, payload)
                                 : transport_.post_recv({op.stream, op.peer, rank_, op.tag}, payload);
    if (!r) return Error{where(id), r.error().message()};
    (*r)->label = where(id);
    reqs.push_back(std::move(*r));
  }
  auto done = transport_.wait_all(reqs, [this] { return stop_.load(); });
  // Whether the transport's error names one of these requests' ops (its `where` is the label).
  const auto names_an_op = [&](const Error& e) {
    const auto is_where = [&](const RequestPtr& r) { return r->label == e.where; };  // a place, not a meaning
    return std::any_of(reqs.begin(), reqs.end(), is_where);
  };
  if (!done && names_an_op(done.error())) return done.error();
  if (!done) return Error{where(ops[0]), done.error().message()};
  stopped = !*done;
  return {};
}

std::string RankExecutor::where(OpId id) const {
  return fmt::format("rank {} op {} ({})", rank_, id, ir::op_label(plan_, id));
}

AttnShape RankExecutor::attn(const ShardShape& b) const {
  AttnShape a = shape_;
  a.heads = b.heads;
  a.kv_heads = b.kv_heads;
  return a;
}

Expected<RankExecutor::Arg> RankExecutor::arg(OpId id, ir::BufferId b) {
  auto data = store_.get(b);
  if (!data) return Error{where(id), data.error().message()};
  return Arg{data->data(), std::int64_t(data->size()), &store_.layout(b), b};
}

Status RankExecutor::same_region(OpId id, const Arg& a, const Arg& b, const char* what) const {
  if (a.region() == b.region()) return {};
  return Error{where(id), fmt::format("{}: {} and {} hold different regions", what, ir::buffer_label(plan_, a.id),
                                      ir::buffer_label(plan_, b.id))};
}

Status RankExecutor::run_local(OpId id) {
  auto a = ir::decode(plan_, id);
  if (!a) return Error{where(id), a.error().what};
  return std::visit(ir::Overloaded{
                        [&](const ir::ComputeFwdArgs& c) { return compute_fwd(id, c); },
                        [&](const ir::ComputeBwdArgs& c) { return compute_bwd(id, c); },
                        [&](const ir::MergeArgs& m) { return merge(id, m); },
                        [&](const ir::AccumulateArgs& m) { return accumulate(id, m); },
                        [&](const ir::PackArgs& k) { return pack(id, k); },
                        [&](const ir::CopyArgs& c) { return copy(id, c); },
                        [&](const ir::SendArgs&) {
                          return Status(Error{where(id), "not a local op"});
                        },
                        [&](const ir::RecvArgs&) {
                          return Status(Error{where(id), "not a local op"});
                        },
                    },
                    *a);
}

Expected<RankExecutor::ComputeArgs> RankExecutor::compute_args(OpId id, ir::BufferId q, ir::BufferId kv,
                                                               ir::BufferId acc, bool fwd) {
  ComputeArgs c;
  for (auto [b, out] : {std::pair{q, &c.q}, std::pair{kv, &c.kv}, std::pair{acc, &c.acc}}) {
    auto x = arg(id, b);
    if (!x) return x.error();
    *out = *x;
  }
  if (auto s = check_compute_blocks(plan_, id, q, c.q.region(), kv, c.kv.region()); !s) return s.error();
  if (auto s = same_region(id, c.q, c.acc, fwd ? "accumulates into another output" : "dQ goes to another region"); !s)
    return s.error();
  return c;
}

Status RankExecutor::compute_fwd(OpId id, const ir::ComputeFwdArgs& args) {
  auto c = compute_args(id, args.q, args.kv, args.out, true);
  if (!c) return c.error();
  const Arg &q = c->q, &kv = c->kv, &acc = c->acc;
  const ir::Region &rq = q.region(), &rk = kv.region();
  const AttnShape a = attn(q.block());
  const auto nq = q.block().q_elems(), nl = q.block().lse_elems(), nkv = kv.block().kv_elems();
  auto& part = partial_scratch();
  part.resize(std::size_t(nq + nl));
  for (ir::RankId x = rq.owner_begin; x < rq.owner_end; ++x)
    for (ir::RankId y = rk.owner_begin; y < rk.owner_end; ++y) {
      const Positions qp = positions_.of(x, rq), kp = positions_.of(y, rk);
      if (!positions_.visible(qp, kp)) continue;  // an empty partial would change nothing
      attention_fwd_block(a, q.at(x), qp, kv.at(y), kv.at(y) + nkv, kp, part.data(), part.data() + nq);
      merge_out(a, q.block().tokens, part.data(), part.data() + nq, acc.at(x), acc.at(x) + nq);
    }
  return {};
}

Status RankExecutor::compute_bwd(OpId id, const ir::ComputeBwdArgs& args) {
  auto c = compute_args(id, args.qbundle, args.kv, args.dq, false);
  if (!c) return c.error();
  auto dkv_arg = arg(id, args.dkv);
  if (!dkv_arg) return dkv_arg.error();
  const Arg &q = c->q, &kv = c->kv, &acc = c->acc, &dkv = *dkv_arg;
  if (auto s = same_region(id, kv, dkv, "dKV goes to another region"); !s) return s;
  const ir::Region &rq = q.region(), &rk = kv.region();
  const AttnShape a = attn(q.block());
  const auto nq = q.block().q_elems(), nl = q.block().lse_elems(), nkv = kv.block().kv_elems();
  for (ir::RankId x = rq.owner_begin; x < rq.owner_end; ++x)
    for (ir::RankId y = rk.owner_begin; y < rk.owner_end; ++y) {
      const Positions qp = positions_.of(x, rq), kp = positions_.of(y, rk);
      if (!positions_.visible(qp, kp)) continue;  // all-zero gradients
      const float* qb = q.at(x);
      attention_bwd_block(a, qb, qb + nq, qb + 2 * nq, qb + 2 * nq + nl, qp, kv.at(y), kv.at(y) + nkv, kp, acc.at(x),
                          dkv.at(y), dkv.at(y) + nkv);
    }
  return {};
}

Status RankExecutor::merge(OpId id, const ir::MergeArgs& args) {
  auto part = arg(id, args.partial), acc = arg(id, args.acc);
  if (!part) return part.error();
  if (!acc) return acc.error();
  if (auto s = same_region(id, *part, *acc, "merges a partial into another output"); !s) return s;
  const AttnShape a = attn(acc->block());
  const auto nq = acc->block().q_elems();
  for (ir::RankId x = acc->region().owner_begin; x < acc->region().owner_end; ++x)
    merge_out(a, acc->block().tokens, part->at(x), part->at(x) + nq, acc->at(x), acc->at(x) + nq);
  return {};
}

Status RankExecutor::accumulate(OpId id, const ir::AccumulateArgs& args) {
  auto part = arg(id, args.partial), acc = arg(id, args.acc);
  if (!part) return part.error();
  if (!acc) return acc.error();
  if (auto s = same_region(id, *part, *acc, "adds a gradient to another region"); !s) return s;
  for (std::int64_t i = 0; i < acc->size; ++i) acc->data[i] += part->data[i];
  return {};
}

Status RankExecutor::pack(OpId id, const ir::PackArgs& args) {
  Arg in[3];
  int k = 0;
  for (ir::BufferId b : {args.q, args.dout, args.out}) {
    auto x = arg(id, b);
    if (!x) return x.error();
    in[k++] = *x;
  }
  auto qb_arg = arg(id, args.qbundle);
  if (!qb_arg) return qb_arg.error();
  const Arg &q = in[0], &dout = in[1], &out = in[2], &qb = *qb_arg;
  for (const Arg& x : in)
    if (auto s = same_region(id, x, qb, "packs tensors of another region into the bundle"); !s) return s;
  const ShardShape& bs = qb.block();
  const AttnShape a = attn(bs);
  const auto nq = bs.q_elems(), nl = bs.lse_elems();
  for (ir::RankId x = qb.region().owner_begin; x < qb.region().owner_end; ++x) {
    float* b = qb.at(x);
    std::memcpy(b, q.at(x), sizeof(float) * std::size_t(nq));
    std::memcpy(b + nq, dout.at(x), sizeof(float) * std::size_t(nq));
    std::memcpy(b + 2 * nq, out.at(x) + nq, sizeof(float) * std::size_t(nl));
    bundle_delta(a, bs.tokens, dout.at(x), out.at(x), b + 2 * nq + nl);
  }
  return {};
}

Status RankExecutor::copy(OpId id, const ir::CopyArgs& args) {
  auto src = arg(id, args.src), dst = arg(id, args.dst);
  if (!src) return src.error();
  if (!dst) return dst.error();
  if (!src->region().contains(dst->region()) && !dst->region().contains(src->region()))
    return Error{where(id), fmt::format("copies between {} and {}, where neither region contains the other",
                                        ir::buffer_label(plan_, args.src), ir::buffer_label(plan_, args.dst))};
  auto s = copy_region(plan_.workload, plan_.ranks, plan_.parts, plan_.buffer(args.src).kind, src->region(),
                       {src->data, std::size_t(src->size)}, dst->region(), {dst->data, std::size_t(dst->size)});
  if (!s) return Error{where(id), s.error().message()};
  return {};
}

bool RankExecutor::running() const {
  return std::any_of(workers_.begin(), workers_.end(),
                     [](const auto& w) { return State(w->state.load()) == State::Running; });
}

std::vector<BlockedOp> RankExecutor::blocked() const {
  std::vector<BlockedOp> out;
  std::lock_guard lk(mu_);
  for (const auto& w : workers_) {
    const auto state = State(w->state.load());
    if (state == State::Finished || state == State::Running) continue;
    const OpId at = w->at.load();
    if (at == ir::kNone) continue;
    BlockedOp b{rank_, w->stream, at, at, state == State::InTransport};
    if (state == State::WaitingDeps) {
      // The group starting at `at`: its members' first missing dependency.
      for (OpId m : idx_->group(at))
        for (OpId d : plan_.deps(m))
          if (op_done_[std::size_t(d)] == 0 && b.waits_on == at) b.waits_on = d;
    }
    out.push_back(b);
  }
  return out;
}

Expected<RankOutputs> RankExecutor::outputs() {
  RankOutputs o;
  const ShardShape ss = ShardShape::of(plan_.workload, plan_.ranks);
  const auto& res = plan_.results()[std::size_t(rank_)];
  const auto pass = plan_.workload.pass;
  auto take = [&](ir::BufferId b, BufKind k, std::int64_t offset, std::int64_t n, std::vector<float>& dst) -> Status {
    if (b == ir::kNone)
      return Error{fmt::format("rank {}", rank_), fmt::format("the plan names no {} result", ir::to_string(k))};
    if (b < 0 || std::size_t(b) >= plan_.buffers().size() || plan_.buffer(b).kind != k ||
        plan_.buffer(b).owner != rank_)
      return Error{fmt::format("rank {}", rank_),
                   fmt::format("result buffer {} is not this rank's {}", b, ir::to_string(k))};
    if (!ir::is_whole_shard(plan_, b, rank_))
      return Error{fmt::format("rank {}", rank_),
                   fmt::format("result buffer {} ({}) is not one whole shard", b, ir::buffer_label(plan_, b))};
    auto data = store_.get(b);
    if (!data) return data.error();
    dst.assign(data->begin() + offset, data->begin() + offset + n);
    return {};
  };
  if (pass != ir::PassKind::Bwd) {
    if (auto s = take(res.out, BufKind::Out, 0, ss.q_elems(), o.out); !s) return s.error();
    if (auto s = take(res.out, BufKind::Out, ss.q_elems(), ss.lse_elems(), o.lse); !s) return s.error();
  }
  if (pass != ir::PassKind::Fwd) {
    if (auto s = take(res.dq, BufKind::Dq, 0, ss.q_elems(), o.dq); !s) return s.error();
    if (auto s = take(res.dkv, BufKind::Dkv, 0, ss.kv_elems(), o.dk); !s) return s.error();
    if (auto s = take(res.dkv, BufKind::Dkv, ss.kv_elems(), ss.kv_elems(), o.dv); !s) return s.error();
  }
  // The results are stored in the workload's dtype, as a GPU writes them (LSE stays fp32);
  // the accumulators behind them were fp32.
  for (auto* t : {&o.out, &o.dq, &o.dk, &o.dv}) round_all(plan_.workload.dtype, *t);
  return o;
}

}  // namespace charm::rt
