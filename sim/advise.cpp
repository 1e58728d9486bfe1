#include "sim/advise.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <thread>
#include <tuple>

#include "scheduler/planners/planners.hpp"
#include "sim/evaluate.hpp"

namespace charm::sim {

using namespace charm::ir;

std::string Candidate::label() const {
  std::string s = algo;
  if (sched::uses_domains(algo)) s += fmt::format(" d={}", domains);
  return s + " [" + std::string(to_string(layout)) + "]";
}

namespace {

struct Job {
  std::size_t candidate = 0;
  Phase phase = Phase::Fwd;
  sched::PlanRequest req;
  std::optional<PassOutcome> out;
  std::string error;
};

} // namespace

Expected<Advice> advise(const Workload& w, const topo::Topology& t, const AdviseOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  Advice adv;
  adv.ranks = opt.ranks > 0 ? opt.ranks : t.num_gpus();
  adv.pass = w.pass;
  if (adv.ranks > t.num_gpus())
    return Error{"--ranks", fmt::format("the topology has {} GPUs, asked for {}", t.num_gpus(), adv.ranks)};
  const auto& names = sched::algorithm_names();
  std::vector<std::string> algos = opt.algos.empty() ? names : opt.algos;
  for (const auto& a : algos)
    if (std::find(names.begin(), names.end(), a) == names.end())
      return Error{"--algos", fmt::format("unknown algorithm '{}'", a)};

  std::vector<Layout> layouts;
  if (opt.layout) layouts = {*opt.layout};
  else if (w.causal) layouts = {Layout::Contiguous, Layout::Zigzag};
  else layouts = {Layout::Contiguous};
  std::vector<int> split;  // domain counts for algorithms that use them
  if (opt.domains) {
    split = {*opt.domains};
  } else {
    for (int d = 2; d < adv.ranks; ++d)
      if (adv.ranks % d == 0) split.push_back(d);
    if (split.empty()) split = {1};
  }

  // Candidates, each once: a forced layout or an unused domain count collapses to one.
  std::vector<Candidate> cands;
  std::set<std::tuple<std::string, Layout, int>> seen;
  std::vector<Job> jobs;
  for (const auto& a : algos) {
    for (Layout l : layouts) {
      for (int d : sched::uses_domains(a) ? split : std::vector<int>{1}) {
        Workload wl = w;
        wl.layout = l;
        sched::PlanRequest req = normalised_request({a, wl, adv.ranks, d});
        // "ring-zigzag" is ring on the zigzag layout (tasp-zigzag likewise): one candidate, not two.
        std::string base = a;
        if (const auto k = base.rfind("-zigzag"); k != std::string::npos && k + 7 == base.size() &&
            std::find(algos.begin(), algos.end(), base.substr(0, k)) != algos.end() &&
            (!w.causal || std::find(layouts.begin(), layouts.end(), Layout::Zigzag) != layouts.end()))
          base = base.substr(0, k);
        // Without a mask the layout only relabels tokens: one layout is one candidate.
        if (!seen.insert({base, w.causal ? req.workload.layout : Layout::Contiguous, d}).second) continue;
        Candidate c;
        c.algo = a;
        c.layout = req.workload.layout;
        c.domains = d;
        std::vector<Phase> phases;
        if (w.pass != PassKind::Bwd) phases.push_back(Phase::Fwd);
        if (w.pass != PassKind::Fwd) phases.push_back(Phase::Bwd);
        bool refused = false;
        if (opt.max_plan_bytes > 0) {
          sched::PlanRequest rp = req;
          rp.workload.pass = w.pass;
          const auto e = sched::estimate_plan(rp);
          if (e.plan_bytes + 60 * e.ops > opt.max_plan_bytes) {  // the simulator's state, as for charm simulate
            adv.refused.push_back({c.label(), fmt::format("would need about {:.3g} GB for {:.2g} ops, over the memory budget",
                                                          (e.plan_bytes + 60 * e.ops) / 1e9, e.ops)});
            continue;
          }
        }
        for (Phase ph : phases) {
          sched::PlanRequest rp = req;
          rp.workload.pass = ph == Phase::Fwd ? PassKind::Fwd : PassKind::Bwd;
          if (auto st = sched::check_request(rp); !st) {
            adv.refused.push_back({c.label(), st.error().message()});
            refused = true;
            break;
          }
        }
        if (refused) continue;
        for (Phase ph : phases) {
          Job j;
          j.candidate = cands.size();
          j.phase = ph;
          j.req = req;
          j.req.workload.pass = ph == Phase::Fwd ? PassKind::Fwd : PassKind::Bwd;
          jobs.push_back(std::move(j));
        }
        cands.push_back(std::move(c));
      }
    }
  }

  // Independent simulations: a pool of workers takes the next one.
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (;;) {
      const std::size_t i = next.fetch_add(1);
      if (i >= jobs.size()) return;
      Job& j = jobs[i];
      auto ev = evaluate(j.req, t);
      if (!ev) {
        j.error = ev.error().message();
        continue;
      }
      const Explanation ex = explain(ev->plan, ev->result, t);
      j.out = PassOutcome{ev->summary.time_s * 1e3, ev->summary.peak_mem_bytes, ex.bottleneck,
                          path_shares_text(ex.path, ev->result.makespan_s)};
    }
  };
  {
    const int n = std::clamp(opt.jobs, 1, std::max(1, int(jobs.size())));
    std::vector<std::jthread> pool;
    for (int k = 0; k < n; ++k) pool.emplace_back(worker);
  }
  adv.simulations = jobs.size();
  for (auto& j : jobs) {
    if (!j.error.empty())
      return Error{"simulate", fmt::format("{} {}: {}", cands[j.candidate].label(), to_string(j.phase), j.error)};
    (j.phase == Phase::Fwd ? cands[j.candidate].fwd : cands[j.candidate].bwd) = std::move(j.out);
  }
  for (auto& c : cands) {
    const PassOutcome* slower = nullptr;
    for (const auto* p : {c.fwd ? &*c.fwd : nullptr, c.bwd ? &*c.bwd : nullptr}) {
      if (!p) continue;
      c.total_ms += p->time_ms;
      c.peak_mem_bytes = std::max(c.peak_mem_bytes, p->peak_mem_bytes);
      if (!slower || p->time_ms > slower->time_ms) slower = p;
    }
    c.memory = memory_verdict(c.peak_mem_bytes, opt.reserved_gb, t.gpu);
    if (slower) c.bottleneck = fmt::format("{}: {}", slower == (c.fwd ? &*c.fwd : nullptr) ? "fwd" : "bwd", slower->bottleneck.line());
  }
  // Fastest first; among equal times the smaller memory, then the input order (stable).
  std::stable_sort(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) {
    if (a.total_ms != b.total_ms) return a.total_ms < b.total_ms;
    return a.peak_mem_bytes < b.peak_mem_bytes;
  });
  adv.candidates = std::move(cands);
  adv.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return adv;
}

} // namespace charm::sim
