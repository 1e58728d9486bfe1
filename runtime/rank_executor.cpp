#include "runtime/rank_executor.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <tuple>

#include "runtime/global_tensors.hpp"
#include "runtime/region_copy.hpp"

namespace charm::rt {

using ir::BufKind;
using ir::OpId;
using ir::is_comm;
using ir::OpKind;

namespace {

constexpr auto kPoll = std::chrono::milliseconds(20);

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
  // A transfer moves a whole buffer: each receive's sender must hold the same kind over the same region.
  std::map<std::tuple<int, ir::RankId, std::int32_t>, OpId> sends;  // sends to this rank by (stream, src, tag)
  for (OpId id = 0; id < static_cast<OpId>(plan.size()); ++id) {
    const auto& op = plan.op(id);
    if (op.kind == OpKind::Send && op.peer == rank) sends.emplace(std::make_tuple(int(op.stream), op.rank, op.tag), id);
  }
  auto valid = [&](ir::BufferId b) { return b >= 0 && std::size_t(b) < plan.buffers().size(); };
  for (OpId id = 0; id < static_cast<OpId>(plan.size()); ++id) {
    const auto& op = plan.op(id);
    if (op.kind != OpKind::Recv || op.rank != rank) continue;
    auto it = sends.find(std::make_tuple(int(op.stream), op.peer, op.tag));
    if (it == sends.end()) continue;  // no sender: the watchdog reports it
    const ir::BufferId src = plan.op(it->second).buf[0], dst = op.buf[0];
    if (!valid(src) || !valid(dst)) continue;  // the buffer store reports it
    if (plan.buffer(src).kind != plan.buffer(dst).kind || plan.region(src) != plan.region(dst))
      pair_errors_.emplace(id, fmt::format("receives {} (op {} of rank {}) into {}: a transfer needs the same kind and "
                                           "region on both sides",
                                           ir::buffer_label(plan, src), it->second, op.peer, ir::buffer_label(plan, dst)));
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
      std::size_t j = i + 1;
      if (is_comm(first) && first.group != ir::kNone)
        while (j < w.ops.size() && is_comm(plan_.op(w.ops[j])) && plan_.op(w.ops[j]).group == first.group) ++j;
      const std::span<const OpId> members(w.ops.data() + i, j - i);
      w.at.store(w.ops[i]);
      w.state.store(int(State::WaitingDeps));
      if (!wait_deps(members)) return;
      const auto since_t0 = [this] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); };
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
  // receives is the sender's fp32 accumulator rounded, O only (LSE is fp32). The staged
  // copies live until every transfer of the group completed.
  std::vector<std::vector<float>> staged;
  staged.reserve(ops.size());
  const ir::DType dtype = plan_.workload.dtype;
  for (OpId id : ops) {
    const auto& op = plan_.op(id);
    auto where = [&] { return fmt::format("rank {} op {} ({})", rank_, id, ir::op_label(plan_, id)); };
    if (auto e = pair_errors_.find(id); e != pair_errors_.end()) return Error{where(), e->second};
    auto data = store_.get(op.buf[0]);
    if (!data) return Error{where(), data.error().message()};
    std::span<float> payload = *data;
    if (op.kind == OpKind::Send && dtype != ir::DType::FP32 && plan_.buffer(op.buf[0]).kind == BufKind::Out) {
      const RegionLayout& l = store_.layout(op.buf[0]);
      auto& copy = staged.emplace_back(payload.begin(), payload.end());
      const std::int64_t q = l.block.q_elems();
      for (std::int64_t k = 0; k < l.region.owners(); ++k)
        round_all(dtype, std::span<float>(copy).subspan(std::size_t(k * l.block_elems), std::size_t(q)));
      payload = copy;
    }
    Expected<RequestPtr> r = op.kind == OpKind::Send
                                 ? transport_.post_send({op.stream, rank_, op.peer, op.tag}, payload)
                                 : transport_.post_recv({op.stream, op.peer, rank_, op.tag}, payload);
    if (!r) return Error{where(), r.error().message()};
    reqs.push_back(std::move(*r));
  }
  auto done = transport_.wait_all(reqs, [this] { return stop_.load(); });
  if (!done) return Error{fmt::format("rank {} op {} ({})", rank_, ops[0], ir::op_label(plan_, ops[0])), done.error().message()};
  stopped = !*done;
  return {};
}

