#include "sim/evaluate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <utility>

#include "scheduler/planners/algorithms.hpp"
#include "sim/fair_share_network.hpp"

namespace charm::sim {

int default_domains(const topo::Topology& t) { return std::max(1, t.domains()); }

int default_domains(const topo::Topology& t, int ranks) {
  if (ranks <= 0 || ranks >= t.num_gpus()) return default_domains(t);
  return t.domain_of(ranks - 1) + 1;
}

int default_domains(const topo::Topology& t, std::span<const std::int32_t> gpus, int group_ranks) {
  const std::vector<int> domain_of = t.gpu_domains();
  std::vector<int> seen;
  for (int r = 0; r < group_ranks && r < int(gpus.size()); ++r)
    seen.push_back(domain_of[std::size_t(gpus[std::size_t(r)])]);
  std::sort(seen.begin(), seen.end());
  return std::max<int>(1, int(std::unique(seen.begin(), seen.end()) - seen.begin()));
}

ComputeModel compute_model_for(const topo::Topology& t, const ir::Workload& w) {
  return ComputeModel::from_topology(t, w.dtype);
}

namespace {
/// Algorithms whose backward pass begins before the forward ends (pass both), so the sum of the two passes'
/// closed forms is not the run's time.
bool passes_overlap(const std::string& algo) {
  const sched::Algorithm* row = sched::find_algorithm(algo);
  return row != nullptr && row->passes_overlap;
}
}  // namespace

ClosedForm closed_form_on(const std::string& algo, const topo::Topology& t, int ranks, const ir::Workload& w,
                          const ComputeModel& model) {
  double bw = 1e300, lat = 0;
  for (int r = 0; r < ranks && ranks > 1; ++r) {
    const int d = (r + 1) % ranks;
    // The rate the simulator gives a lone flow there (per-flow and injection limits included), not the wire's.
    if (const double f = route_flow_gbps(t, r, d); f < bw) {
      bw = f;
      lat = t.route_latency_us(r, d);
    }
  }
  if (ranks == 1) bw = 1;
  ClosedForm total;
  auto add = [&](ir::Phase ph) {
    const auto f = closed_form(algo, ranks, ph, uniform_step_costs(w, ranks, ph, bw, lat, model));
    total.available = f.available;
    total.time_s += f.time_s;
    total.exposed_s += f.exposed_s;
    total.paper_time_s += f.paper_time_s;
    total.paper_exposed_s += f.paper_exposed_s;
    if (total.ccr == 0) total.ccr = f.ccr;
  };
  if (w.pass != ir::PassKind::Bwd) add(ir::Phase::Fwd);
  if (w.pass != ir::PassKind::Fwd) add(ir::Phase::Bwd);
  if (w.layout == ir::Layout::Balanced) {
    total.applies = false;
    total.why_not = "the closed forms send every shard all the way round and count every block unmasked; on the "
                    "balanced layout a shard goes only as far as its last reader, and the documents skip and shrink "
                    "blocks";
  } else if (w.causal) {
    total.applies = false;
    total.why_not = "the closed forms count every block unmasked; the causal mask skips and shrinks blocks";
  } else if (!t.uniform) {
    total.applies = false;
    total.why_not = "a uniform link stands in for the slowest ring hop; contention, the other links and the GPU's "
                    "efficiency curve are not in the form";
  } else if (model.hbm_bytes_per_s > 0) {
    total.applies = false;
    total.why_not = "memory-bound work (merges, accumulations, copies, result updates) takes time at the HBM rate "
                    "(--hbm-gbps); the closed forms count it free";
  } else if (w.pass == ir::PassKind::Both && passes_overlap(algo)) {
    total.applies = false;
    total.why_not = fmt::format("{}'s backward starts while its forward's last steps still run; the closed forms add "
                                "the two passes' times",
                                algo);
  }
  return total;
}

ir::RankSymmetry simulation_symmetry(const sched::CheckedRequest& req, const topo::Topology& t) {
  const auto s = sched::target_symmetry(req, run_target(t, req->workload.dtype));
  return s ? *s : ir::RankSymmetry{};
}

ir::RankSymmetry simulation_symmetry(const sched::PlanRequest& req, const topo::Topology& t) {
  const auto checked = sched::CheckedRequest::check(req);
  return checked ? simulation_symmetry(*checked, t) : ir::RankSymmetry{};
}

Expected<Evaluation> evaluate_plan(ir::Plan plan, const topo::Topology& t, SimOptions options) {
  const auto model = compute_model_for(t, plan.workload);
  auto res = simulate(plan, t, model, options);
  if (!res) return res.error();
  Evaluation e{std::move(plan), std::move(res).value(), {}, {}, {}, {}};
  e.summary = summarize(e.result);
  e.formula = closed_form_on(e.plan.algo, t, e.plan.group_ranks(), e.plan.workload, model);
  if (e.plan.groups > 1 && e.formula.applies) {
    e.formula.applies = false;
    e.formula.why_not =
        fmt::format("{} context-parallel groups share the links; the closed forms describe one alone", e.plan.groups);
  }
  return e;
}

Expected<Evaluation> evaluate(const sched::PlanRequest& req, const topo::Topology& t, bool by_symmetry,
                              SimOptions options) {
  const auto checked = sched::CheckedRequest::check(req);
  if (!checked) return checked.error();
  const auto q = sched::Quotient::of(*checked, by_symmetry ? simulation_symmetry(*checked, t) : ir::RankSymmetry{});
  if (!q) return q.error();
  auto plan = sched::make_plan(*checked, *q);
  if (!plan) return plan.error();
  return evaluate_plan(std::move(plan).value(), t, options);
}

namespace {
/// Whether `plan`, planned for `built` with `quotient`, serves `req` once scaled to its batch.
bool serves(const sched::PlanRequest& built, const ir::RankSymmetry& quotient, const ir::Plan& plan,
            const sched::PlanRequest& req, const ir::RankSymmetry& q) {
  if (built.algo != req.algo || built.ranks != req.ranks || built.domains != req.domains || !(quotient == q))
    return false;
  ir::Workload w = req.workload;
  w.batch = built.workload.batch;
  return w == built.workload && plan.can_scale_batch(req.workload.batch);
}
}  // namespace

Expected<Summary> PlanReuse::evaluate(const sched::PlanRequest& req, const topo::Topology& t, SimOptions options) {
  const auto checked = sched::CheckedRequest::check(req);
  if (!checked) return checked.error();
  const sched::PlanRequest& r = checked->get();
  const ir::RankSymmetry q = simulation_symmetry(*checked, t);
  // One entry per algorithm and pass: the one this request would replace.
  auto slot = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) {
    return e.req.algo == r.algo && e.req.workload.pass == r.workload.pass;
  });
  ir::Plan plan;
  std::optional<ir::PlanIndex> index;
  if (slot != entries_.end() && serves(slot->req, slot->quotient, slot->plan, r, q)) {
    plan = std::move(slot->plan);
    plan.scale_batch(r.workload.batch);
    index = std::move(slot->index);
    ++reused_;
  } else {
    const auto quotient = sched::Quotient::of(*checked, q);
    if (!quotient) return quotient.error();
    auto built = sched::make_plan(*checked, *quotient);
    if (!built) return built.error();
    plan = std::move(built).value();
    index.emplace(plan, nullptr, ir::PlanIndex::Parts::Lean);  // what the simulator walks
    ++built_;
  }
  if (slot == entries_.end()) slot = entries_.insert(entries_.end(), Entry{});
  options.index = &*index;
  auto e = evaluate_plan(std::move(plan), t, options);
  if (!e) {
    entries_.erase(slot);
    return e.error();
  }
  slot->req = r;
  slot->quotient = q;
  slot->plan = std::move(e->plan);
  slot->index = std::move(index);
  return e->summary;
}

