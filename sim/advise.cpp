#include "sim/advise.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <set>
#include <tuple>

#include "scheduler/planners/algorithms.hpp"
#include "scheduler/planners/planners.hpp"
#include "sim/evaluate.hpp"
#include "sim/frameworks.hpp"
#include "support/parallel_for.hpp"

namespace charm::sim {

using namespace charm::ir;

std::string Candidate::label() const {
  std::string s = tp > 0 ? fmt::format("cp{}xtp{} {}", cp, tp, algo) : algo;
  if (sched::uses_domains(algo)) s += fmt::format(" d={}", domains);
  return s + " [" + std::string(to_string(layout)) + "]";
}

namespace {

struct Job {
  std::size_t candidate = 0;
  Phase phase = Phase::Fwd;
  sched::PlanRequest req;
  std::optional<sched::Layout> layout;  // a deployment: req is one CP group's, placed `copies` times
  int copies = 1;
  std::optional<PassOutcome> out;
  std::string error;
};

/// The layouts to try: the forced one, else both when a causal mask makes them differ.
std::vector<Layout> layouts_to_try(const Workload& w, const AdviseOptions& opt) {
  if (opt.layout) return {*opt.layout};
  // Packed documents: the whole sequence in order, THD (each document zigzag), and the solver's chunks.
  if (!w.documents.empty() && w.window == 0) return {Layout::Contiguous, Layout::Zigzag, Layout::Balanced};
  if (w.causal) return {Layout::Contiguous, Layout::Zigzag};
  return {Layout::Contiguous};
}

/// Domain counts for algorithms that use them: the forced one, else every proper divisor > 1 of ranks.
std::vector<int> domain_split(int ranks, const AdviseOptions& opt) {
  if (opt.domains) return {*opt.domains};
  std::vector<int> split;
  for (int d = 2; d < ranks; ++d)
    if (ranks % d == 0) split.push_back(d);
  if (split.empty()) split = {1};
  return split;
}

/// The passes a workload runs.
std::vector<Phase> phases_of(PassKind pass) {
  std::vector<Phase> phases;
  if (pass != PassKind::Bwd) phases.push_back(Phase::Fwd);
  if (pass != PassKind::Fwd) phases.push_back(Phase::Bwd);
  return phases;
}

/// Why a candidate cannot run (the memory budget, or a planner refusing a pass), or nothing. `placed_groups`: the
/// CP groups a deployment places from the candidate's plan (0: one group, simulated as planned).
std::optional<std::string> refusal(const sched::PlanRequest& req, PassKind pass, const AdviseOptions& opt,
                                   int placed_groups) {
  if (std::isfinite(opt.budget.bytes)) {
    sched::PlanRequest rp = req;
    rp.workload.pass = pass;
    const auto e = sched::estimate_plan(rp);
    if (auto s = opt.budget.fits(
            sched::simulation_bytes(e, placed_groups),
            fmt::format("its plan and simulation (about {:.2g} ops)", e.ops * std::max(placed_groups, 1)), Field::None);
        !s)
      return s.error().what;
  }
  for (Phase ph : phases_of(pass)) {
    sched::PlanRequest rp = req;
    rp.workload.pass = ph == Phase::Fwd ? PassKind::Fwd : PassKind::Bwd;
    if (auto st = sched::check_request(rp); !st) return st.error().message();
  }
  return std::nullopt;
}

/// Candidates, each once (a forced layout or an unused domain count collapses to one), and a job per pass.
/// One CP group's candidates on `ranks` ranks (in `layout`, placed `copies` times, when searching layouts).
void plan_candidates(const Workload& w, const std::vector<std::string>& algos, const AdviseOptions& opt, int ranks,
                     const std::optional<sched::Layout>& layout, int copies, const topo::Topology& t, Advice& adv,
                     std::vector<Candidate>& cands, std::vector<Job>& jobs) {
  const std::vector<Layout> layouts = layouts_to_try(w, opt);
  const std::vector<int> split = domain_split(ranks, opt);
  std::set<std::tuple<std::string, Layout, int>> seen;
  for (const auto& a : algos)
    for (Layout l : layouts)
      for (int d : sched::uses_domains(a) ? split : std::vector<int>{1}) {
        Workload wl = w;
        wl.layout = l;
        sched::PlanRequest req = sched::normalised({a, wl, ranks, d});
        // An algorithm with a forced layout is its base on that layout (ring-zigzag is ring on zigzag): one
        // candidate, not two.
        std::string base = a;
        if (const sched::Algorithm* row = sched::find_algorithm(a);
            row != nullptr && !row->base.empty() && std::find(algos.begin(), algos.end(), row->base) != algos.end() &&
            (!w.causal || std::find(layouts.begin(), layouts.end(), Layout::Zigzag) != layouts.end()))
          base = std::string(row->base);
        // Without a mask the layout only relabels tokens: one layout is one candidate. A CP group of one GPU
        // communicates nothing: every algorithm is the same single kernel, one candidate (the first that plans).
        if (ranks == 1 && !seen.empty()) continue;
        if (!seen.insert({base, w.causal ? req.workload.layout : Layout::Contiguous, d}).second) continue;
        Candidate c;
        c.algo = a;
        c.layout = req.workload.layout;
        c.domains = d;
        if (layout) {
          c.tp = layout->tp;
          c.cp = layout->cp;
        }
        if (req.workload.layout == Layout::Balanced) {  // its chunks solved for this algorithm, both passes asked
          auto s = layout ? Expected<ChunkSolution>(Error{"", "the balanced layout is solved for one CP group"})
                          : solve_chunk_map(req, t, opt.chunks);
          if (!s) {
            adv.refused.push_back({c.label(), s.error().message()});
            continue;
          }
          req.workload.chunk_map = s->chunk_map;
          c.chunks = std::move(s).value();
        }
        if (auto why = refusal(req, w.pass, opt, layout ? copies : 0)) {
          adv.refused.push_back({c.label(), *why});
          continue;
        }
        for (Phase ph : phases_of(w.pass)) {
          Job j;
          j.candidate = cands.size();
          j.phase = ph;
          j.req = req;
          j.req.workload.pass = ph == Phase::Fwd ? PassKind::Fwd : PassKind::Bwd;
          j.layout = layout;
          j.copies = copies;
          jobs.push_back(std::move(j));
        }
        cands.push_back(std::move(c));
      }
}

/// Independent simulations, `threads` at a time (each job fills its own slot).
/// `block_model`: a layout search's whole workload (its jobs' times are attention blocks'), else null.
void run_jobs(std::vector<Job>& jobs, const topo::Topology& t, int threads, const Workload* block_model) {
  parallel_for(jobs.size(), threads, [&](std::size_t i) {
    Job& j = jobs[i];
    auto ev = j.layout ? evaluate_deployment(j.req, *j.layout, j.copies, t, block_model) : evaluate(j.req, t);
    if (!ev) {
      j.error = ev.error().message();
      return;
    }
    const Explanation ex = explain(ev->plan, ev->result, t);
    j.out = PassOutcome{ev->summary.time_s * 1e3, ev->summary.peak_mem_bytes, ex.bottleneck,
                        path_shares_text(ex.path, ev->result.makespan_s), ev->tp_block};
  });
}

/// Totals, peak memory, verdict and the slower pass's bottleneck of each candidate.
void summarise(std::vector<Candidate>& cands, const AdviseOptions& opt, const topo::Topology& t) {
  for (auto& c : cands) {
    const PassOutcome* slower = nullptr;
    for (const auto* p : {c.fwd ? &*c.fwd : nullptr, c.bwd ? &*c.bwd : nullptr}) {
      if (!p) continue;
      c.total_ms += p->time_ms;
      c.peak_mem_bytes = std::max(c.peak_mem_bytes, p->peak_mem_bytes);
      if (!slower || p->time_ms > slower->time_ms) slower = p;
    }
    c.memory = memory_verdict(c.peak_mem_bytes, opt.reserved_gb, t.gpu);
    if (slower)
      c.bottleneck =
          fmt::format("{}: {}", slower == (c.fwd ? &*c.fwd : nullptr) ? "fwd" : "bwd", slower->bottleneck.line());
  }
}

/// Whether two candidates' figures are the same (times to a part in 1e9, peak memory): one row for both.
bool same_figures(const Candidate& a, const Candidate& b) {
  auto near = [](double x, double y) { return std::abs(x - y) <= 1e-9 * std::max(std::abs(x), std::abs(y)); };
  auto pass_near = [&](const std::optional<PassOutcome>& x, const std::optional<PassOutcome>& y) {
    return x.has_value() == y.has_value() && (!x || near(x->time_ms, y->time_ms));
  };
  return a.tp == b.tp && a.cp == b.cp && near(a.total_ms, b.total_ms) && a.peak_mem_bytes == b.peak_mem_bytes &&
         pass_near(a.fwd, b.fwd) && pass_near(a.bwd, b.bwd);
}

/// Sorted candidates with equal figures merged, the runnable one (then the first) kept as the row.
std::vector<Candidate> merge_identical(std::vector<Candidate> sorted) {
  std::vector<Candidate> out;
  for (auto& c : sorted) {
    auto same = std::find_if(out.begin(), out.end(), [&](const Candidate& o) { return same_figures(o, c); });
    if (same == out.end()) {
      out.push_back(std::move(c));
      continue;
    }
    if (c.runnable && !same->runnable) {
      c.variants = std::move(same->variants);
      c.variants.push_back(same->label());
      *same = std::move(c);
    } else {
      same->variants.push_back(c.label());
    }
  }
  return out;
}

}  // namespace

Expected<Advice> advise(const Workload& w, const topo::Topology& t, const AdviseOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  Advice adv;
  adv.ranks = opt.ranks > 0 ? opt.ranks : t.num_gpus();
  adv.pass = w.pass;
  if (adv.ranks > t.num_gpus())
    return Error{Field::Ranks, fmt::format("the topology has {} GPUs, asked for {}", t.num_gpus(), adv.ranks)};
  const auto& names = sched::algorithm_names();
  std::vector<std::string> algos = opt.algos.empty() ? names : opt.algos;
  for (const auto& a : algos)
    if (std::find(names.begin(), names.end(), a) == names.end())
      return Error{Field::Algos, fmt::format("unknown algorithm '{}'", a)};
  std::vector<Candidate> cands;
  std::vector<Job> jobs;
  if (opt.tp.empty()) plan_candidates(w, algos, opt, adv.ranks, std::nullopt, 1, t, adv, cands, jobs);
  for (const int tp : opt.tp) {
    // A layout that does not tile the GPUs, or a TP that does not split the heads, is a refusal of its own.
    auto l = sched::make_tp_layout(t.num_gpus(), tp, opt.order);
    auto wg = l ? sched::group_workload(w, *l) : Expected<Workload>(l.error());
    if (!wg) {
      adv.refused.push_back({fmt::format("tp={}", tp), wg.error().message()});
      continue;
    }
    const auto q = deployment_copies(*l, t);
    // Domains for charm and usp: the divisors of the group's ranks (or the one given), as for one group.
    plan_candidates(*wg, algos, opt, l->cp, *l, q ? *q : l->groups(), t, adv, cands, jobs);
  }
  run_jobs(jobs, t, opt.jobs, opt.tp.empty() ? nullptr : &w);
  adv.simulations = jobs.size();
  for (auto& j : jobs) {
    if (!j.error.empty())
      return Error{"simulate", fmt::format("{} {}: {}", cands[j.candidate].label(), to_string(j.phase), j.error),
                   ErrorKind::RunFailed};
    (j.phase == Phase::Fwd ? cands[j.candidate].fwd : cands[j.candidate].bwd) = std::move(j.out);
  }
  summarise(cands, opt, t);
  for (auto& c : cands)
    c.runnable = framework_settings(c.algo, c.layout, w.causal, c.tp > 0 ? c.cp : adv.ranks, c.domains).runnable();
  if (opt.runnable_only) {
    const auto n = cands.size();
    std::erase_if(cands, [](const Candidate& c) { return !c.runnable; });
    adv.not_runnable = n - cands.size();
  }
  // Fastest first; among equal times the smaller memory, then the input order (stable).
  std::stable_sort(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) {
    if (a.total_ms != b.total_ms) return a.total_ms < b.total_ms;
    return a.peak_mem_bytes < b.peak_mem_bytes;
  });
  adv.candidates = merge_identical(std::move(cands));
  adv.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return adv;
}

}  // namespace charm::sim
