#pragma once
// The shards of a workload under a position mask (packed documents, a sliding window), each cut by document
// once: the planner counts every (query shard, key shard) block's visible pairs from them, and the simulator
// cuts each block into the varlen kernel's pieces (sim/varlen_tiles.hpp). Counting range by range instead
// bisects the documents for every range of both shards, once per block: ranks^2 blocks of thousands of ranges
// each for a balanced chunk map of many documents.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "scheduler/ir/workload.hpp"

namespace charm::ir {

class ShardDocuments {
 public:
  /// A token range of one document.
  struct Part {
    std::size_t document = 0;
    Workload::Range range;
  };

  /// `w` must outlive this; one thread's (parts are cut on first use).
  ShardDocuments(const Workload& w, int ranks);
  [[nodiscard]] const Workload& workload() const { return *w_; }
  [[nodiscard]] int ranks() const { return ranks_; }
  /// Rank r's tokens by document, then position (without documents, a window: one document, the sequence).
  [[nodiscard]] const std::vector<Part>& parts(int rank) const;
  /// The visible pairs of block (q_rank, kv_rank) under w's causal position mask: Workload::visible_pairs, in
  /// one pass over the two shards' parts, or in closed form where thd_cut() (integers in doubles: the same value
  /// below 2^53 pairs).
  [[nodiscard]] double pairs(int q_rank, int kv_rank) const;
  /// Every document cut as TransformerEngine's THD cuts it (the zigzag layout's shards, or a balanced chunk map
  /// equal to them: the chunk solver's THD candidate), causal, without a window.
  [[nodiscard]] bool thd_cut() const { return thd_cut_; }

 private:
  const Workload* w_;
  int ranks_;
  std::vector<std::int64_t> starts_;              // each document's first position, then seq
  mutable std::vector<std::vector<Part>> parts_;  // per rank, built on first use
  mutable std::vector<char> cut_;                 // per rank: parts_ built
  bool thd_cut_ = false;
};

}  // namespace charm::ir
