#include "sim/chunk_solver.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>

#include "sim/evaluate.hpp"
#include "sim/simulator.hpp"
#include "support/parallel_for.hpp"

namespace charm::sim {

namespace {

using Range = ir::Workload::Range;

struct Doc {
  std::int64_t start = 0, len = 0;
};

/// Visible pairs of rows [a, b) of one causal document against its own keys: rows q see q + 1 keys.
double doc_pairs(std::int64_t a, std::int64_t b) { return (double(b) * double(b + 1) - double(a) * double(a + 1)) / 2; }

/// Documents laid one after another: a run of the stream is a run of chunks of them.
class Stream {
 public:
  explicit Stream(std::vector<Doc> docs) : docs_(std::move(docs)) {
    for (const Doc& d : docs_) ends_.push_back((ends_.empty() ? 0 : ends_.back()) + d.len);
  }
  [[nodiscard]] std::int64_t tokens() const { return ends_.empty() ? 0 : ends_.back(); }
  /// Calls fn(document, first row, end row) for each document that [u, v) of the stream crosses.
  template <class Fn>
  void each(std::int64_t u, std::int64_t v, Fn&& fn) const {
    auto i = std::size_t(std::upper_bound(ends_.begin(), ends_.end(), u) - ends_.begin());
    for (; i < docs_.size() && u < v; ++i) {
      const std::int64_t begin = ends_[i] - docs_[i].len, end = std::min(v, ends_[i]);
      fn(docs_[i], u - begin, end - begin);
      u = end;
    }
  }
  [[nodiscard]] double pairs(std::int64_t u, std::int64_t v) const {
    double sum = 0;
    each(u, v, [&](const Doc&, std::int64_t a, std::int64_t b) { sum += doc_pairs(a, b); });
    return sum;
  }
  void append_ranges(std::int64_t u, std::int64_t v, std::vector<Range>& out) const {
    each(u, v, [&](const Doc& d, std::int64_t a, std::int64_t b) { out.push_back({d.start + a, b - a}); });
  }

