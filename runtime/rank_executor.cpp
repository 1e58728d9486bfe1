#include "runtime/rank_executor.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

namespace charm::rt {

using ir::BufKind;
using ir::OpId;
using ir::OpKind;

namespace {

constexpr auto kPoll = std::chrono::milliseconds(20);

bool is_comm(const ir::Op& op) { return op.kind == OpKind::Send || op.kind == OpKind::Recv; }

std::vector<float>& partial_scratch() {
  thread_local std::vector<float> v;
  return v;
}

} // namespace

RankExecutor::RankExecutor(const ir::Plan& plan, ir::RankId rank, Transport& transport, BufferStore::FillInput fill)
    : plan_(plan), rank_(rank), transport_(transport), store_(plan, rank, std::move(fill)) {
  const auto& w = plan.workload;
  shape_ = AttnShape{w.batch, w.heads, w.kv_heads, w.head_dim, static_cast<float>(1.0 / std::sqrt(double(w.head_dim))),
                     w.causal};
  for (int r = 0; r < plan.ranks; ++r) positions_.push_back(token_positions(w, r, plan.ranks));
  op_done_.assign(plan.size(), 0);
  std::unique_ptr<Worker> by_stream[ir::kNumStreams];
  for (OpId id = 0; id < static_cast<OpId>(plan.size()); ++id) {
    const auto& op = plan.op(id);
    if (op.rank != rank) continue;
    auto& w_ = by_stream[int(op.stream)];
    if (!w_) {
      w_ = std::make_unique<Worker>();
      w_->stream = op.stream;
    }
    w_->ops.push_back(id);
  }
  for (auto& w_ : by_stream)
    if (w_) workers_.push_back(std::move(w_));
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
  for (OpId id : ops) {
    const auto& op = plan_.op(id);
    for (int i = 0; i < 4; ++i)
      if (op.buf[i] != ir::kNone && std::find(op.buf, op.buf + i, op.buf[i]) == op.buf + i) store_.release(op.buf[i]);
  }
}

void RankExecutor::work(Worker& w) {
  try {
    std::size_t i = 0;
    while (i < w.ops.size()) {
      if (stop_.load()) return;
      const auto& first = plan_.op(w.ops[i]);
      std::size_t j = i + 1;
      if (is_comm(first) && first.group != ir::kNone)
        while (j < w.ops.size() && is_comm(plan_.op(w.ops[j])) && plan_.op(w.ops[j]).group == first.group) ++j;
      const std::span<const OpId> members(w.ops.data() + i, j - i);
      w.at.store(w.ops[i]);
      w.state.store(int(State::WaitingDeps));
      if (!wait_deps(members)) return;
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
  for (OpId id : ops) {
    const auto& op = plan_.op(id);
    auto data = store_.get(op.buf[0]);
    if (!data) return data.error();
    Expected<RequestPtr> r = op.kind == OpKind::Send
                                 ? transport_.post_send({op.stream, rank_, op.peer, op.tag}, *data)
                                 : transport_.post_recv({op.stream, op.peer, rank_, op.tag}, *data);
    if (!r) return Error{fmt::format("rank {} op {} ({})", rank_, id, ir::op_label(plan_, id)), r.error().message()};
    reqs.push_back(std::move(*r));
  }
  auto done = transport_.wait_all(reqs, [this] { return stop_.load(); });
  if (!done) return Error{fmt::format("rank {} op {} ({})", rank_, ops[0], ir::op_label(plan_, ops[0])), done.error().message()};
  stopped = !*done;
  return {};
}

Status RankExecutor::run_local(OpId id) {
  const ir::Op& op = plan_.op(id);
  const ShardShape ss = ShardShape::of(plan_.workload, plan_.ranks);
  const auto nq = ss.q_elems(), nkv = ss.kv_elems(), T = ss.tokens;
  auto where = [&] { return fmt::format("rank {} op {} ({})", rank_, id, ir::op_label(plan_, id)); };
  // The buffer in slot i, checked to be of kind `k`.
  auto arg = [&](int i, BufKind k) -> Expected<std::span<float>> {
    const ir::BufferId b = op.buf[i];
    if (b == ir::kNone) return Error{where(), fmt::format("buffer slot {} is empty", i)};
    if (plan_.buffer(b).kind != k)
      return Error{where(), fmt::format("buffer slot {} holds {}, expected {}", i, ir::to_string(plan_.buffer(b).kind),
                                        ir::to_string(k))};
    return store_.get(b);
  };
  auto owner = [&](int i) { return plan_.buffer(op.buf[i]).owner; };
#define CHARM_RT_ARG(var, i, kind)   \
  auto var##_e = arg(i, kind);       \
  if (!var##_e) return var##_e.error(); \
  float* var = var##_e->data()

  switch (op.kind) {
    case OpKind::Compute: {
      const ir::RankId qo = owner(0), ko = owner(1);
      if (qo != op.q_owner || ko != op.kv_owner)
        return Error{where(), fmt::format("op names Q{}*KV{} but its buffers hold Q{}, KV{}", op.q_owner, op.kv_owner, qo, ko)};
      const auto& qp = positions_[std::size_t(qo)];
      const auto& kp = positions_[std::size_t(ko)];
      if (op.phase == ir::Phase::Fwd) {
        CHARM_RT_ARG(q, 0, BufKind::Q);
        CHARM_RT_ARG(kv, 1, BufKind::Kv);
        CHARM_RT_ARG(acc, 2, BufKind::Out);
        if (owner(2) != qo) return Error{where(), fmt::format("accumulates into the output of rank {}", owner(2))};
        auto& part = partial_scratch();
        part.resize(std::size_t(nq + ss.lse_elems()));
        attention_fwd_block(shape_, q, qp, kv, kv + nkv, kp, part.data(), part.data() + nq);
        merge_out(shape_, T, part.data(), part.data() + nq, acc, acc + nq);
      } else {
        CHARM_RT_ARG(qb, 0, BufKind::QBundle);
        CHARM_RT_ARG(kv, 1, BufKind::Kv);
        CHARM_RT_ARG(dq, 2, BufKind::Dq);
        CHARM_RT_ARG(dkv, 3, BufKind::Dkv);
        if (owner(2) != qo || owner(3) != ko)
          return Error{where(), fmt::format("gradients go to dQ{} and dKV{}", owner(2), owner(3))};
        attention_bwd_block(shape_, qb, qb + nq, qb + 2 * nq, qb + 2 * nq + ss.lse_elems(), qp, kv, kv + nkv, kp, dq,
                            dkv, dkv + nkv);
      }
      return {};
    }
    case OpKind::Merge: {
      CHARM_RT_ARG(part, 0, BufKind::Out);
      CHARM_RT_ARG(acc, 1, BufKind::Out);
      if (owner(0) != owner(1)) return Error{where(), fmt::format("merges O{} into O{}", owner(0), owner(1))};
      merge_out(shape_, T, part, part + nq, acc, acc + nq);
      return {};
    }
    case OpKind::Accumulate: {
      const BufKind k = plan_.buffer(op.buf[0]).kind;
      if (k != BufKind::Dq && k != BufKind::Dkv) return Error{where(), "accumulates a buffer that is not a gradient"};
      CHARM_RT_ARG(part, 0, k);
      CHARM_RT_ARG(acc, 1, k);
      if (owner(0) != owner(1)) return Error{where(), fmt::format("adds a gradient of {} to one of {}", owner(0), owner(1))};
      const auto n = ss.elems(k);
      for (std::int64_t i = 0; i < n; ++i) acc[i] += part[i];
      return {};
    }
    case OpKind::Copy: {
      if (op.buf[3] != ir::kNone) {
        CHARM_RT_ARG(q, 0, BufKind::Q);
        CHARM_RT_ARG(dout, 1, BufKind::Dout);
        CHARM_RT_ARG(out, 2, BufKind::Out);
        CHARM_RT_ARG(qb, 3, BufKind::QBundle);
        if (owner(0) != owner(3) || owner(1) != owner(3) || owner(2) != owner(3))
          return Error{where(), "packs tensors of different owners into one bundle"};
        std::memcpy(qb, q, sizeof(float) * std::size_t(nq));
        std::memcpy(qb + nq, dout, sizeof(float) * std::size_t(nq));
        std::memcpy(qb + 2 * nq, out + nq, sizeof(float) * std::size_t(ss.lse_elems()));
        bundle_delta(shape_, T, dout, out, qb + 2 * nq + ss.lse_elems());
        return {};
      }
      const BufKind k = plan_.buffer(op.buf[0]).kind;
      CHARM_RT_ARG(src, 0, k);
      CHARM_RT_ARG(dst, 1, k);
      std::memcpy(dst, src, sizeof(float) * std::size_t(ss.elems(k)));
      return {};
    }
    case OpKind::Send:
    case OpKind::Recv: break;
  }
#undef CHARM_RT_ARG
  return Error{where(), "not a local op"};
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
      auto it = std::find(w->ops.begin(), w->ops.end(), at);
      const auto& first = plan_.op(at);
      for (; it != w->ops.end(); ++it) {
        const auto& op = plan_.op(*it);
        if (*it != at && !(is_comm(first) && first.group != ir::kNone && is_comm(op) && op.group == first.group)) break;
        for (OpId d : plan_.deps(*it))
          if (op_done_[std::size_t(d)] == 0 && b.waits_on == at) b.waits_on = d;
      }
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
    if (b == ir::kNone) return Error{fmt::format("rank {}", rank_), fmt::format("the plan names no {} result", ir::to_string(k))};
    if (plan_.buffer(b).kind != k || plan_.buffer(b).owner != rank_)
      return Error{fmt::format("rank {}", rank_), fmt::format("result buffer {} is not this rank's {}", b, ir::to_string(k))};
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
  return o;
}

} // namespace charm::rt
