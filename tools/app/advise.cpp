#include "tools/app/advise.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <ostream>
#include <thread>

#include "scheduler/planners/algorithms.hpp"
#include "sim/frameworks.hpp"
#include "sim/run_json.hpp"
#include "support/number_text.hpp"

namespace charm::app {

using nlohmann::json;

namespace {

/// usp and ulysses exchange heads all-to-all: the model's flows for it, and what they leave out.
std::string all_to_all_caveat(const std::string& algo, int peers) {
  const sched::Algorithm* row = sched::find_algorithm(algo);
  if (row == nullptr || row->heads == sched::Algorithm::HeadSplit::None) return {};
  return fmt::format("{}'s all-to-all ({} peers) is modelled as concurrent point-to-point flows that pay the "
                     "stack's per-message cost once, without the collective library's per-peer scheduling: "
                     "its time is optimistic, more so with more peers",
                     algo, std::max(1, peers - 1));
}

/// A candidate's context-parallel group: its layout's CP size, or every rank advised.
int group_ranks(const sim::Advice& adv, const sim::Candidate& c) { return c.tp > 0 ? c.cp : adv.ranks; }

/// The ranks one all-to-all spans: the Ulysses degree (group / domains for usp).
int all_to_all_peers(const sim::Advice& adv, const sim::Candidate& c) {
  const int g = group_ranks(adv, c);
  return c.domains > 0 ? g / c.domains : g;
}

Expected<std::vector<int>> tp_sizes(const std::string& list, const topo::Topology& t) {
  std::vector<int> tp;
  for (const auto& item : split_list(list)) {
    CHARM_TRY_LET(v, parse_size(item, "--tp-search"));
    if (v < 1 || v > t.num_gpus())
      return Error{"--tp-search", fmt::format("TP sizes must be in [1, {}], got {}", t.num_gpus(), v)};
    tp.push_back(int(v));
  }
  if (!list.empty() && tp.empty()) return Error{"--tp-search", "names no TP size"};
  return tp;
}

Status check_layout_flags(const Cluster& c, const AdviseArgs& f) {
  if (c.cp != 0)
    return Error{"--cp", "advise takes CP = GPUs / TP for each TP of --tp / --tp-search; simulate and compare take "
                         "--cp"};
  if (c.tp != 0 && !f.tp_search.empty()) return Error{"--tp", "give --tp or --tp-search, not both"};
  if (!c.gpus.empty())
    return Error{"--gpus", "advise ranks a group on the topology's first GPUs or in CP x TP layouts; simulate and "
                           "compare take --gpus"};
  return {};
}

/// What a framework calls candidate `c` (Megatron-LM's arguments with the layout's TP size).
sim::FrameworkSettings settings(const AdviseRequest& r, const sim::Advice& adv, const sim::Candidate& c) {
  // Without a layout search the group is every GPU advised, TP 1: the flags say so (a launch line is complete).
  return sim::framework_settings(c.algo, c.layout, r.workload.causal, group_ranks(adv, c), c.domains,
                                 std::max(c.tp, 1));
}

/// What tensor parallelism adds to a candidate's passes (0 outside a layout search), in ms.
double tp_ms(const sim::Candidate& c) {
  double ms = 0;
  for (const auto* p : {c.fwd ? &*c.fwd : nullptr, c.bwd ? &*c.bwd : nullptr})
    if (p && p->tp) ms += p->tp->total_s() * 1e3;
  return ms;
}

/// Times as the table shows them: the model's (layers x one layer's), in seconds where the largest is over 10 s.
struct TimeUnit {
  double scale = 1;  // ms of one layer -> the unit's figure for the model
  const char* name = "ms";
};
TimeUnit time_unit(const AdviseRequest& r, const sim::Advice& adv) {
  double most = 0;
  for (const auto& c : adv.candidates) most = std::max(most, c.total_ms * r.layers);
  return most > 1e4 ? TimeUnit{r.layers / 1e3, "s"} : TimeUnit{double(r.layers), "ms"};
}

/// "12.34 ms" or "543.07 s" (over 10 s): one model's time from one layer's ms.
std::string model_time(const AdviseRequest& r, double layer_ms) {
  const double ms = layer_ms * r.layers;
  return ms > 1e4 ? fmt::format("{:.2f} s", ms / 1e3) : fmt::format("{:.2f} ms", ms);
}

json candidate_json(const AdviseRequest& r, const sim::Advice& adv, const sim::Candidate& c, const topo::Topology& t) {
  json j = {{"label", c.label()},
            {"algo", c.algo},
            {"layout", std::string(to_string(c.layout))},
            {"domains", c.domains},
            {"fwd_ms", c.fwd ? json(c.fwd->time_ms) : json(nullptr)},
            {"bwd_ms", c.bwd ? json(c.bwd->time_ms) : json(nullptr)},
            {"total_ms", c.total_ms},
            {"x_best", c.total_ms / adv.candidates.front().total_ms},
            {"tie", is_tie(r, adv, c)},
            {"peak_mem_bytes", c.peak_mem_bytes},
            {"fits", c.memory.known ? json(c.memory.fits) : json(nullptr)},
            {"memory", sim::memory_json(c.memory)},
            {"bottleneck", c.bottleneck}};
  if (r.layers > 1) j["model_ms"] = c.total_ms * r.layers;
  j["frameworks"] = sim::framework_json(settings(r, adv, c));
  j["runnable"] = c.runnable;
  j["variants"] = c.variants;
  json tp = json::object();
  if (c.fwd && c.fwd->tp) tp["fwd"] = sim::tp_block_json(*c.fwd->tp, t);
  if (c.bwd && c.bwd->tp) tp["bwd"] = sim::tp_block_json(*c.bwd->tp, t);
  if (!tp.empty()) j["tensor_parallel"] = tp;
  if (c.tp > 0) j["deployment"] = {{"cp", c.cp}, {"tp", c.tp}, {"order", sched::to_string(r.options.order)}};
  if (const auto caveat = all_to_all_caveat(c.algo, all_to_all_peers(adv, c)); !caveat.empty()) j["caveat"] = caveat;
  json cp = json::object();
  if (c.fwd) cp["fwd"] = c.fwd->critical_path;
  if (c.bwd) cp["bwd"] = c.bwd->critical_path;
  j["critical_path"] = cp;
  return j;
}

std::string ranked_by(const ir::Workload& w) {
  return w.pass == ir::PassKind::Both ? "fwd+bwd" : std::string(to_string(w.pass));
}

void print_table(std::ostream& os, const AdviseRequest& r, const sim::Advice& adv, int top) {
  const bool search = !r.options.tp.empty();
  const int label_w = search ? 32 : 24;  // a layout search's labels name the layout too
  const TimeUnit u = time_unit(r, adv);
  const std::string unit = u.name;
  if (r.layers > 1)
    os << fmt::format("# times per model: {} layers, each the layer below run in turn ({})\n", r.layers, unit);
  os << fmt::format("# {:>2}  {:<{}}{:>10}{:>10}{:>11}{}{:>9}{:>9}{:>6}  {}\n", "", "candidate", label_w, "fwd " + unit,
                    "bwd " + unit, "total " + unit, search ? fmt::format("{:>10}", "TP+proj " + unit) : "", "x best",
                    "peak GB", "fits", "bound by (slower pass)");
  const double best = adv.candidates.front().total_ms;
  const std::size_t rows =
      top > 0 ? std::min<std::size_t>(std::size_t(top), adv.candidates.size()) : adv.candidates.size();
  auto fig = [&](const std::optional<sim::PassOutcome>& p) {
    return p ? fmt::format("{:.2f}", p->time_ms * u.scale) : std::string("-");
  };
  for (std::size_t i = 0; i < rows; ++i) {
    const auto& c = adv.candidates[i];
    const bool bwd_slower = c.bwd && (!c.fwd || c.bwd->time_ms >= c.fwd->time_ms);
    const sim::PassOutcome* slower = bwd_slower ? &*c.bwd : c.fwd ? &*c.fwd : nullptr;
    const std::string x = fmt::format("{:.2f}{}", c.total_ms / best, i > 0 && is_tie(r, adv, c) ? "~" : " ");
    os << fmt::format("  {:>2}  {:<{}}{:>10}{:>10}{:>11.2f}{}{:>9}{:>9.2f}{:>6}  {}{}{}\n", i + 1, c.label(), label_w,
                      fig(c.fwd), fig(c.bwd), c.total_ms * u.scale,
                      search ? fmt::format("{:>10.2f}", tp_ms(c) * u.scale) : "", x, double(c.peak_mem_bytes) / 1e9,
                      !c.memory.known ? "?"
                      : c.memory.fits ? "yes"
                                      : "NO",
                      slower ? (bwd_slower ? "bwd " : "fwd ") : "", slower ? slower->bottleneck.brief() : "",
                      c.runnable ? "" : "  (no framework runs it)");
    if (!c.variants.empty())
      os << fmt::format("  {:>2}  {:<{}}  the same figures: {}\n", "", "", label_w, fmt::join(c.variants, ", "));
  }
}

void print_best(std::ostream& os, const AdviseRequest& r, const sim::Advice& adv) {
  const auto& b = adv.candidates.front();
  const sim::Candidate* ring = nullptr;
  for (const auto& c : adv.candidates)
    if (sched::in_baseline_family(c.algo)) {
      ring = &c;
      break;
    }
  const std::string per = r.layers > 1 ? fmt::format(" per model ({} layers)", r.layers) : "";
  os << fmt::format("# best: {}: {}{} {}{}; {}\n", b.label(), model_time(r, b.total_ms), per, ranked_by(r.workload),
                    ring && ring != &b ? fmt::format(", {:.2f}x the best ring ({}, {})", ring->total_ms / b.total_ms,
                                                     ring->label(), model_time(r, ring->total_ms))
                                       : "",
                    b.memory.line());
  std::vector<std::string> ties;
  for (std::size_t i = 1; i < adv.candidates.size(); ++i)
    if (is_tie(r, adv, adv.candidates[i])) ties.push_back(adv.candidates[i].label());
  if (!ties.empty())
    os << fmt::format("#   tie: within {:g}% of the best (the model's error on ratios; --tie): {}; rows marked ~\n",
                      r.tie_percent, fmt::join(ties, ", "));
  os << fmt::format("#   why{}: {}\n", r.layers > 1 ? " (each layer)" : "", b.bottleneck);
  if (b.tp > 0)
    os << fmt::format("#   layout: CP {} x TP {} ({}), every CP group at once; times are whole attention blocks' "
                      "(TP's collectives and the projections' GEMMs in them)\n",
                      b.cp, b.tp, sched::to_string(r.options.order));
  if (const auto caveat = all_to_all_caveat(b.algo, all_to_all_peers(adv, b)); !caveat.empty())
    os << fmt::format("#   caution: {}\n", caveat);
  os << fmt::format("#   {}\n", settings(r, adv, b).line());
  // Ulysses gathers every token of its heads: how the documents were laid out does not reach its kernel.
  const auto* row = sched::find_algorithm(b.algo);
  if (!r.workload.documents.empty() && row != nullptr && row->heads != sched::Algorithm::HeadSplit::AllRanks)
    os << fmt::format("#   packed documents: {}\n",
                      b.layout == ir::Layout::Zigzag
                          ? "each one zigzag on its own, TransformerEngine's THD format (qkv_format=\"thd\", "
                            "cu_seqlens padded to multiples of 2 x CP)"
                      : b.layout == ir::Layout::Balanced
                          ? "chunks placed by this tool's solver (plan --layout balanced writes the chunk map), the "
                            "ring stopping at each shard's last reader; no framework counterpart: " +
                                (b.chunks ? b.chunks->line() : std::string("solved"))
                          : "the whole sequence split in order; no framework lays packed documents out so under CP "
                            "(TransformerEngine's THD format zigzags each one)");
  const std::string each = r.layers > 1 ? " (each layer)" : "";
  if (b.fwd) os << fmt::format("#   fwd critical path{}: {}\n", each, b.fwd->critical_path);
  if (b.bwd) os << fmt::format("#   bwd critical path{}: {}\n", each, b.bwd->critical_path);
  if (b.runnable) return;
  // The best row is a schedule no framework runs: name what a team can launch today, and how far behind it is.
  const auto run =
      std::find_if(adv.candidates.begin(), adv.candidates.end(), [](const sim::Candidate& c) { return c.runnable; });
  if (run == adv.candidates.end()) {
    os << "# best runnable: none of the candidates has a framework counterpart\n";
    return;
  }
  os << fmt::format("# best runnable: {}: {}{}, {:.2f}x the best{}; {}\n", run->label(), model_time(r, run->total_ms),
                    per, run->total_ms / b.total_ms,
                    is_tie(r, adv, *run) ? fmt::format(" (a tie: within {:g}%)", r.tie_percent) : "",
                    settings(r, adv, *run).line());
}

}  // namespace

Expected<AdviseRequest> advise_request(ir::Workload w, const Cluster& cluster, const topo::Topology& t,
                                       const AdviseArgs& f) {
  if (!f.pass_given) w.pass = ir::PassKind::Both;
  if (f.jobs != 0 && (f.jobs < 1 || f.jobs > 1024))
    return Error{"--jobs", fmt::format("must be in [1, 1024] (or omitted), got {}", f.jobs)};
  if (f.layers < 1 || f.layers > 100000)
    return Error{"--layers", fmt::format("must be in [1, 100000], got {}", f.layers)};
  if (!(f.tie_percent >= 0 && f.tie_percent <= 100))
    return Error{"--tie", fmt::format("must be a percentage in [0, 100], got {}", f.tie_percent)};
  if (auto s = check_layout_flags(cluster, f); !s) return s.error();
  AdviseRequest r;
  r.workload = w;
  r.layers = f.layers;
  r.tie_percent = f.tie_percent;
  r.reserved_gb = cluster.reserved_gb;
  sim::AdviseOptions& opt = r.options;
  if (!f.algos.empty()) CHARM_TRY_ASSIGN(opt.algos, sched::resolve_algorithms(f.algos));
  if (f.layout_given) opt.layout = w.layout;
  if (cluster.domains > 0) opt.domains = cluster.domains;
  if (cluster.tp != 0)
    opt.tp = {cluster.tp};
  else
    CHARM_TRY_ASSIGN(opt.tp, tp_sizes(f.tp_search, t));
  if (!opt.tp.empty()) {
    CHARM_TRY_ASSIGN(opt.order, sched::parse_layout_order(cluster.order));
    if (cluster.ranks_given) return Error{"--ranks", "a layout search takes every GPU; drop --ranks"};
  } else if (cluster.order != Cluster::kDefaultOrder) {
    return Error{"--order", "orders the axes of a --tp / --tp-search layout; give one of them"};
  }
  if (opt.tp.empty()) {
    CHARM_TRY_ASSIGN(opt.ranks, cluster.ranks_for(t));
  } else {
    opt.ranks = 0;
  }
  opt.reserved_gb = cluster.reserved_gb;
  CHARM_TRY_ASSIGN(opt.budget, cluster.budget());
  opt.jobs = f.jobs > 0 ? f.jobs : int(std::max(1u, std::thread::hardware_concurrency()));
  opt.runnable_only = f.runnable;
  opt.chunks = f.chunks;
  opt.chunks.jobs = opt.jobs;  // the chunk solver's simulations side by side, as many as advise's own
  return r;
}

Expected<sim::Advice> run_advise(const AdviseRequest& r, const topo::Topology& t) {
  CHARM_TRY_LET(adv, sim::advise(r.workload, t, r.options));
  if (adv.candidates.empty() && adv.not_runnable > 0)
    return Error{"--runnable", fmt::format("none of the {} candidates that ran has a framework counterpart (drop "
                                           "--runnable to rank them, or add --algos ring,ulysses,usp,allgather-kv)",
                                           adv.not_runnable)};
  if (adv.candidates.empty())
    return Error{"--algos", fmt::format("no candidate can run this workload ({} refused; the first: {}: {})",
                                        adv.refused.size(), adv.refused.empty() ? "-" : adv.refused.front().label,
                                        adv.refused.empty() ? "-" : adv.refused.front().reason)};
  return adv;
}

bool is_tie(const AdviseRequest& r, const sim::Advice& adv, const sim::Candidate& c) {
  return c.total_ms <= adv.candidates.front().total_ms * (1 + r.tie_percent / 100);
}

json advice_json(const AdviseRequest& r, const sim::Advice& adv, const topo::Topology& t) {
  json cands = json::array();
  for (const auto& c : adv.candidates) cands.push_back(candidate_json(r, adv, c, t));
  json refused = json::array();
  for (const auto& x : adv.refused) refused.push_back({{"candidate", x.label}, {"reason", x.reason}});
  return {{"schema", 1},
          {"topology", {{"name", t.name}, {"gpus", adv.ranks}, {"gpu_memory_gb", t.gpu.memory_gb}}},
          {"workload", sim::workload_json(r.workload)},
          {"ranked_by", ranked_by(r.workload)},
          {"scope", sim::scope_text(r.workload.pass, r.layers, r.options.tp.empty() ? 0 : -1)},
          {"model", sim::model_json(t, r.workload)},
          {"layers", r.layers},
          {"tie_percent", r.tie_percent},
          {"reserved_gb", r.reserved_gb},
          {"best", cands.front()},
          {"candidates", cands},
          {"refused", refused},
          {"simulations", adv.simulations}};
}

void print_advice(std::ostream& os, const AdviseRequest& r, const sim::Advice& adv, const topo::Topology& t, int top) {
  const ir::Workload& w = r.workload;
  os << fmt::format("# charm advise: B={} S={} H={}/{} D={} {}{} on {} ({} GPUs{}), ranked by {} time\n", w.batch,
                    w.seq, w.heads, w.kv_heads, w.head_dim, to_string(w.dtype), w.causal ? " " + w.mask_text() : "",
                    t.name, adv.ranks, t.gpu.memory_gb > 0 ? fmt::format(" x {:g} GB", t.gpu.memory_gb) : "",
                    ranked_by(w));
  os << fmt::format("# scope: {}\n", sim::scope_text(w.pass, r.layers, r.options.tp.empty() ? 0 : -1));
  os << fmt::format("# model: {}\n", sim::model_text(t, w));
  os << fmt::format("# {} candidates, {} simulations in {:.2f} s; {} refused by their planner (listed at the end){}\n",
                    adv.candidates.size(), adv.simulations, adv.wall_s, adv.refused.size(),
                    adv.not_runnable > 0
                        ? fmt::format("; {} without a framework counterpart left out (--runnable)", adv.not_runnable)
                        : "");
  if (!r.options.tp.empty()) os << fmt::format("# {}\n", sim::gemm_line(t.gpu));
  print_table(os, r, adv, top);
  print_best(os, r, adv);
  for (const auto& x : adv.refused) os << fmt::format("# refused: {}: {}\n", x.label, x.reason);
}

}  // namespace charm::app