 private:
  std::vector<Doc> docs_;
  std::vector<std::int64_t> ends_;
};

/// The long stream's tokens x of a rank at (u, v) with `tokens` to hold, whose pairs come nearest `target`
/// (a rank's pairs grow with x where the long documents' rows see more keys than the short ones').
std::int64_t long_share(const Stream& lng, const Stream& shrt, std::int64_t u, std::int64_t v, std::int64_t tokens,
                        double target) {
  const auto f = [&](std::int64_t x) { return lng.pairs(u, u + x) + shrt.pairs(v, v + tokens - x); };
  std::int64_t lo = std::max<std::int64_t>(0, tokens - (shrt.tokens() - v)), hi = std::min(tokens, lng.tokens() - u);
  if (f(lo) >= target) return lo;
  if (f(hi) <= target) return hi;
  while (hi - lo > 1) {  // f(lo) < target < f(hi)
    const std::int64_t mid = lo + (hi - lo) / 2;
    (f(mid) < target ? lo : hi) = mid;
  }
  return target - f(lo) <= f(hi) - target ? lo : hi;
}

/// A rank's chunks in position order (a shard's local order, as the kernels walk it), neighbours joined.
void in_position_order(std::vector<Range>& chunks) {
  std::sort(chunks.begin(), chunks.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  std::vector<Range> joined;
  for (const Range& c : chunks)
    if (!joined.empty() && joined.back().begin + joined.back().count == c.begin)
      joined.back().count += c.count;
    else
      joined.push_back(c);
  chunks = std::move(joined);
}

/// The two streams cut rank by rank, each rank's pairs aimed at an equal share of those left.
ChunkMap streams_chunk_map(const Stream& lng, const Stream& shrt, int ranks) {
  const std::int64_t tokens = (lng.tokens() + shrt.tokens()) / ranks;
  double left = lng.pairs(0, lng.tokens()) + shrt.pairs(0, shrt.tokens());
  ChunkMap map(static_cast<std::size_t>(ranks));
  std::int64_t u = 0, v = 0;
  for (int r = 0; r < ranks; ++r) {
    const std::int64_t x = long_share(lng, shrt, u, v, tokens, left / double(ranks - r));
    lng.append_ranges(u, u + x, map[std::size_t(r)]);
    shrt.append_ranges(v, v + tokens - x, map[std::size_t(r)]);
    left -= lng.pairs(u, u + x) + shrt.pairs(v, v + tokens - x);
    u += x;
    v += tokens - x;
  }
  for (auto& chunks : map) in_position_order(chunks);
  return map;
}

std::vector<Doc> documents_of(const ir::Workload& w) {
  std::vector<Doc> docs;
  for (std::int64_t at = 0; const std::int64_t len : w.documents) {
    docs.push_back({at, len});
    at += len;
  }
  return docs;
}

/// The candidates the solution reports beside the winner.
enum class Baseline { None, Thd, Contiguous };

struct Candidate {
  std::string name;
  ChunkMap map;
  Baseline baseline = Baseline::None;
};

/// The structured candidates: THD where it applies, the contiguous cut, and the streams over thresholds and orders.
std::vector<Candidate> structured_candidates(const ir::Workload& w, int ranks) {
  std::vector<Candidate> out;
  if (ChunkMap thd = ir::thd_chunk_map(w, ranks); !thd.empty()) out.push_back({"thd", std::move(thd), Baseline::Thd});
  const std::vector<Doc> docs = documents_of(w);
  out.push_back({"contiguous", streams_chunk_map(Stream({}), Stream(docs), ranks), Baseline::Contiguous});
  const double share = double(w.seq / ranks);
  for (const double theta : {0.25, 0.5, 1.0, 2.0, 4.0})
    for (const bool long_desc : {true, false})
      for (const bool short_desc : {false, true}) {
        std::vector<Doc> lng, shrt;
        for (const Doc& d : docs) (double(d.len) > theta * share ? lng : shrt).push_back(d);
        if (lng.empty() || shrt.empty()) continue;
        const auto by_length = [](const Doc& a, const Doc& b) { return a.len > b.len; };
        if (long_desc) std::stable_sort(lng.begin(), lng.end(), by_length);
        if (short_desc) std::stable_sort(shrt.begin(), shrt.end(), by_length);
        out.push_back({fmt::format("streams theta={} long-{} short-{}", theta, long_desc ? "desc" : "seq",
                                   short_desc ? "desc" : "seq"),
                       streams_chunk_map(Stream(std::move(lng)), Stream(std::move(shrt)), ranks)});
      }
  return out;
}

/// A seeded shuffle of the long documents' order at a threshold drawn from the structured ones.
Candidate shuffled_candidate(const ir::Workload& w, int ranks, std::mt19937_64& rng, int k) {
  const std::vector<Doc> docs = documents_of(w);
  const double thetas[] = {0.25, 0.5, 1.0, 2.0, 4.0};
  const double theta = thetas[rng() % 5];
  std::vector<Doc> lng, shrt;
  for (const Doc& d : docs) (double(d.len) > theta * double(w.seq / ranks) ? lng : shrt).push_back(d);
  std::shuffle(lng.begin(), lng.end(), rng);
  std::shuffle(shrt.begin(), shrt.end(), rng);
  return {fmt::format("streams theta={} shuffle {}", theta, k),
          streams_chunk_map(Stream(std::move(lng)), Stream(std::move(shrt)), ranks)};
}

}  // namespace

double chunk_imbalance(const ir::Workload& w, const ChunkMap& map) {
  std::vector<double> pairs;
  for (const auto& chunks : map) {
    double p = 0;
    for (const Range& c : chunks) p += w.pairs_in(c.begin, c.begin + c.count, 0, w.seq);
    pairs.push_back(p);
  }
  const double mean = std::accumulate(pairs.begin(), pairs.end(), 0.0) / double(std::max<std::size_t>(pairs.size(), 1));
  return mean > 0 ? *std::max_element(pairs.begin(), pairs.end()) / mean : 1.0;
}

std::string ChunkSolution::line() const {
  std::string s = fmt::format("{} (best of {} candidates, {:.0f} ms{}): {:.3f} ms simulated, imbalance {:.2f}, "
                              "{:.3g} GB sent",
                              candidate, candidates, solve_ms, budget_hit ? ", stopped by --solve-ms" : "",
                              best.makespan_s * 1e3, best.imbalance, best.sent_bytes / 1e9);
  if (thd)
    s += fmt::format("; THD {:.3f} ms ({:.2f}x), imbalance {:.2f}, {:.3g} GB", thd->makespan_s * 1e3,
                     thd->makespan_s / best.makespan_s, thd->imbalance, thd->sent_bytes / 1e9);
  else
    s += "; THD: not every document is a multiple of 2 x ranks tokens";
  s += fmt::format("; contiguous {:.3f} ms ({:.2f}x), imbalance {:.2f}", contiguous.makespan_s * 1e3,
                   contiguous.makespan_s / best.makespan_s, contiguous.imbalance);
  return s;
}

namespace {
/// One candidate planned and simulated: its figures (sent bytes and imbalance too), or why it could not be.
struct Trial {
  Candidate candidate;
  Expected<ChunkFigures> figures = ChunkFigures{};
};

/// The candidates planned and simulated, `jobs` at a time; each trial is its candidate's alone.
void run_trials(std::vector<Trial>& trials, const sched::PlanRequest& req, const topo::Topology& t,
                const ComputeModel& model, int jobs, const std::function<void(std::size_t)>& done) {
  SimOptions sim_options;
  sim_options.critical_path = false;
  sim_options.peak_memory = false;
  parallel_for(
      trials.size(), jobs,
      [&](std::size_t i) {
        Trial& trial = trials[i];
        sched::PlanRequest r = req;
        r.workload.chunk_map = trial.candidate.map;
        auto plan = sched::make_plan(r);
        if (!plan) {
          trial.figures = plan.error();
          return;
        }
        auto sim = simulate(*plan, t, model, sim_options);
        if (!sim) {
          trial.figures = sim.error();
          return;
        }
        ChunkFigures f{sim->makespan_s, 0, chunk_imbalance(req.workload, trial.candidate.map)};
        for (const ir::Op& op : plan->ops())
          if (op.kind == ir::OpKind::Send) f.sent_bytes += double(op.bytes);
        trial.figures = f;
      },
      [&](std::size_t finished, std::size_t /*total*/) { done(finished); });
}

/// The trials judged in order, as they would be one by one: the least makespan wins, a tie the earlier.
Status judge(std::vector<Trial>& trials, ChunkSolution& best) {
  for (Trial& trial : trials) {
    if (!trial.figures) return trial.figures.error();
    const ChunkFigures& f = *trial.figures;
    Candidate& c = trial.candidate;
    ++best.candidates;
    best.tried.emplace_back(c.name, f.makespan_s);
    if (c.baseline == Baseline::Thd) best.thd = f;
    if (c.baseline == Baseline::Contiguous) best.contiguous = f;
    if (best.chunk_map.empty() || f.makespan_s < best.best.makespan_s) {
      best.best = f;
      best.candidate = std::move(c.name);
      best.chunk_map = std::move(c.map);
    }
  }
  return {};
}
}  // namespace

Expected<ChunkSolution> solve_chunk_map(const sched::PlanRequest& req_in, const topo::Topology& t,
                                        const ChunkSolveOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto elapsed_ms = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  const sched::PlanRequest req = sched::normalised(req_in);
  const ir::Workload& w = req.workload;
  if (w.layout != ir::Layout::Balanced || w.documents.empty() || w.window > 0)
    return Error{Field::Layout,
                 "the balanced layout places packed documents: give --mask document:... or cu_seqlens:FILE"};
  if (w.seq % req.ranks != 0)
    return Error{Field::Seq, fmt::format("sequence length {} cannot be split into {} equal shards", w.seq, req.ranks)};
  const ComputeModel model = compute_model_for(t, w);
  const int jobs = std::max(options.jobs, 1);
  ChunkSolution best;
  std::vector<Trial> trials;
  for (Candidate& c : structured_candidates(w, req.ranks)) trials.push_back({std::move(c)});
  const std::size_t most = trials.size() + std::size_t(std::max(options.shuffles, 0));
  const auto tell = [&](std::size_t finished) {
    if (options.progress) options.progress(std::size_t(best.candidates) + finished, most);
  };
  run_trials(trials, req, t, model, jobs, tell);
  if (auto s = judge(trials, best); !s) return s.error();
  std::mt19937_64 rng(options.seed);
  for (int k = 0; k < options.shuffles;) {
    if (elapsed_ms() > options.budget_ms) {
      best.budget_hit = true;
      break;
    }
    trials.clear();
    for (const int end = std::min(options.shuffles, k + jobs); k < end; ++k)
      trials.push_back({shuffled_candidate(w, req.ranks, rng, k)});
    run_trials(trials, req, t, model, jobs, tell);
    if (auto s = judge(trials, best); !s) return s.error();
  }
  best.solve_ms = elapsed_ms();
  return best;
}

}  // namespace charm::sim
