#include "tools/app/compare.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <ostream>

#include "scheduler/planners/algorithms.hpp"
#include "scheduler/planners/layout.hpp"
#include "scheduler/planners/planners.hpp"
#include "sim/run_json.hpp"
#include "support/number_text.hpp"

namespace charm::app {

using nlohmann::json;

namespace {

/// Ring's time in `pass` (0 when ring did not run it): the speedup column's denominator.
double ring_time(const std::vector<CompareRow>& rows, const std::string& pass) {
  for (const auto& r : rows)
    if (r.ok && r.algo == sched::baseline_algorithm() && r.pass == pass) return r.s.time_s;
  return 0.0;
}

/// `algo` in pass `p`; on the balanced layout with the chunk map `chunks` solved for it (empty: none to use), or
/// refused with why there is none.
Expected<CompareRow> compare_one(const CompareRequest& r, const topo::Topology& t, const std::string& algo,
                                 ir::PassKind p, const Expected<sim::ChunkMap>& chunks, const SimulateFn& simulate) {
  ir::Workload wp = r.workload;
  wp.pass = p;
  if (chunks && !chunks->empty()) wp.chunk_map = *chunks;
  ir::Workload wg = wp;
  if (r.layout) CHARM_TRY_ASSIGN(wg, sched::group_workload(wp, *r.layout));
  const sched::PlanRequest req = sched::normalised({algo, wg, r.ranks, r.domains});
  CompareRow row{
      algo, std::string(to_string(p)), std::string(to_string(req.workload.layout)), {}, false, {}, {}, {}, {}, {}};
  if (!chunks) {
    row.note = chunks.error().message();
    return row;
  }
  if (auto st = sched::check_request(req); !st) {
    row.note = st.error().message();
    return row;
  }
  sim::SimulationRequest sr;
  sr.budget = r.budget;
  sr.plan = {algo, wp, r.layout ? r.layout->cp : r.ranks, r.domains};
  sr.layout = r.layout;
  sr.attention_block = r.layout && r.attention_block;
  if (!r.layout) sr.gpus = r.gpus;
  CHARM_TRY_LET(e, simulate(std::move(sr), t));
  row.ok = true;
  row.s = e.summary;
  row.f = e.formula;
  row.b = sim::explain(e.plan, e.result, t).bottleneck;
  row.m = sim::memory_verdict(e.summary.peak_mem_bytes, r.reserved_gb, t.gpu);
  row.tp = e.tp_block;
  return row;
}

json result_json(const CompareRequest& r, const std::vector<CompareRow>& rows, const CompareRow& row,
                 const topo::Topology& t) {
  json j = {{"algo", row.algo}, {"pass", row.pass}};
  if (!row.ok) {
    j["error"] = row.note;
    return j;
  }
  const double rt = ring_time(rows, row.pass);
  j["time_ms"] = row.s.time_s * 1e3;
  j["exposed_comm_ms"] = row.s.exposed_comm_s * 1e3;
  j["idle_ms"] = {{"mean", row.s.idle_mean_s * 1e3}, {"max", row.s.idle_max_s * 1e3}};
  j["speedup_vs_ring"] = rt > 0 ? json(rt / row.s.time_s) : json(nullptr);
  j["peak_mem_bytes"] = row.s.peak_mem_bytes;
  j["ccr"] = row.f.ccr;
  j["bottleneck"] = row.b.line();
  j["bottleneck_detail"] = sim::bottleneck_json(row.b);
  j["memory"] = sim::memory_json(row.m);
  if (row.m.known) j["fits"] = row.m.fits;
  if (row.f.available) j["formula"] = sim::closed_form_json(row.f, r.uniform);
  if (row.tp) j["tensor_parallel"] = sim::tp_block_json(*row.tp, t);
  return j;
}

/// The algorithm a user would deploy: the fastest over every pass asked for, among those that ran them all.
void print_best(std::ostream& os, const CompareRequest& r, const std::vector<CompareRow>& rows) {
  std::string best;
  double best_t = 0, ring_t = 0;
  for (const auto& a : r.algos) {
    double t = 0;
    std::size_t n = 0;
    for (const auto& x : rows)
      if (x.ok && x.algo == a) {
        t += x.s.time_s;
        ++n;
      }
    if (n != r.passes.size()) continue;
    if (a == sched::baseline_algorithm()) ring_t = t;
    if (best.empty() || t < best_t) {
      best = a;
      best_t = t;
    }
  }
  const std::string what = r.passes.size() == 2 ? "fwd+bwd" : std::string(to_string(r.passes.front()));
  if (best.empty()) {
    os << "# best: none (no algorithm could run every pass asked for)\n";
    return;
  }
  os << fmt::format("# best: {} ({} {:.3f} ms{})\n", best, what, best_t * 1e3,
                    ring_t > 0 ? fmt::format(", {:.2f}x ring", ring_t / best_t) : "");
}

}  // namespace

Expected<CompareRequest> compare_request(ir::Workload w, const Cluster& cluster, const topo::Topology& t,
                                         const std::string& algos, bool pass_given, bool layout_given) {
  if (!pass_given) w.pass = ir::PassKind::Both;  // compare shows fwd and bwd unless told otherwise
  // Under a causal mask the contiguous layout leaves ring-style schedules unbalanced (the last rank
  // sees every block, the first one block); the balanced layout is what anyone would deploy.
  if (w.causal && !layout_given) w.layout = ir::Layout::Zigzag;
  CompareRequest r;
  r.workload = w;
  CHARM_TRY_ASSIGN(r.ranks, cluster.ranks_for(t));
  CHARM_TRY_ASSIGN(r.domains, cluster.domains_for(t));
  CHARM_TRY_ASSIGN(r.layout, cluster.layout_for(t));  // every CP group at once, each on TP's share of the heads
  r.attention_block = r.layout && cluster.tp != 0;
  if (r.layout) {
    if (auto g = sched::group_workload(w, *r.layout); !g) return g.error();
  }
  CHARM_TRY_ASSIGN(r.gpus, cluster.gpu_map(t));
  if (algos.empty())
    r.algos = sched::algorithm_names();
  else
    CHARM_TRY_ASSIGN(r.algos, sched::resolve_algorithms(algos));
  if (w.pass != ir::PassKind::Bwd) r.passes.push_back(ir::PassKind::Fwd);
  if (w.pass != ir::PassKind::Fwd) r.passes.push_back(ir::PassKind::Bwd);
  r.reserved_gb = cluster.reserved_gb;
  r.uniform = cluster.uniform;
  CHARM_TRY_ASSIGN(r.budget, cluster.budget());
  return r;
}

namespace {
/// On the balanced layout, each algorithm's chunk map, solved once for the passes compared together (one
/// deployment runs one map), or why there is none.
Expected<sim::ChunkMap> balanced_chunks(const CompareRequest& r, const topo::Topology& t, const std::string& algo) {
  if (r.layout) return sched::balanced_deployment_refusal();
  ir::Workload w = r.workload;
  w.pass = r.passes.size() > 1 ? ir::PassKind::Both : r.passes.front();
  auto s = sim::solve_chunk_map(sched::normalised({algo, w, r.ranks, r.domains}), t);
  if (!s) return s.error();
  return std::move(s->chunk_map);
}
}  // namespace

Expected<std::vector<CompareRow>> run_compare(const CompareRequest& r, const topo::Topology& t,
                                              const SimulateFn& simulate) {
  std::vector<CompareRow> rows;
  const bool balanced = r.workload.layout == ir::Layout::Balanced && r.workload.chunk_map.empty();
  std::vector<Expected<sim::ChunkMap>> maps;
  for (const auto& a : r.algos) {
    // An algorithm with a layout of its own (ring-zigzag) runs on it, as under any other --layout.
    const sched::Algorithm* row = sched::find_algorithm(a);
    const bool solve = balanced && row != nullptr && !row->forced_layout;
    maps.push_back(solve ? balanced_chunks(r, t, a) : Expected<sim::ChunkMap>(sim::ChunkMap{}));
  }
  for (const auto p : r.passes)
    for (std::size_t i = 0; i < r.algos.size(); ++i) {
      CHARM_TRY_LET(row, compare_one(r, t, r.algos[i], p, maps[i], simulate));
      rows.push_back(std::move(row));
    }
  // Nothing computed is a refusal (exit 2), not an empty answer: one line with the first reason.
  if (std::none_of(rows.begin(), rows.end(), [](const CompareRow& x) { return x.ok; }))
    return Error{Field::Algos, fmt::format("no algorithm could run this workload (the first: {} {}: {})",
                                           rows.front().algo, rows.front().pass, rows.front().note)};
  return rows;
}

json compare_json(const CompareRequest& r, const std::vector<CompareRow>& rows, const topo::Topology& t) {
  json res = json::array();
  for (const auto& row : rows) res.push_back(result_json(r, rows, row, t));
  json j = {{"schema", 1},
            {"topology", {{"name", t.name}, {"gpus", r.ranks}, {"domains", r.domains}}},
            {"workload", sim::workload_json(r.workload)},
            {"scope", sim::scope_text(r.workload.pass, 1, r.attention_block ? r.layout->tp : 0)},
            {"model", sim::model_json(t, r.workload)},
            {"results", res}};
  if (r.layout)
    j["layout"] = {{"cp", r.layout->cp},
                   {"tp", r.layout->tp},
                   {"dp", r.layout->dp},
                   {"order", sched::to_string(r.layout->order)},
                   {"text", sched::layout_text(*r.layout)}};
  return j;
}

json compare_rows_json(const CompareRequest& r, const std::vector<CompareRow>& rows, const topo::Topology& t) {
  json out = json::array();
  for (const auto& x : rows) {
    const double rt = ring_time(rows, x.pass);
    auto num = [&](double v) { return x.ok ? json(v) : json(nullptr); };
    out.push_back({{"topology", t.name},
                   {"ranks", r.ranks},
                   {"domains", r.domains},
                   {"cp", r.layout ? json(r.layout->cp) : json(nullptr)},
                   {"tp", r.layout ? json(r.layout->tp) : json(nullptr)},
                   {"algo", x.algo},
                   {"pass", x.pass},
                   {"layout", x.layout},
                   {"time_ms", num(x.s.time_s * 1e3)},
                   {"tp_block_ms", x.tp ? json(x.tp->total_s() * 1e3) : json(nullptr)},
                   {"exposed_comm_ms", num(x.s.exposed_comm_s * 1e3)},
                   {"idle_mean_ms", num(x.s.idle_mean_s * 1e3)},
                   {"idle_max_ms", num(x.s.idle_max_s * 1e3)},
                   {"speedup_vs_ring", x.ok && rt > 0 ? json(rt / x.s.time_s) : json(nullptr)},
                   {"peak_mem_bytes", x.ok ? json(x.s.peak_mem_bytes) : json(nullptr)},
                   {"ccr", num(x.f.ccr)},
                   {"bottleneck", x.ok ? json(x.b.line()) : json(nullptr)},
                   {"bound_by", x.ok ? json(x.b.brief()) : json(nullptr)},
                   {"fits", x.ok && x.m.known ? json(x.m.fits) : json(nullptr)},
                   {"formula_time_ms", x.ok && x.f.available ? json(x.f.time_s * 1e3) : json(nullptr)},
                   {"formula_exposed_comm_ms", x.ok && x.f.available ? json(x.f.exposed_s * 1e3) : json(nullptr)},
                   {"error", x.ok ? json(nullptr) : json(x.note)}});
  }
  return out;
}

void print_compare(std::ostream& os, const CompareRequest& r, const std::vector<CompareRow>& rows,
                   const topo::Topology& t) {
  const ir::Workload& w = r.workload;
  os << fmt::format("# charm compare on {} ({}, {})\n", t.name, counted(r.ranks, "rank"), counted(r.domains, "domain"));
  if (r.layout) os << fmt::format("# layout: {}\n", sched::layout_text(*r.layout));
  os << fmt::format("# workload: B={} S={} H={}/{} D={} {} {}{}\n", w.batch, w.seq, w.heads, w.kv_heads, w.head_dim,
                    to_string(w.dtype), to_string(w.layout), w.causal ? " " + w.mask_text() : "");
  os << fmt::format("# scope: {}\n", sim::scope_text(w.pass, 1, r.attention_block ? r.layout->tp : 0));
  os << fmt::format("# model: {}\n", sim::model_text(t, w));
  // With whole attention blocks, "of which TP" is the part tensor parallelism adds (its collectives and GEMMs).
  const bool tp = r.attention_block;
  os << fmt::format("# {:>12} {:>5} {:>12}{} {:>12} {:>12} {:>12} {:>10}  {}\n", "algo", "pass", "time",
                    tp ? fmt::format(" {:>12}", "of which TP") : "", "exposed", "idle(mean)", "peak mem", "speedup",
                    "bound by");
  os << fmt::format("# {:>12} {:>5} {:>12}{} {:>12} {:>12} {:>12} {:>10}\n", "", "", "(ms)",
                    tp ? fmt::format(" {:>12}", "(ms)") : "", "(ms)", "(ms)", "(MiB)", "(x ring)");
  for (const auto& x : rows) {
    if (!x.ok) {
      os << fmt::format("  {:>12} {:>5}   n/a: {}\n", x.algo, x.pass, x.note);
      continue;
    }
    const double rt = ring_time(rows, x.pass);
    os << fmt::format("  {:>12} {:>5} {:>12.3f}{} {:>12.3f} {:>12.3f} {:>12.1f} {:>10}  {}{}\n", x.algo, x.pass,
                      x.s.time_s * 1e3, x.tp ? fmt::format(" {:>12.3f}", x.tp->total_s() * 1e3) : "",
                      x.s.exposed_comm_s * 1e3, x.s.idle_mean_s * 1e3, double(x.s.peak_mem_bytes) / (1 << 20),
                      rt > 0 ? fmt::format("{:.2f}", rt / x.s.time_s) : "-", x.b.brief(),
                      x.m.known && !x.m.fits ? "  DOES NOT FIT" : "");
  }
  print_best(os, r, rows);
  // Tensor parallelism's part is the same for every algorithm of a pass: one line each, and the GEMMs' source.
  if (!r.attention_block) return;
  for (const auto p : r.passes) {
    const auto x =
        std::find_if(rows.begin(), rows.end(), [&](const CompareRow& y) { return y.tp && y.pass == to_string(p); });
    if (x != rows.end()) os << fmt::format("# tensor parallel ({}): {}\n", x->pass, x->tp->line());
  }
  os << fmt::format("# {}\n", sim::gemm_line(t.gpu));
}

}  // namespace charm::app
