#pragma once
// `charm advise`: which algorithm, layout and domain split runs one attention
// workload fastest on one topology, and why. Every candidate is planned and
// simulated (forward and backward), ranked by the time of the passes asked for,
// and given its peak buffer memory, a fits verdict against the GPU's memory and
// the resource that bounds it (sim/explain.hpp).
//
// Candidates: every algorithm (or those asked for) x layout x domains, where
//   - layout: both layouts for a causal mask (the mask decides the balance), the
//     contiguous one otherwise (without a mask the layouts cost the same), or the
//     one given; an algorithm that forces a layout runs once, on it, and not at all
//     when its base algorithm runs on that layout too (ring-zigzag is ring [zigzag])
//     or when there is no mask;
//   - domains: for algorithms whose schedule depends on them (charm: domains of
//     the cross-hardware pipeline; usp: ring degree, so Ulysses degree = ranks /
//     domains), every divisor d of the rank count with 1 < d < ranks, or the one given;
//     the others run once.
// A candidate the planner refuses (a constraint of the algorithm) is listed
// with the planner's reason, not ranked.
// With AdviseOptions::tp, every candidate above is tried in each CP x TP layout of
// the topology's GPUs (CP = GPUs / TP), all CP groups at once on TP's share of the
// heads. The time is then the whole attention block's: core attention plus the QKV and output projection
// GEMMs and tensor parallelism's all-gathers and reduce-scatters around them (sim/tensor_parallel.hpp).

#include <optional>
#include <string>
#include <vector>

#include "scheduler/ir/workload.hpp"
#include "scheduler/planners/estimate.hpp"
#include "scheduler/planners/layout.hpp"
#include "sim/chunk_solver.hpp"
#include "sim/explain.hpp"
#include "sim/tensor_parallel.hpp"
#include "topologies/topology.hpp"

namespace charm::sim {

struct AdviseOptions {
  std::vector<std::string> algos;    // empty: every algorithm
  std::optional<ir::Layout> layout;  // unset: both layouts when causal
  std::optional<int> domains;        // unset: every divisor for charm and usp
  int ranks = 0;                     // 0: every GPU of the topology
  double reserved_gb = 0;            // memory the rest of the model holds per GPU
  int jobs = 1;                      // simulations at once
  sched::MemoryBudget budget;        // a candidate whose plan and simulation would need more is refused
  /// Tensor-parallel sizes to search (every GPU of the topology in CP x TP layouts, every CP group at
  /// once, each on TP's share of the heads); empty: one CP group on `ranks` GPUs.
  std::vector<int> tp;
  sched::LayoutOrder order = sched::LayoutOrder::TpInner;
  bool runnable_only = false;  // only candidates some framework runs (FrameworkSettings::runnable)
  ChunkSolveOptions chunks;    // the balanced layout's solver (packed documents)
};

struct PassOutcome {
  double time_ms = 0;
  ir::Bytes peak_mem_bytes = 0;
  Bottleneck bottleneck;
  std::string critical_path;      // path_shares_text (core attention's)
  std::optional<TpBlockCost> tp;  // a layout search's: what tensor parallelism adds, in time_ms
};

struct Candidate {
  std::string algo;
  ir::Layout layout = ir::Layout::Contiguous;
  int domains = 1;
  int tp = 0;  // a CP x TP layout's TP size (0: one CP group, no layout)
  int cp = 0;  // ... and its CP size
  std::optional<PassOutcome> fwd, bwd;
  std::optional<ChunkSolution> chunks;  // the balanced layout's: how its chunk map was solved
  double total_ms = 0;                  // the passes asked for, added
  ir::Bytes peak_mem_bytes = 0;         // the larger of the passes' peaks
  MemoryVerdict memory;
  std::string bottleneck;  // of the slower pass, with the pass named: "bwd: nic link ..."
  bool runnable = false;   // a framework runs it (sim/frameworks.hpp)
  /// Candidates whose every figure equals this one's (merged into it: one row, their labels here).
  std::vector<std::string> variants;
  /// A name for tables: "charm d=2 [zigzag]", "cp8xtp2 charm d=2 [contiguous]" in a layout search.
  [[nodiscard]] std::string label() const;
};

struct Refusal {
  std::string label;   // algo [d=..] layout
  std::string reason;  // the planner's message
};

struct Advice {
  int ranks = 0;
  ir::PassKind pass = ir::PassKind::Both;
  std::vector<Candidate> candidates;  // sorted by total_ms, fastest first
  std::vector<Refusal> refused;
  std::size_t not_runnable = 0;  // left out by AdviseOptions::runnable_only
  std::size_t simulations = 0;
  double wall_s = 0;
};

/// Errors: an unknown algorithm name, a rank count the topology cannot hold,
/// a simulator failure (a bug, not a refusal).
[[nodiscard]] Expected<Advice> advise(const ir::Workload& w, const topo::Topology& t, const AdviseOptions& opt);

}  // namespace charm::sim