Status RankExecutor::run_local(OpId id) {
  const ir::Op& op = plan_.op(id);
  auto where = [&] { return fmt::format("rank {} op {} ({})", rank_, id, ir::op_label(plan_, id)); };
  auto label = [&](int i) { return ir::buffer_label(plan_, op.buf[i]); };
  // The buffer in slot i, checked to be of kind `k`, with its region layout.
  struct Arg {
    float* data = nullptr;
    std::int64_t size = 0;
    const RegionLayout* l = nullptr;
    [[nodiscard]] const ir::Region& region() const { return l->region; }
    [[nodiscard]] const ShardShape& block() const { return l->block; }
    /// Owner x's block.
    [[nodiscard]] float* at(ir::RankId x) const { return data + std::int64_t(x - l->region.owner_begin) * l->block_elems; }
  };
  auto arg = [&](int i, BufKind k) -> Expected<Arg> {
    const ir::BufferId b = op.buf[i];
    if (b == ir::kNone) return Error{where(), fmt::format("buffer slot {} is empty", i)};
    if (b < 0 || std::size_t(b) >= plan_.buffers().size())
      return Error{where(), fmt::format("buffer slot {} names buffer {}, which does not exist", i, b)};
    if (plan_.buffer(b).kind != k)
      return Error{where(), fmt::format("buffer slot {} holds {}, expected {}", i, ir::to_string(plan_.buffer(b).kind),
                                        ir::to_string(k))};
    auto data = store_.get(b);
    if (!data) return Error{where(), data.error().message()};
    return Arg{data->data(), std::int64_t(data->size()), &store_.layout(b)};
  };
  auto same_region = [&](const Arg& a, int i, const Arg& b, int j, const char* what) -> Status {
    if (a.region() == b.region()) return {};
    return Error{where(), fmt::format("{}: {} and {} hold different regions", what, label(i), label(j))};
  };
  auto same_heads = [&](const Arg& a, int i, const Arg& b, int j) -> Status {
    if (a.region().head_begin == b.region().head_begin && a.region().head_end == b.region().head_end) return {};
    return Error{where(), fmt::format("{} and {} hold different kv heads", label(i), label(j))};
  };
  // The global positions of owner x's tokens in region r (its parts of x's shard).
  const std::int64_t tp = plan_.workload.seq / plan_.ranks / plan_.parts;
  auto positions = [&](ir::RankId x, const ir::Region& r) {
    return Positions(positions_[std::size_t(x)]).subspan(std::size_t(tp * r.part_begin), std::size_t(tp * r.parts()));
  };
  // Positions ascend, so a causal block has a visible pair iff its first key is not after its last query.
  auto visible = [&](Positions qp, Positions kp) {
    return !qp.empty() && !kp.empty() && (!shape_.causal || kp.front() <= qp.back());
  };
  auto attn = [&](const ShardShape& b) {
    AttnShape a = shape_;
    a.heads = b.heads;
    a.kv_heads = b.kv_heads;
    return a;
  };
#define CHARM_RT_ARG(var, i, kind)      \
  auto var##_e = arg(i, kind);          \
  if (!var##_e) return var##_e.error(); \
  const Arg& var = *var##_e
#define CHARM_RT_CHECK(expr) \
  if (auto s_ = (expr); !s_) return s_

  switch (op.kind) {
    case OpKind::Compute: {
      const bool fwd = op.phase == ir::Phase::Fwd;
      CHARM_RT_ARG(q, 0, fwd ? BufKind::Q : BufKind::QBundle);
      CHARM_RT_ARG(kv, 1, BufKind::Kv);
      CHARM_RT_ARG(acc, 2, fwd ? BufKind::Out : BufKind::Dq);
      const ir::Region &rq = q.region(), &rk = kv.region();
      if (rq.owner_begin != op.q_owner || rk.owner_begin != op.kv_owner)
        return Error{where(), fmt::format("op names Q{}*KV{} but its buffers hold Q{}, KV{}", op.q_owner, op.kv_owner,
                                          rq.owner_begin, rk.owner_begin)};
      CHARM_RT_CHECK(same_heads(q, 0, kv, 1));
      CHARM_RT_CHECK(same_region(q, 0, acc, 2, fwd ? "accumulates into another output" : "dQ goes to another region"));
      const AttnShape a = attn(q.block());
      const auto nq = q.block().q_elems(), nl = q.block().lse_elems(), nkv = kv.block().kv_elems();
      if (fwd) {
        auto& part = partial_scratch();
        part.resize(std::size_t(nq + nl));
        for (ir::RankId x = rq.owner_begin; x < rq.owner_end; ++x)
          for (ir::RankId y = rk.owner_begin; y < rk.owner_end; ++y) {
            const Positions qp = positions(x, rq), kp = positions(y, rk);
            if (!visible(qp, kp)) continue;  // an empty partial would change nothing
            attention_fwd_block(a, q.at(x), qp, kv.at(y), kv.at(y) + nkv, kp, part.data(), part.data() + nq);
            merge_out(a, q.block().tokens, part.data(), part.data() + nq, acc.at(x), acc.at(x) + nq);
          }
        return {};
      }
      CHARM_RT_ARG(dkv, 3, BufKind::Dkv);
      CHARM_RT_CHECK(same_region(kv, 1, dkv, 3, "dKV goes to another region"));
      for (ir::RankId x = rq.owner_begin; x < rq.owner_end; ++x)
        for (ir::RankId y = rk.owner_begin; y < rk.owner_end; ++y) {
          const Positions qp = positions(x, rq), kp = positions(y, rk);
          if (!visible(qp, kp)) continue;  // all-zero gradients
          const float* qb = q.at(x);
          attention_bwd_block(a, qb, qb + nq, qb + 2 * nq, qb + 2 * nq + nl, qp, kv.at(y), kv.at(y) + nkv, kp,
                              acc.at(x), dkv.at(y), dkv.at(y) + nkv);
        }
      return {};
    }
    case OpKind::Merge: {
      CHARM_RT_ARG(part, 0, BufKind::Out);
      CHARM_RT_ARG(acc, 1, BufKind::Out);
      CHARM_RT_CHECK(same_region(part, 0, acc, 1, "merges a partial into another output"));
      const AttnShape a = attn(acc.block());
      const auto nq = acc.block().q_elems();
      for (ir::RankId x = acc.region().owner_begin; x < acc.region().owner_end; ++x)
        merge_out(a, acc.block().tokens, part.at(x), part.at(x) + nq, acc.at(x), acc.at(x) + nq);
      return {};
    }
    case OpKind::Accumulate: {
      if (op.buf[0] < 0 || std::size_t(op.buf[0]) >= plan_.buffers().size()) return Error{where(), "buffer slot 0 is empty"};
      const BufKind k = plan_.buffer(op.buf[0]).kind;
      if (k != BufKind::Dq && k != BufKind::Dkv) return Error{where(), "accumulates a buffer that is not a gradient"};
      CHARM_RT_ARG(part, 0, k);
      CHARM_RT_ARG(acc, 1, k);
      CHARM_RT_CHECK(same_region(part, 0, acc, 1, "adds a gradient to another region"));
      for (std::int64_t i = 0; i < acc.size; ++i) acc.data[i] += part.data[i];
      return {};
    }
    case OpKind::Copy: {
      if (op.buf[3] != ir::kNone) {
        CHARM_RT_ARG(q, 0, BufKind::Q);
        CHARM_RT_ARG(dout, 1, BufKind::Dout);
        CHARM_RT_ARG(out, 2, BufKind::Out);
        CHARM_RT_ARG(qb, 3, BufKind::QBundle);
        for (int i = 0; i < 3; ++i) {
          const Arg& x = i == 0 ? q : i == 1 ? dout : out;
          CHARM_RT_CHECK(same_region(x, i, qb, 3, "packs tensors of another region into the bundle"));
        }
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
      if (op.buf[0] < 0 || std::size_t(op.buf[0]) >= plan_.buffers().size()) return Error{where(), "buffer slot 0 is empty"};
      const BufKind k = plan_.buffer(op.buf[0]).kind;
      CHARM_RT_ARG(src, 0, k);
      CHARM_RT_ARG(dst, 1, k);
      if (!src.region().contains(dst.region()) && !dst.region().contains(src.region()))
        return Error{where(), fmt::format("copies between {} and {}, where neither region contains the other", label(0),
                                          label(1))};
      auto s = copy_region(plan_.workload, plan_.ranks, plan_.parts, k, src.region(),
                           {src.data, std::size_t(src.size)}, dst.region(), {dst.data, std::size_t(dst.size)});
      if (!s) return Error{where(), s.error().message()};
      return {};
    }
    case OpKind::Send:
    case OpKind::Recv: break;
  }
#undef CHARM_RT_CHECK
#undef CHARM_RT_ARG
  return Error{where(), "not a local op"};
}

bool RankExecutor::running() const {
  return std::any_of(workers_.begin(), workers_.end(), [](const auto& w) { return State(w->state.load()) == State::Running; });
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
    if (b < 0 || std::size_t(b) >= plan_.buffers().size() || plan_.buffer(b).kind != k || plan_.buffer(b).owner != rank_)
      return Error{fmt::format("rank {}", rank_), fmt::format("result buffer {} is not this rank's {}", b, ir::to_string(k))};
    if (plan_.buffer(b).parent != ir::kNone || plan_.region(b) != ir::shard_region(rank_, plan_.workload, plan_.parts))
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

} // namespace charm::rt
