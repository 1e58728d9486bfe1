#pragma once
// The tiles a variable-length (varlen) attention kernel runs for one block of packed documents or a sliding
// window. Frameworks hand such a block to FlashAttention's varlen entry (cu_seqlens: each document's tokens of
// the two shards as a sequence of its own), whose grid has a thread block per (sequence, head, outer tile) and
// whose inner loop skips the tiles the mask hides. So a document's piece pays whole tiles at its own edges,
// and a block of many short documents runs many short loops, where one square block of the same visible pairs
// would run a few long ones.
//
//   piece      one document's queries in the q shard and its keys in the kv shard (a sliding window without
//              documents: the shards' tokens), each in ascending positions as one sequence of the kernel's, the
//              queries that see none of the keys and the keys no query sees left out (TransformerEngine's THD
//              steps: the second half of the queries, or the first half of the keys); a query p sees the keys
//              [first(p), p], first(p) = max(its document's start, p - window + 1)
//   forward    outer tiles over the piece's queries (tile.q), each looping over the key tiles (tile.kv) from
//              the one holding its first query's first key to the one holding its last query
//   backward   outer tiles over the keys (tile.q of the backward's tile), each looping over the query tiles
//              from the one holding its first key's first reader to the one holding its last key's last
//              (FlashAttention-2's backward: key-major)

#include <cstdint>
#include <span>
#include <vector>

#include "scheduler/ir/shard_documents.hpp"
#include "scheduler/ir/workload.hpp"
#include "topologies/gpu_arch.hpp"

namespace charm::sim {

/// One document's queries and keys of a block, as ascending, disjoint ranges of positions.
struct VarlenPiece {
  std::vector<ir::Workload::Range> q, k;
  double pairs = 0;  // visible (query, key) pairs
  /// Visible (query, key) pairs under a causal mask with `window` (0: none).
  [[nodiscard]] double count_pairs(std::int64_t window) const;
  /// The queries are the keys (a shard against itself): the kernel's causal triangle.
  [[nodiscard]] bool diagonal() const { return q == k; }
};

/// The varlen pieces of a workload's blocks, from its shards cut by document once (ir::ShardDocuments): a
/// simulation prices every (query shard, key shard) block of packed documents from them, 4,096 blocks a pass at
/// 64 ranks. `w` must outlive it; one thread's: pieces() reuses its storage.
class DocumentShards {
 public:
  using Part = ir::ShardDocuments::Part;
  DocumentShards(const ir::Workload& w, int ranks);
  [[nodiscard]] int ranks() const { return docs_.ranks(); }
  /// The pieces of the block (q_rank's queries x kv_rank's keys) under w's causal position mask, each with at
  /// least one visible pair, by document; none without a causal position mask. Valid until the next call.
  [[nodiscard]] std::span<const VarlenPiece> pieces(int q_rank, int kv_rank) const;
  /// Blocks of one shape hold the same pieces, each at other positions, which a kernel runs alike. Under THD's
  /// cut (ir::ShardDocuments::thd_cut) every document is cut the same way from its own start, so a block's shape
  /// is only whether its keys' rank is below, at or above its queries' (its pieces: both query chunks against the
  /// lower key chunk, the two chunks against themselves, or the upper query chunk against both key chunks).
  /// Otherwise every block is a shape of its own.
  [[nodiscard]] std::int64_t shape(int q_rank, int kv_rank) const;

 private:
  ir::ShardDocuments docs_;
  mutable std::vector<VarlenPiece> scratch_;  // pieces' storage, reused from call to call
};

/// DocumentShards(w, ranks).pieces(q_rank, kv_rank).
[[nodiscard]] std::vector<VarlenPiece> varlen_pieces(const ir::Workload& w, int q_rank, int kv_rank, int ranks);

/// The thread blocks' loops of one batch-head: their sum and the longest, in tile steps.
struct TileLoops {
  double sum = 0, longest = 0;
};

/// The loops the pieces' tiles run in the forward (fwd) or backward pass, `tile` being that pass's (outer, inner).
[[nodiscard]] TileLoops varlen_tile_loops(std::span<const VarlenPiece> pieces, std::int64_t window,
                                          topo::KernelTile tile, bool fwd);

}  // namespace charm::sim
