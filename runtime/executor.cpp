#include "runtime/executor.hpp"

#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <thread>
#include <type_traits>

#include "runtime/reference.hpp"
#include "runtime/stall.hpp"
#include "runtime/thread_transport.hpp"

namespace charm::rt {

using Clock = std::chrono::steady_clock;

BufferStore::FillInput input_filler(const ir::Plan& plan, const GlobalTensors& in) {
  return [&plan, &in](const ir::Buffer& b, std::span<float> dst) -> Status {
    const auto& w = plan.workload;
    const auto pos = token_positions(w, b.owner, plan.ranks);
    const ShardShape ss = ShardShape::of(w, plan.ranks);
    auto need = [&](const std::vector<float>& t, const char* name) -> Status {
      if (t.empty()) return Error{"inputs", fmt::format("the plan reads {} as an input, none was given", name)};
      return {};
    };
    switch (b.kind) {
    case ir::BufKind::Q:
      if (auto s = need(in.q, "Q"); !s) return s;
      gather_tokens(w, pos, w.heads, in.q, dst);
      return {};
    case ir::BufKind::Kv:
      if (auto s = need(in.k, "K"); !s) return s;
      gather_tokens(w, pos, w.kv_heads, in.k, dst.first(std::size_t(ss.kv_elems())));
      gather_tokens(w, pos, w.kv_heads, in.v, dst.subspan(std::size_t(ss.kv_elems())));
      return {};
    case ir::BufKind::Dout:
      if (auto s = need(in.dout, "dO"); !s) return s;
      gather_tokens(w, pos, w.heads, in.dout, dst);
      return {};
    case ir::BufKind::Out:
      if (auto s = need(in.out, "O"); !s) return s;
      if (auto s = need(in.lse, "LSE"); !s) return s;
      gather_tokens(w, pos, w.heads, in.out, dst.first(std::size_t(ss.q_elems())));
      gather_lse(w, pos, in.lse, dst.subspan(std::size_t(ss.q_elems())));
      return {};
    default:
      return Error{"plan", fmt::format("a {} buffer cannot be an input", ir::to_string(b.kind))};
    }
  };
}

namespace {

/// Whether the Send/Recv `id` has a matching op anywhere in the plan.
bool has_counterpart(const ir::Plan& plan, ir::OpId id) {
  const auto& op = plan.op(id);
  const auto want = op.kind == ir::OpKind::Send ? ir::OpKind::Recv : ir::OpKind::Send;
  for (const auto& o : plan.ops())
    if (o.kind == want && o.rank == op.peer && o.peer == op.rank && o.stream == op.stream && o.tag == op.tag)
      return true;
  return false;
}

/// The blocked ops as a stall report weighs them (stall_root_cause).
std::vector<WaitingOp> waiting_ops(const ir::Plan& plan, const std::vector<BlockedOp>& blocked) {
  std::vector<WaitingOp> waiting;
  for (const auto& b : blocked) waiting.push_back({b.in_transport, b.in_transport && !has_counterpart(plan, b.op)});
  return waiting;
}

/// Whether the op that explains the stall best is a transfer the plan gives no counterpart.
bool orphan_at_root(const ir::Plan& plan, const std::vector<BlockedOp>& blocked) {
  const std::vector<WaitingOp> waiting = waiting_ops(plan, blocked);
  const std::size_t at = stall_root_cause(waiting);
  return at < waiting.size() && waiting[at].orphan;
}

std::string stall_message(const ir::Plan& plan, const std::vector<BlockedOp>& blocked, double seconds) {
  const std::vector<WaitingOp> waiting = waiting_ops(plan, blocked);
  const std::size_t at = stall_root_cause(waiting);
  if (at == blocked.size()) return fmt::format("stall: no progress for {:.1f} s, but no op is waiting", seconds);
  const BlockedOp* pick = &blocked[at];
  const bool orphan = waiting[at].orphan;
  std::string what;
  if (pick->in_transport)
    what = fmt::format("op {} '{}' ({})", pick->op, ir::op_label(plan, pick->op),
                       orphan ? "the plan has no matching peer op" : "its peer has not matched it");
  else
    what = fmt::format("op {} '{}', which waits for op {} '{}'", pick->op, ir::op_label(plan, pick->op), pick->waits_on,
                       ir::op_label(plan, pick->waits_on));
  return fmt::format("stall: no progress for {:.1f} s: rank {} stream {} waits on {}; {} worker(s) blocked", seconds,
                     pick->rank, ir::to_string(pick->stream), what, blocked.size());
}

/// What this process's executors show at one look.
struct LocalState {
  bool all_done = true, running = false;
  std::uint64_t progress = 0;  // ops completed, summed
  std::optional<Error> error;  // the first executor's failure
};

LocalState sample(std::span<RankExecutor* const> execs) {
  LocalState st;
  for (auto* e : execs) {
    st.all_done = st.all_done && e->done();
    st.progress += e->progress();
    st.running = st.running || e->running();
    if (auto x = e->error(); x && !st.error) st.error = std::move(x);
  }
  return st;
}

std::vector<BlockedOp> blocked_ops(std::span<RankExecutor* const> execs) {
  std::vector<BlockedOp> blocked;
  for (auto* e : execs) {
    auto b = e->blocked();
    blocked.insert(blocked.end(), b.begin(), b.end());
  }
  return blocked;
}

void stop_and_join(std::span<RankExecutor* const> execs) {
  for (auto* e : execs) e->stop();
  for (auto* e : execs) e->join();
}

/// The stall report of one process of a job: what waits here, and whether the others still answer.
std::string job_stall_message(const ir::Plan& plan, std::span<RankExecutor* const> execs,
                              const std::vector<BlockedOp>& blocked, double timeout_s, double silent_s,
                              double quiet_s) {
  std::string msg =
      blocked.empty()
          ? fmt::format("stall: no progress for {:.1f} s: rank {} finished its ops and waits for the others", timeout_s,
                        execs.empty() ? -1 : execs.front()->rank())
          : stall_message(plan, blocked, timeout_s);
  if (silent_s > timeout_s)
    msg += fmt::format(
        "; the other ranks have not answered for {:.1f} s, this one last made progress {:.1f} s ago (a peer is "
        "stopped, dead or stuck outside the plan)",
        silent_s, quiet_s);
  return msg;
}

}  // namespace

Status drive(std::span<RankExecutor* const> execs, const ir::Plan& plan, const RunOptions& opt) {
  for (auto* e : execs) e->start();
  std::uint64_t last = ~0ull;
  auto last_change = Clock::now();
  bool deferred = false;
  Status result;
  for (;;) {
    LocalState st = sample(execs);
    if (st.error) {
      result = *st.error;
      break;
    }
    if (st.all_done) break;
    const auto now = Clock::now();
    // A stall is time in which no op completed, none ran, and some op waits. One
    // compute may take longer than the timeout; while it runs, nothing stalls.
    if (st.progress != last || st.running) {
      last = st.progress;
      last_change = now;
    } else if (opt.timeout_s > 0 && std::chrono::duration<double>(now - last_change).count() > opt.timeout_s) {
      const std::vector<BlockedOp> blocked = blocked_ops(execs);
      if (blocked.empty()) {  // between two ops, not waiting on anything: look again
        last_change = now;
        continue;
      }
      const bool orphan = orphan_at_root(plan, blocked);
      // With one rank per process, a rank that only waits behind another gives that
      // rank's watchdog a head start, so the root cause is what gets reported.
      if (!orphan && execs.size() < std::size_t(plan.ranks) && !deferred) {
        deferred = true;
        last_change = now + std::chrono::milliseconds(static_cast<long>(1000 * std::min(opt.timeout_s, 2.0)));
        continue;
      }
      result = Error{"", stall_message(plan, blocked, opt.timeout_s)};
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stop_and_join(execs);
  return result;
}

DriveOutcome drive_job(std::span<RankExecutor* const> execs, const ir::Plan& plan, const RunOptions& opt) {
  CHARM_ASSERT(opt.monitor != nullptr, "drive_job needs a JobMonitor");
  JobMonitor& mon = *opt.monitor;
  for (auto* e : execs) e->start();
  std::optional<Error> local;  // this process's first failure
  std::uint64_t ticks = 0, last_local = ~0ull, last_job = ~0ull;
  auto last_change = Clock::now();
  auto last_local_change = last_change;  // this process's own last progress (a running compute counts)
  bool deferred = false;
  DriveOutcome out;
  for (;;) {
    LocalState st = sample(execs);
    if (st.error && !local) {
      local = std::move(st.error);
      for (auto* f : execs) f->stop();  // the job learns of it at the next round
    }
    if (st.running) ++ticks;
    const auto now = Clock::now();
    if (st.progress != last_local || st.running) {
      last_local = st.progress;
      last_change = last_local_change = now;
    }
    const JobState mine{st.progress + ticks, (st.all_done || local) ? 1u : 0u, local ? 1u : 0u};
    auto job = mon.poll(mine);
    if (!job) {  // MPI itself failed: no agreement possible
      out.status = job.error();
      break;
    }
    if (*job) {
      const JobState& j = **job;
      if (j.failed > 0) {  // every process sees this round: all leave here
        out.agreed = true;
        out.status = local ? *local : Error{"", "another rank failed", ErrorKind::PeerFailed};
        break;
      }
      if (j.done >= mon.processes()) break;
      if (j.progress != last_job) {
        last_job = j.progress;
        last_change = now;
      }
    }
    if (opt.timeout_s > 0 && std::chrono::duration<double>(now - last_change).count() > opt.timeout_s) {
      const std::vector<BlockedOp> blocked = blocked_ops(execs);
      if (blocked.empty() && !st.all_done && !local) {  // between two ops: look again
        last_change = now;
        continue;
      }
      const bool orphan = orphan_at_root(plan, blocked);
      // A rank that only waits behind another gives the rank whose op has no peer a short
      // head start (every watchdog of the job sees the same rounds), so the root cause is
      // what gets reported first.
      if (!orphan && !deferred) {
        deferred = true;
        const double head_start = std::min(opt.timeout_s / 4, 0.5);
        last_change = now - std::chrono::milliseconds(static_cast<long>(1000 * (opt.timeout_s - head_start)));
        continue;
      }
      out.status = Error{"", job_stall_message(plan, execs, blocked, opt.timeout_s, mon.waiting_s(),
                                               std::chrono::duration<double>(now - last_local_change).count())};
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stop_and_join(execs);
  return out;
}

namespace {
struct Fnv {
  std::uint64_t h = 1469598103934665603ull;
  void bytes(const void* p, std::size_t n) {
    const auto* c = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 1099511628211ull;
  }
  template <class T>
  void add(T v) {
    static_assert(std::is_arithmetic_v<T> || std::is_enum_v<T>);
    bytes(&v, sizeof v);
  }
  void add(const std::string& s) {
    add(s.size());
    bytes(s.data(), s.size());
  }
};
}  // namespace

std::uint64_t plan_fingerprint(const ir::Plan& plan) {
  Fnv f;
  f.add(plan.algo);
  for (auto v : {std::int64_t(plan.ranks), std::int64_t(plan.domains), std::int64_t(plan.parts)}) f.add(v);
  const auto& w = plan.workload;
  for (auto v : {w.batch, w.seq, w.heads, w.kv_heads, w.head_dim}) f.add(v);
  f.add(w.dtype);
  f.add(w.causal);
  for (const auto len : w.documents) f.add(len);
  f.add(w.window);
  f.add(w.layout);
  for (const auto& chunks : w.chunk_map)
    for (const auto& c : chunks) f.add(c.begin), f.add(c.count);
  f.add(w.pass);
  f.add(plan.size());
  for (ir::OpId id = 0; id < static_cast<ir::OpId>(plan.size()); ++id) {
    const auto& o = plan.op(id);  // field by field: the struct's padding is not data
    f.add(o.rank), f.add(o.stream), f.add(o.kind), f.add(o.phase), f.add(o.mask), f.add(o.q_owner), f.add(o.kv_owner);
    f.add(o.peer), f.add(o.tag), f.add(o.group);
    for (auto b : o.buf) f.add(b);
    f.add(o.bytes);
    const auto d = plan.deps(id);
    f.add(d.size());
    for (auto x : d) f.add(x);
  }
  f.add(plan.buffers().size());
  for (const auto& b : plan.buffers()) {
    f.add(b.rank), f.add(b.kind), f.add(b.owner), f.add(b.init), f.add(b.bytes), f.add(b.owners);
    f.add(b.head_begin), f.add(b.heads), f.add(b.part_begin), f.add(b.parts), f.add(b.parent), f.add(b.reuse);
  }
  for (const auto& r : plan.results()) f.add(r.out), f.add(r.dq), f.add(r.dkv);
  return f.h;
}

void assemble(const ir::Plan& plan, ir::RankId rank, const RankOutputs& shard, GlobalTensors& g) {
  const auto& w = plan.workload;
  const auto pos = token_positions(w, rank, plan.ranks);
  const auto nq = std::size_t(w.batch * w.seq * w.heads * w.head_dim);
  const auto nkv = std::size_t(w.batch * w.seq * w.kv_heads * w.head_dim);
  auto put = [&](const std::vector<float>& src, std::vector<float>& dst, std::size_t n, std::int64_t heads) {
    if (src.empty()) return;
    dst.resize(n);
    scatter_tokens(w, pos, heads, src, dst);
  };
  put(shard.out, g.out, nq, w.heads);
  put(shard.dq, g.dq, nq, w.heads);
  put(shard.dk, g.dk, nkv, w.kv_heads);
  put(shard.dv, g.dv, nkv, w.kv_heads);
  if (!shard.lse.empty()) {
    g.lse.resize(std::size_t(w.batch * w.heads * w.seq));
    scatter_lse(w, pos, shard.lse, g.lse);
  }
}

Expected<RunResult> run_threads(const ir::ValidatedPlan& plan, const GlobalTensors& in, const RunOptions& opt) {
  return run_with_faults(plan, opt.faults, [&](const ir::Plan& p) { return run_threads_unvalidated(p, in, opt); });
}

Expected<RunResult> run_threads_unvalidated(const ir::Plan& plan, const GlobalTensors& in, const RunOptions& opt) {
  CHARM_ASSERT(!plan.symmetry.active(), "executors run full plans, not one class of ranks");
  ThreadTransport transport;
  const ir::PlanIndex index(plan);  // one for every rank; outlives the executors (declared before them)
  std::vector<std::unique_ptr<RankExecutor>> execs;
  std::vector<RankExecutor*> ptrs;
  const auto fill = input_filler(plan, in);
  for (int r = 0; r < plan.ranks; ++r) {
    execs.push_back(std::make_unique<RankExecutor>(plan, index, r, transport, fill));
    ptrs.push_back(execs.back().get());
  }
  RunResult res;
  const auto t0 = Clock::now();
  if (opt.timeline) {
    res.timeline = trace::Timeline::zeros(plan);
    for (auto* e : ptrs) e->record_times(&res.timeline, t0);
  }
  if (auto s = drive(ptrs, plan, opt); !s) return s.error();
  res.time_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  res.timeline.makespan_s = res.time_ms * 1e-3;
  for (auto* e : ptrs) {
    auto o = e->outputs();
    if (!o) return o.error();
    assemble(plan, e->rank(), *o, res.out);
    res.peak_bytes = std::max(res.peak_bytes, e->peak_bytes());
  }
  return res;
}

GlobalTensors plan_inputs(const ir::Workload& w, std::uint64_t seed) {
  GlobalTensors g = make_inputs(w, seed, 0, /*with_dout=*/w.pass != ir::PassKind::Fwd);
  if (w.pass == ir::PassKind::Bwd) {
    const Reference ref = reference_attention(w, g, false);
    g.out.assign(ref.out.begin(), ref.out.end());
    g.lse.assign(ref.lse.begin(), ref.lse.end());
  }
  return g;
}

}  // namespace charm::rt