bool SimulationMemo::Key::operator==(const Key& o) const {
  return topology == o.topology && req.algo == o.req.algo && req.ranks == o.req.ranks && req.domains == o.req.domains &&
         req.workload == o.req.workload;
}

std::size_t SimulationMemo::Hash::operator()(const Key& k) const {
  const ir::Workload& w = k.req.workload;
  std::size_t h = std::hash<std::string>{}(k.req.algo);
  for (const std::uint64_t v :
       {std::uint64_t(k.topology), std::uint64_t(k.req.ranks), std::uint64_t(k.req.domains), std::uint64_t(w.batch),
        std::uint64_t(w.seq), std::uint64_t(w.heads), std::uint64_t(w.kv_heads), std::uint64_t(w.head_dim),
        std::uint64_t(w.pass), std::uint64_t(w.layout), std::uint64_t(w.causal)})
    h = (h ^ v) * 0x100000001B3ull;
  return h;
}

std::optional<SimulationMemo::Key> SimulationMemo::key(const sched::PlanRequest& req, std::size_t topology) {
  const sched::Algorithm* a = sched::find_algorithm(req.algo);
  if (a == nullptr || a->heads != sched::Algorithm::HeadSplit::None || req.workload.batch < 1) return std::nullopt;
  Key k{topology, req};
  ir::Workload& w = k.req.workload;
  const int shift = std::countr_zero(std::uint64_t(w.batch));
  w.batch >>= shift;
  w.heads <<= shift;
  w.kv_heads <<= shift;
  return k;
}

