#include "sim/run_json.hpp"

#include <fmt/format.h>

#include <algorithm>

#include <string>

#include "scheduler/ir/plan_io.hpp"
#include "sim/compute_model.hpp"
#include "topologies/topology_json.hpp"

namespace charm::sim {

using nlohmann::json;

json workload_json(const ir::Workload& w) {
  json j = ir::workload_to_json(w);
  j.erase("pass");
  return j;
}

json formula_json(Seconds time_s, Seconds exposed_s) {
  return {{"time_ms", time_s * 1e3}, {"exposed_comm_ms", exposed_s * 1e3}};
}

json closed_form_json(const ClosedForm& f, bool uniform) {
  json j = formula_json(f.time_s, f.exposed_s);
  j["basis"] = uniform ? "uniform" : "slowest ring hop as a uniform link";
  j["applies"] = f.applies;
  if (!f.applies) j["why_not"] = f.why_not;
  return j;
}

json bottleneck_json(const Bottleneck& b) {
  json traffic = json::array();
  for (const auto& k : b.traffic)
    traffic.push_back({{"kind", std::string(to_string(k.kind))}, {"messages", k.messages}, {"bytes", k.bytes}});
  json j = {{"text", b.line()},          {"resource", b.resource},
            {"class", b.resource_class}, {"utilisation", b.utilisation},
            {"saturated", b.saturated},  {"figure", b.figure}};
  if (b.channel < 0) j["rank"] = b.rank;
  if (!traffic.empty()) j["traffic"] = traffic;
  return j;
}

json path_shares_json(const std::vector<PathShare>& path) {
  json a = json::array();
  for (const auto& p : path) a.push_back({{"what", p.what}, {"ms", p.seconds * 1e3}});
  return a;
}

json memory_json(const MemoryVerdict& m) {
  if (!m.known) return {{"known", false}, {"buffers_gb", m.buffers_gb}, {"reserved_gb", m.reserved_gb}};
  return {{"known", true},
          {"fits", m.fits},
          {"buffers_gb", m.buffers_gb},
          {"reserved_gb", m.reserved_gb},
          {"need_gb", m.need_gb},
          {"gpu_memory_gb", m.have_gb}};
}

json symmetry_json(const ir::Plan& p) {
  return {{"kind", to_string(p.symmetry.kind)},
          {"block", p.symmetry.block},
          {"classes", p.symmetry.elements(p.ranks)},
          {"simulated_ops", p.size()}};
}

std::size_t full_ops(const ir::Plan& p) {
  return p.symmetry.active() ? p.size() * std::size_t(p.symmetry.elements(p.ranks)) : p.size();
}

std::string placement_text(int ranks, int gpus) {
  if (ranks >= gpus) return fmt::format("ranks 0-{} on GPUs 0-{} (all {})", ranks - 1, ranks - 1, gpus);
  return fmt::format("ranks 0-{} on GPUs 0-{} of {}; GPUs {}-{} idle", ranks - 1, ranks - 1, gpus, ranks, gpus - 1);
}

namespace {

/// What the workload's head dim asks of the kernel table outside its rows, if anything.
topo::ModelSources with_coverage(const topo::Topology& t, const ir::Workload& w) {
  topo::ModelSources m = t.sources;
  if (w.position_mask()) {
    if (ComputeModel::from_topology(t, w.dtype).shaped(ir::Phase::Fwd))
      m.kernel += "; blocks of packed documents or a window as FlashAttention's varlen grid runs them (a thread "
                  "block per document, head and tile; TransformerEngine's THD trimming)";
    else
      m.assumed.push_back("blocks of packed documents or a window priced by their FLOPs as one square block (the "
                          "GPU's SMs and tiles are not known)");
  }
  if (!t.gpu.kernel || t.gpu.kernel->rows.empty()) return m;
  int lo = t.gpu.kernel->rows.front().head_dim, hi = lo;
  for (const auto& r : t.gpu.kernel->rows) {
    lo = std::min(lo, r.head_dim);
    hi = std::max(hi, r.head_dim);
  }
  if (w.head_dim < lo || w.head_dim > hi)
    m.assumed.push_back(fmt::format("head dim {} is outside the {} table's {}-{}: its nearest rows hold", w.head_dim,
                                    t.gpu.kernel->library, lo, hi));
  return m;
}

}  // namespace

std::string model_text(const topo::Topology& t, const ir::Workload& w) { return with_coverage(t, w).line(); }

nlohmann::json model_json(const topo::Topology& t, const ir::Workload& w) {
  return topo::model_sources_json(with_coverage(t, w));
}

std::string scope_text(ir::PassKind pass, int layers, int tp) {
  const std::string what = pass == ir::PassKind::Both ? "fwd+bwd" : std::string(to_string(pass));
  const std::string part = tp != 0 ? "attention block" : "core attention";
  const std::string layer = layers > 1 ? fmt::format("{} attention layers' {} ({}), one after another: times x {}",
                                                     layers, part, what, layers)
                                       : fmt::format("one attention layer's {} ({})", part, what);
  const std::string in =
      tp != 0 ? fmt::format("core attention, the QKV and output projection GEMMs and, with {}, its all-gathers and "
                            "reduce-scatters (Megatron-LM sequence parallelism; no layer norm, no overlap of the "
                            "collectives with attention)",
                            tp > 0 ? fmt::format("TP {}", tp) : std::string("each layout's TP"))
              : "the FlashAttention part only (no projections, no TP collectives)";
  return fmt::format("{}; {}; times of the slowest GPU; memory per GPU: attention buffers only{}", layer, in,
                     layers > 1 ? ", one layer's (each layer frees its buffers)" : "");
}

nlohmann::json tp_block_json(const TpBlockCost& c, const topo::Topology& t) {
  return {{"tp", c.tp},
          {"total_ms", c.total_s() * 1e3},
          {"all_gather_ms", c.gather_s * 1e3},
          {"reduce_scatter_ms", c.scatter_s * 1e3},
          {"gemm_ms", c.gemm_s * 1e3},
          {"hidden_under_gemm_ms", c.hidden_comm_s * 1e3},
          {"all_gathers", c.all_gathers},
          {"reduce_scatters", c.reduce_scatters},
          {"ring_gbps", c.ring_gbps},
          {"ring_link", c.ring_link},
          {"gemm_efficiency", gemm_efficiency(t.gpu)},
          {"gemm_source", gemm_source(t.gpu)},
          {"line", c.line()}};
}

std::vector<double> flops_per_rank(const ir::Plan& p) {
  std::vector<double> f(std::size_t(p.ranks), 0.0);
  for (const auto& o : p.ops())
    if (o.kind == ir::OpKind::Compute) f[std::size_t(o.rank)] += double(o.flops);
  return f;
}

std::string placement_text(const ir::Plan& p, int gpus) {
  if (p.groups == 1 && p.gpus.empty()) return placement_text(p.ranks, gpus);
  const int n = p.group_ranks(), shown = std::min(n, 6);
  std::string group0;
  for (int r = 0; r < shown; ++r) group0 += fmt::format("{}{}", r ? "," : "", p.gpu_of(r));
  if (shown < n) group0 += fmt::format(",...,{}", p.gpu_of(n - 1));
  if (p.groups == 1)
    return fmt::format("ranks 0-{} on GPUs {} of {}{}", n - 1, group0, gpus, n < gpus ? "; the others idle" : "");
  return fmt::format(
      "{} CP groups of {} ranks at once on {} of {} GPUs; group 0 on GPUs {}{}", p.groups, n, p.ranks, gpus, group0,
      p.symmetry.active() ? fmt::format(" (simulated: groups 0-{}, standing for all)", p.symmetry.block / n - 1) : "");
}

namespace {
json chunk_figures_json(const ChunkFigures& f) {
  return {{"time_ms", f.makespan_s * 1e3}, {"sent_bytes", f.sent_bytes}, {"imbalance", f.imbalance}};
}

/// How the balanced layout's chunk map was solved (the map itself is the workload's "chunks").
json chunk_solution_json(const ChunkSolution& c) {
  json tried = json::array();
  for (const auto& [name, s] : c.tried) tried.push_back({{"candidate", name}, {"time_ms", s * 1e3}});
  return {{"candidate", c.candidate},
          {"tried", std::move(tried)},
          {"candidates", c.candidates},
          {"solve_ms", c.solve_ms},
          {"budget_hit", c.budget_hit},
          {"best", chunk_figures_json(c.best)},
          {"thd", c.thd ? chunk_figures_json(*c.thd) : json(nullptr)},
          {"contiguous", chunk_figures_json(c.contiguous)}};
}

/// Under documents or a window, each rank's share of the visible pairs' FLOPs (min, mean, max); null otherwise.
json visible_json(const ir::Plan& p) {
  if (!p.workload.position_mask() || p.symmetry.active()) return nullptr;
  const auto f = flops_per_rank(p);
  if (f.empty()) return nullptr;
  double sum = 0;
  for (double x : f) sum += x;
  return {{"min", *std::min_element(f.begin(), f.end()) / 1e12},
          {"mean", sum / double(f.size()) / 1e12},
          {"max", *std::max_element(f.begin(), f.end()) / 1e12}};
}
}  // namespace

json simulate_json(const Evaluation& r, const topo::Topology& t, const Explanation& ex, const MemoryVerdict& mem,
                   bool uniform, std::size_t path_limit) {
  const Summary& s = r.summary;
  std::vector<ir::Bytes> peaks;
  for (const auto& rk : r.result.ranks) peaks.push_back(rk.peak_mem_bytes);
  json j = {{"schema", 1},
            {"algo", r.plan.algo},
            {"pass", std::string(to_string(r.plan.workload.pass))},
            {"topology", t.name},
            {"ranks", r.plan.ranks},
            {"domains", r.plan.domains},
            {"placement",
             {{"gpus", t.num_gpus()},
              {"groups", r.plan.groups},
              {"group_ranks", r.plan.group_ranks()},
              {"text", placement_text(r.plan, t.num_gpus())}}},
            {"workload", workload_json(r.plan.workload)},
            {"scope", scope_text(r.plan.workload.pass, 1, r.tp_block ? r.tp_block->tp : 0)},
            {"model", model_json(t, r.plan.workload)},
            {"time_ms", s.time_s * 1e3},
            {"exposed_comm_ms", s.exposed_comm_s * 1e3},
            {"exposed_comm_per_rank_ms", {{"mean", s.exposed_comm_mean_s * 1e3}, {"max", s.exposed_comm_max_s * 1e3}}},
            {"idle_ms", {{"mean", s.idle_mean_s * 1e3}, {"max", s.idle_max_s * 1e3}}},
            {"compute_busy_ms", {{"mean", s.busy_mean_s * 1e3}}},
            {"comm_busy_ms", {{"mean", s.comm_busy_mean_s * 1e3}}},
            {"ccr", r.formula.ccr},
            {"peak_mem_bytes", s.peak_mem_bytes},
            {"peak_mem_per_rank_bytes", peaks},
            {"critical_path", critical_path_json(r.plan, r.result, path_limit)},
            {"critical_path_length", r.result.critical_path.size()},
            {"critical_path_shares", path_shares_json(ex.path)},
            {"bottleneck", bottleneck_json(ex.bottleneck)},
            {"memory", memory_json(mem)},
            {"links", links_json(t, r.result)},
            {"ops", full_ops(r.plan)},
            {"events", r.result.events}};
  if (r.plan.symmetry.active()) j["symmetry"] = symmetry_json(r.plan);
  if (r.tp_block) j["tensor_parallel"] = tp_block_json(*r.tp_block, t);
  if (auto v = visible_json(r.plan); !v.is_null()) j["visible_tflop_per_rank"] = std::move(v);
  if (r.chunks) j["chunk_solver"] = chunk_solution_json(*r.chunks);
  if (r.plan.workload.layout == ir::Layout::Balanced && !r.plan.symmetry.active()) {
    // Per rank: the visible pairs' FLOPs its queries hold, its compute stream's busy time and when it ends.
    json ranks = json::array();
    const auto f = flops_per_rank(r.plan);
    for (std::size_t k = 0; k < r.result.ranks.size() && k < f.size(); ++k)
      ranks.push_back({{"visible_tflop", f[k] / 1e12},
                       {"compute_busy_ms", r.result.ranks[k].compute_busy_s * 1e3},
                       {"end_ms", r.result.ranks[k].end_s * 1e3}});
    j["per_rank"] = std::move(ranks);
  }
  if (r.formula.available) {
    j["formula"] = closed_form_json(r.formula, uniform);
    j["formula_paper"] = formula_json(r.formula.paper_time_s, r.formula.paper_exposed_s);
  }
  return j;
}

}  // namespace charm::sim
