#include "sim/sweep.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <new>

#include "scheduler/ir/plan_io.hpp"
#include "scheduler/planners/algorithms.hpp"
#include "scheduler/planners/planners.hpp"
#include "sim/evaluate.hpp"
#include "sim/explain.hpp"
#include "support/csv_field.hpp"
#include "support/parallel_for.hpp"

namespace charm::sim {

namespace {

std::size_t kv_count(const SweepSpec& s) { return s.kv_heads.empty() ? 1 : s.kv_heads.size(); }
/// An axis's values in the configuration count (an empty axis is one value: not swept).
std::size_t count(const std::vector<int>& axis) { return axis.empty() ? 1 : axis.size(); }

/// Where a configuration runs: one CP group on every GPU, or every CP group of a CP x TP layout.
struct Placement {
  std::optional<sched::Layout> layout;
  int ranks = 0, domains = 0;
  int copies = 1;  // CP groups simulated (a layout's quotient where the topology has one)
  std::string refusal;
};

Placement placement_of(const SweepConfig& c, const topo::Topology& t) {
  Placement p;
  const int gpus = t.num_gpus();
  if (c.tp > 0 || c.cp > 0) {
    const int tp = std::max(c.tp, 1), cp = c.cp > 0 ? c.cp : gpus / tp;
    if (c.cp == 0 && gpus % tp != 0) {
      p.refusal = Error{Field::Tp, fmt::format("TP {} does not divide {}'s {} GPUs", tp, t.name, gpus)}.message();
      return p;
    }
    auto l = sched::make_layout(gpus, cp, tp, sched::LayoutOrder::TpInner);
    if (!l) {
      p.refusal = l.error().message();
      return p;
    }
    p.layout = *l;
    p.ranks = l->cp;
    const auto gpus_of = sched::layout_gpus(*l);
    p.domains = c.domains > 0 ? c.domains : default_domains(t, gpus_of, l->cp);
    const auto q = deployment_copies(*l, t);
    p.copies = q ? *q : l->groups();
    return p;
  }
  p.ranks = gpus;
  p.domains = c.domains > 0 ? c.domains : default_domains(t);
  return p;
}

/// An algorithm that forces its layout (ring-zigzag, tasp-zigzag) would give one and the same row
/// in every configuration that differs only in layout. It runs in the configuration of the layout
/// it runs on, so its speedup is over ring on that layout (the ring row with the same key), or,
/// when the layout list lacks that layout, in the configuration of the list's first layout.
bool runs_elsewhere(const SweepSpec& spec, const std::string& algo, const ir::Workload& w, int ranks, int domains) {
  const ir::Layout runs_on = sched::normalised({algo, w, ranks, domains}).workload.layout;
  if (runs_on == w.layout) return false;
  const bool listed = std::find(spec.layouts.begin(), spec.layouts.end(), runs_on) != spec.layouts.end();
  return listed || w.layout != spec.layouts.front();
}

/// The summary of a deployment: `copies` CP groups of `l` (the whole attention block's with `block_model`).
Expected<Summary> deployment_summary(const sched::PlanRequest& req, const sched::Layout& l, int copies,
                                     const topo::Topology& t, const ir::Workload* block_model) {
  auto e = evaluate_deployment(req, l, copies, t, block_model);
  if (!e) return e.error();
  return e->summary;
}

/// The summary of evaluate(req, t, /*by_symmetry=*/true, options), through `reuse` where there is one.
Expected<Summary> evaluate_summary(const sched::PlanRequest& req, const topo::Topology& t, SimOptions options,
                                   PlanReuse* reuse) {
  if (reuse) return reuse->evaluate(req, t, options);
  auto e = evaluate(req, t, /*by_symmetry=*/true, options);
  if (!e) return e.error();
  return e->summary;
}

/// A row's configuration: where it ran and the workload as configured (`group`: what one CP group planned).
SweepRow where_row(const SweepConfig& c, const Placement& where, const std::string& algo, const ir::Workload& group,
                   const ir::Workload& w) {
  SweepRow r;
  r.topology = c.topology;
  r.ranks = where.ranks;
  r.domains = where.domains;
  if (where.layout) {
    r.tp = where.layout->tp;
    r.cp = where.layout->cp;
  }
  r.workload = sched::normalised({algo, group, where.ranks, where.domains}).workload;  // ring-zigzag: its zigzag
  r.workload.heads = w.heads;        // as configured: the model's heads, before TP splits them
  r.workload.kv_heads = w.kv_heads;  // ... and before Ulysses repeats any (the planner's, not an axis)
  r.algo = algo;
  return r;
}

SweepTaskOut run_task(const SweepSpec& spec, std::size_t config, ir::Phase phase, PlanReuse* reuse,
                      SimulationMemo* memo) {
  SweepTaskOut out;
  const SweepConfig c = sweep_config(spec, config);
  const topo::Topology& t = spec.topologies[c.topology];
  const Placement where = placement_of(c, t);
  const int ranks = where.ranks, domains = where.domains;
  ir::Workload w = c.workload;
  w.pass = phase == ir::Phase::Fwd ? ir::PassKind::Fwd : ir::PassKind::Bwd;
  // A layout's CP group plans TP's share of the heads; the attention block's TP costs take the whole model's.
  const auto group = where.layout ? sched::group_workload(w, *where.layout) : Expected<ir::Workload>(w);
  if (!where.refusal.empty() || !group) {
    out.skip_reasons.push_back(where.refusal.empty() ? group.error().message() : where.refusal);
    out.skipped += spec.algos.size();
    return out;
  }
  const ir::Workload* block_model = where.layout && c.tp > 0 ? &w : nullptr;

  struct Outcome {
    bool ok = false, refused = false;
    Summary s;
  };
  auto run = [&](const std::string& algo) -> Outcome {
    const sched::PlanRequest req = sched::normalised({algo, *group, ranks, domains});
    if (auto st = sched::check_request(req); !st) {
      out.skip_reasons.push_back(fmt::format("{}: {}", algo, st.error().message()));
      return {false, true, {}};
    }
    // A deployment's simulation is keyed by more than its request: it is not shared.
    const auto key = memo != nullptr && !where.layout ? SimulationMemo::key(req, c.topology) : std::nullopt;
    if (key)
      if (auto same = memo->find(*key)) {
        ++out.shared;
        return {true, false, *same};
      }
    ++out.simulations;
    // Rows carry figures, not ops: no critical path.
    auto e = where.layout ? deployment_summary(req, *where.layout, where.copies, t, block_model)
                          : evaluate_summary(req, t, SimOptions{.critical_path = false}, reuse);
    if (e && key) memo->insert(*key, *e);
    if (!e) {
      out.failures.push_back(fmt::format("{} on {} (B={} S={} H={}/{} D={} {}): {}", algo, t.name, w.batch, w.seq,
                                         w.heads, w.kv_heads, w.head_dim, to_string(phase), e.error().message()));
      return {};
    }
    return {true, false, *e};
  };

  // The baseline (ring) first: every other algorithm's speedup is measured against it.
  const std::string baseline(sched::baseline_algorithm());
  const bool ring_listed = std::find(spec.algos.begin(), spec.algos.end(), baseline) != spec.algos.end();
  const std::size_t refused_before = out.skip_reasons.size();
  const Outcome ring = run(baseline);
  if (!ring_listed) out.skip_reasons.resize(refused_before);  // the hidden baseline is not a row
  const double ccr = closed_form_on(baseline, t, ranks, *group, compute_model_for(t, *group)).ccr;

  for (const auto& algo : spec.algos) {
    if (runs_elsewhere(spec, algo, *group, ranks, domains)) continue;
    const Outcome o = algo == baseline ? ring : run(algo);
    if (!o.ok) {  // refused (the reason is recorded; ring's when the baseline ran) or failed (in failures)
      if (o.refused) ++out.skipped;
      continue;
    }
    SweepRow r = where_row(c, where, algo, *group, w);
    r.pass = phase;
    r.ccr = ccr;
    r.time_ms = o.s.time_s * 1e3;
    r.exposed_comm_ms = o.s.exposed_comm_s * 1e3;
    r.idle_ms = o.s.idle_mean_s * 1e3;
    r.speedup_vs_ring = ring.ok && o.s.time_s > 0 ? ring.s.time_s / o.s.time_s : 0;
    r.peak_mem_bytes = o.s.peak_mem_bytes;
    if (const auto m = memory_verdict(o.s.peak_mem_bytes, spec.reserved_gb, t.gpu); m.known) r.fits = m.fits ? 1 : 0;
    out.rows.push_back(std::move(r));
  }
  return out;
}

}  // namespace

std::size_t SweepSpec::num_configs() const {
  return topologies.size() * batch.size() * seq.size() * heads.size() * kv_count(*this) * head_dim.size() *
         dtypes.size() * causal.size() * layouts.size() * count(tp) * count(cp) * count(domains);
}

SweepConfig sweep_config(const SweepSpec& s, std::size_t i) {
  // Mixed-radix digits, the domains fastest, then CP, TP and the layout.
  auto digit = [&i](std::size_t n) {
    const std::size_t d = i % n;
    i /= n;
    return d;
  };
  SweepConfig c;
  auto axis = [&](const std::vector<int>& v) { return v.empty() ? 0 : v[digit(v.size())]; };
  c.domains = axis(s.domains);
  c.cp = axis(s.cp);
  c.tp = axis(s.tp);
  ir::Workload& w = c.workload;
  w.layout = s.layouts[digit(s.layouts.size())];
  w.causal = s.causal[digit(s.causal.size())];
  w.dtype = s.dtypes[digit(s.dtypes.size())];
  w.head_dim = s.head_dim[digit(s.head_dim.size())];
  const std::size_t kv = digit(kv_count(s));
  w.heads = s.heads[digit(s.heads.size())];
  w.kv_heads = s.kv_heads.empty() ? w.heads : s.kv_heads[kv];
  w.seq = s.seq[digit(s.seq.size())];
  w.batch = s.batch[digit(s.batch.size())];
  c.topology = digit(s.topologies.size());
  return c;
}

std::size_t sweep_tasks(const SweepSpec& spec) { return spec.num_configs() * spec.passes.size(); }

std::size_t sweep_task_to_run(const SweepSpec& spec, std::size_t k) {
  // k = (rest * passes + pass) * batches + b; the configuration's digits put the batch below the
  // topology only, so configuration = low + stride * (b + batches * topology), rest = low + stride * topology.
  const std::size_t batches = spec.batch.size(), passes = spec.passes.size();
  const std::size_t stride = spec.num_configs() / (batches * spec.topologies.size());
  const std::size_t b = k % batches, pass = k / batches % passes, rest = k / batches / passes;
  const std::size_t config = rest % stride + stride * (b + batches * (rest / stride));
  return config * passes + pass;
}

SweepTaskOut run_sweep_task(const SweepSpec& spec, std::size_t i, PlanReuse* reuse, SimulationMemo* memo) {
  const std::size_t passes = spec.passes.size();
  try {
    return run_task(spec, i / passes, spec.passes[i % passes], reuse, memo);
  } catch (const std::bad_alloc&) {
    throw;  // no bug of the simulator's: the machine's memory, which ends the sweep
  } catch (const std::exception& e) {
    SweepTaskOut out;
    out.failures.push_back(fmt::format("task {}: {}", i, e.what()));
    return out;
  }
}

SweepResult sweep_result(const SweepSpec& spec, std::vector<std::optional<SweepTaskOut>> outs, double wall_s) {
  SweepResult res;
  res.configs = spec.num_configs();
  for (auto& slot : outs) {
    if (!slot) continue;
    auto& o = *slot;
    ++res.tasks_done;
    res.simulations += o.simulations;
    res.shared += o.shared;
    res.skipped += o.skipped;
    for (auto& r : o.skip_reasons) ++res.skip_reasons[r];
    for (auto& f : o.failures) res.failures.push_back(std::move(f));
    for (auto& r : o.rows) res.rows.push_back(std::move(r));
  }
  res.cancelled = res.tasks_done < outs.size();
  res.wall_s = wall_s;
  return res;
}

SweepResult run_sweep(const SweepSpec& spec, const SweepControl& control) {
  CHARM_ASSERT(spec.set_fields.empty() || spec.points.size() == spec.topologies.size(),
               "one hardware point per topology");
  for (const auto& p : spec.points)
    CHARM_ASSERT(p.values.size() == spec.set_fields.size(), "one value per swept field");
  CHARM_ASSERT(!spec.layouts.empty(), "at least one layout");
  const auto t0 = std::chrono::steady_clock::now();
  const std::size_t total = sweep_tasks(spec);
  // Each task owns its slot, so the rows come out in task order whatever the workers do.
  std::vector<std::optional<SweepTaskOut>> outs(total);

  SimulationMemo memo;
  // Each worker reuses its own plans (PlanReuse) across the batches it runs; a signal stops the tasks not
  // started; the caller's thread draws the progress line about ten times a second.
  parallel_for_watched<PlanReuse>(
      total, control.jobs,
      [&](std::size_t k, PlanReuse& reuse) {
        const std::size_t i = control.reuse_plans ? sweep_task_to_run(spec, k) : k;
        outs[i] = run_sweep_task(spec, i, control.reuse_plans ? &reuse : nullptr,
                                 control.share_simulations ? &memo : nullptr);
      },
      [&] { return control.cancel && control.cancel->load(std::memory_order_relaxed); },
      [&](std::size_t done, std::size_t n) {
        if (control.progress) control.progress(done, n);
      },
      std::chrono::milliseconds(100));
  return sweep_result(spec, std::move(outs),
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

namespace {
/// A row on the wire: [topology, ranks, domains, workload, algo, pass, ccr, time_ms, exposed_comm_ms, idle_ms,
/// speedup_vs_ring, peak_mem_bytes, fits, tp, cp].
constexpr std::size_t kRowFields = 15;
/// Whether the rows carry a layout's TP and CP sizes (columns only then: a sweep without them is as before).
bool layout_axes(const SweepSpec& s) { return !s.tp.empty() || !s.cp.empty(); }
}  // namespace

std::string encode_task(const SweepTaskOut& out) {
  using nlohmann::json;
  json rows = json::array();
  for (const auto& r : out.rows)
    rows.push_back(json::array({r.topology, r.ranks, r.domains, ir::workload_to_json(r.workload), r.algo,
                                std::string(to_string(r.pass)), r.ccr, r.time_ms, r.exposed_comm_ms, r.idle_ms,
                                r.speedup_vs_ring, r.peak_mem_bytes, r.fits, r.tp, r.cp}));
  const json j{{"rows", rows},           {"simulations", out.simulations},   {"shared", out.shared},
               {"skipped", out.skipped}, {"skip_reasons", out.skip_reasons}, {"failures", out.failures}};
  const auto bytes = json::to_msgpack(j);
  return {bytes.begin(), bytes.end()};
}

Expected<SweepTaskOut> decode_task(const SweepSpec& spec, std::string_view bytes) {
  using nlohmann::json;
  const json j = json::from_msgpack(bytes.begin(), bytes.end(), /*strict=*/true, /*allow_exceptions=*/false);
  auto bad = [](const std::string& why) { return Error{"sweep", "a task's result does not read back: " + why}; };
  if (j.is_discarded() || !j.is_object()) return bad("not MessagePack of an object");
  try {
    SweepTaskOut out;
    out.simulations = j.at("simulations").get<std::size_t>();
    out.shared = j.at("shared").get<std::size_t>();
    out.skipped = j.at("skipped").get<std::size_t>();
    out.skip_reasons = j.at("skip_reasons").get<std::vector<std::string>>();
    out.failures = j.at("failures").get<std::vector<std::string>>();
    for (const auto& a : j.at("rows")) {
      if (!a.is_array() || a.size() != kRowFields) return bad("a row of the wrong shape");
      SweepRow r;
      r.topology = a[0].get<std::size_t>();
      if (r.topology >= spec.topologies.size()) return bad(fmt::format("topology {} out of range", r.topology));
      r.ranks = a[1].get<int>();
      r.domains = a[2].get<int>();
      auto w = ir::workload_from_json(a[3], "a sweep row");
      if (!w) return bad(w.error().message());
      r.workload = *w;
      r.algo = a[4].get<std::string>();
      auto pass = ir::parse_pass(a[5].get<std::string>());
      if (!pass || *pass == ir::PassKind::Both) return bad("a row's pass");
      r.pass = *pass == ir::PassKind::Fwd ? ir::Phase::Fwd : ir::Phase::Bwd;
      r.ccr = a[6].get<double>();
      r.time_ms = a[7].get<double>();
      r.exposed_comm_ms = a[8].get<double>();
      r.idle_ms = a[9].get<double>();
      r.speedup_vs_ring = a[10].get<double>();
      r.peak_mem_bytes = a[11].get<ir::Bytes>();
      r.fits = a[12].get<int>();
      r.tp = a[13].get<int>();
      r.cp = a[14].get<int>();
      out.rows.push_back(std::move(r));
    }
    return out;
  } catch (const json::exception& e) {
    return bad(e.what());
  }
}

std::vector<std::string> sweep_columns(const SweepSpec& spec) {
  std::vector<std::string> cols{"topology", "ranks",         "domains", "batch",           "seq",     "heads",
                                "kv_heads", "head_dim",      "dtype",   "causal",          "layout",  "algo",
                                "pass",     "ccr",           "time_ms", "exposed_comm_ms", "idle_ms", "speedup_vs_ring",
                                "fits",     "peak_mem_bytes"};
  if (layout_axes(spec)) cols.insert(cols.begin() + 3, {"tp", "cp"});
  cols.insert(cols.begin() + 1, spec.set_fields.begin(), spec.set_fields.end());
  return cols;
}

std::string sweep_csv(const SweepSpec& spec, const SweepResult& result) {
  std::string out;
  out = fmt::format("{}\n", fmt::join(sweep_columns(spec), ","));
  for (const auto& r : result.rows) {
    const auto& w = r.workload;
    out += csv_field(spec.topologies[r.topology].name);  // a name may hold a comma or a quote
    // {} prints the shortest text that reads back to the same double: exact and deterministic.
    if (!spec.set_fields.empty()) out += fmt::format(",{}", fmt::join(spec.points[r.topology].values, ","));
    out += fmt::format(",{},{}", r.ranks, r.domains);
    if (layout_axes(spec)) out += fmt::format(",{},{}", r.tp, r.cp);
    out += fmt::format(",{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", w.batch, w.seq, w.heads, w.kv_heads,
                       w.head_dim, to_string(w.dtype), w.causal ? 1 : 0, to_string(w.layout), csv_field(r.algo),
                       to_string(r.pass), r.ccr, r.time_ms, r.exposed_comm_ms, r.idle_ms, r.speedup_vs_ring,
                       r.fits < 0 ? std::string() : std::to_string(r.fits), r.peak_mem_bytes);
  }
  return out;
}

nlohmann::json sweep_json(const SweepSpec& spec, const SweepResult& result) {
  using nlohmann::json;
  // The swept fields of topology t, each under its dotted path.
  auto set_values = [&](std::size_t t, json& into) {
    for (std::size_t f = 0; f < spec.set_fields.size(); ++f) into[spec.set_fields[f]] = spec.points[t].values[f];
  };
  json topos = json::array();
  for (std::size_t i = 0; i < spec.topologies.size(); ++i) {
    const auto& t = spec.topologies[i];
    json entry{{"name", t.name}, {"gpus", t.num_gpus()}, {"domains", default_domains(t)}, {"gpu", t.gpu.model}};
    set_values(i, entry);
    topos.push_back(std::move(entry));
  }
  json rows = json::array();
  for (const auto& r : result.rows) {
    const auto& w = r.workload;
    json row = ir::workload_to_json(w);  // keys sorted: the same object as one written out
    row.update(json{{"topology", spec.topologies[r.topology].name},
                    {"ranks", r.ranks},
                    {"domains", r.domains},
                    {"algo", r.algo},
                    {"pass", std::string(to_string(r.pass))},
                    {"ccr", r.ccr},
                    {"time_ms", r.time_ms},
                    {"exposed_comm_ms", r.exposed_comm_ms},
                    {"idle_ms", r.idle_ms},
                    {"speedup_vs_ring", r.speedup_vs_ring},
                    {"peak_mem_bytes", r.peak_mem_bytes},
                    {"fits", r.fits < 0 ? json(nullptr) : json(r.fits == 1)}});
    if (layout_axes(spec)) row.update(json{{"tp", r.tp}, {"cp", r.cp}});
    set_values(r.topology, row);
    rows.push_back(std::move(row));
  }
  json reasons = json::array();
  for (const auto& [what, n] : result.skip_reasons) reasons.push_back({{"reason", what}, {"count", n}});
  json passes = json::array();
  for (auto p : spec.passes) passes.push_back(std::string(to_string(p)));
  return {{"schema", 1},
          {"topologies", topos},
          {"algos", spec.algos},
          {"passes", passes},
          {"configs", result.configs},
          // The evaluations the rows took, run or shared: which of them a worker ran and which it found in
          // the memo depends on the workers' timing and, under mpirun, on which process had which task.
          {"simulations", result.simulations + result.shared},
          {"skipped", result.skipped},
          {"skip_reasons", reasons},
          {"failures", result.failures},
          {"columns", sweep_columns(spec)},
          {"rows", rows}};
}

}  // namespace charm::sim