std::optional<Summary> SimulationMemo::find(const Key& k) const {
  const std::lock_guard lock(mu_);
  const auto it = done_.find(k);
  if (it == done_.end()) return std::nullopt;
  return it->second;
}

void SimulationMemo::insert(const Key& k, const Summary& s) {
  const std::lock_guard lock(mu_);
  done_.emplace(k, s);
}

Expected<int> deployment_copies(const sched::Layout& l, const topo::Topology& t) {
  return sched::deployment_copies(l, block_symmetry(t));
}

sched::RunTarget run_target(const topo::Topology& t, ir::DType dtype) {
  return {ComputeModel::from_topology(t, dtype).prices_zigzag_halves_alike(), block_symmetry(t)};
}

Expected<LoweredRun> lower_deployment(const ir::Plan& group, const sched::Layout& l, int copies,
                                      const topo::Topology& t, const ir::Workload* block_model) {
  LoweredRun run;
  if (block_model != nullptr) {
    ir::Workload model = *block_model;
    model.pass = group.workload.pass;
    auto block = lower_tp_block(model, l, t);
    if (!block) return block.error();
    run.tp_block = std::move(block).value();
  }
  run.plan = sched::place_groups(group, l, copies);
  return run;
}

Expected<Evaluation> evaluate_lowered(LoweredRun run, const topo::Topology& t, SimOptions options) {
  auto e = evaluate_plan(std::move(run.plan), t, std::move(options));
  if (!e || !run.tp_block) return e;
  e->tp_block = tp_block_cost(*run.tp_block, t);
  e->summary.time_s += e->tp_block->total_s();
  return e;
}

Expected<Evaluation> evaluate_deployment(const sched::CheckedRequest& group_req, const sched::Layout& l, int copies,
                                         const topo::Topology& t, const ir::Workload* block_model) {
  const auto group = sched::make_plan(group_req);
  if (!group) return group.error();
  auto run = lower_deployment(*group, l, copies, t, block_model);
  if (!run) return run.error();
  return evaluate_lowered(std::move(run).value(), t);
}

Expected<Evaluation> evaluate_deployment(const sched::PlanRequest& group_req, const sched::Layout& l, int copies,
                                         const topo::Topology& t, const ir::Workload* block_model) {
  const auto checked = sched::CheckedRequest::check(group_req);
  if (!checked) return checked.error();
  return evaluate_deployment(*checked, l, copies, t, block_model);
}

}  // namespace charm::sim
