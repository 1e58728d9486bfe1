#pragma once
// The balanced layout's solver: which chunks of which packed documents each rank holds.
//
// Every rank holds S/n tokens. A candidate lays the documents along the ring in two
// streams, the long documents and the short ones, each cut where a rank's share ends:
// rank r takes x tokens of the long stream and S/n - x of the short one, x chosen so that
// the rank's visible pairs come nearest to an equal share of the pairs still to place. A
// document cut over ranks a..b lies on consecutive ranks in ring order with its positions
// rising, so its keys travel forward a few hops only (the ring's reach on the balanced
// layout, scheduler/planners/ring.cpp), and a document kept whole on one rank sends its keys
// nowhere. Candidates differ in which documents count as long (more than theta x S/n tokens)
// and in the streams' orders; TransformerEngine's THD layout is one more candidate where every
// document is a multiple of 2n tokens. Each candidate is planned and simulated with the
// request's algorithm on the topology, and the least makespan wins (a tie: the earlier
// candidate), so the result is never slower than THD where THD applies.
//
// Deterministic for a seed: the structured candidates always run, then seeded shuffles of the
// long documents' order until `shuffles` or the time budget (a budget that stops them is reported).
// Candidates are planned and simulated `jobs` at a time, each on a thread of its own, and judged in
// their order afterwards: the job count changes how long the solver takes, never what it chooses
// from the candidates it tried.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <functional>

#include "scheduler/ir/workload.hpp"
#include "scheduler/planners/planners.hpp"
#include "sim/compute_model.hpp"
#include "support/expected.hpp"
#include "topologies/topology.hpp"

namespace charm::sim {

using ChunkMap = std::vector<std::vector<ir::Workload::Range>>;

struct ChunkSolveOptions {
  double budget_ms = 500;  // the shuffles stop once this much time has gone
  std::uint64_t seed = 1;  // the shuffles' order
  int shuffles = 16;       // seeded shuffles tried after the structured candidates
  int jobs = 1;            // candidates planned and simulated at once (the memory of as many simulations held)
  /// Told after each candidate: how many were planned and simulated, and the most there will be (the
  /// structured ones and the shuffles). May be empty.
  std::function<void(std::size_t tried, std::size_t most)> progress;
};

/// One chunk map's figures: its simulated time, the bytes its plan sends, and its load imbalance (the
/// most visible pairs a rank's queries hold over the mean).
struct ChunkFigures {
  Seconds makespan_s = 0;
  double sent_bytes = 0;
  double imbalance = 1;
};

struct ChunkSolution {
  ChunkMap chunk_map;
  std::string candidate;  // how the winner was built: "thd", "streams theta=1 long-desc short-seq", ...
  ChunkFigures best;
  std::optional<ChunkFigures> thd;  // TransformerEngine's THD layout, where every document is a multiple of 2n tokens
  ChunkFigures contiguous;          // the sequence cut in n equal runs
  int candidates = 0;               // planned and simulated
  std::vector<std::pair<std::string, Seconds>> tried;  // every candidate's name and simulated time, in order
  double solve_ms = 0;
  bool budget_hit = false;  // the time budget stopped the shuffles (a faster machine may try more)

  /// "streams theta=1 ... of 22 candidates in 212 ms: 23.1 ms simulated (THD 82.4 ms, contiguous 40.1 ms)".
  [[nodiscard]] std::string line() const;
};

/// The most visible pairs a rank's queries hold over the mean, for rank r's chunks map[r].
[[nodiscard]] double chunk_imbalance(const ir::Workload& w, const ChunkMap& map);

/// Solves `req`'s chunk map (its layout balanced, with packed documents) for its algorithm on `t` (ranks on
/// the first GPUs). Errors: the request's, or a simulation's.
[[nodiscard]] Expected<ChunkSolution> solve_chunk_map(const sched::PlanRequest& req, const topo::Topology& t,
                                                      const ChunkSolveOptions& options = {});

}  // namespace charm::sim
