#pragma once
// The workload of one attention layer and the byte/FLOP arithmetic that follows from it.
//
// A rank owns one *shard* of the sequence: S/n tokens, as one contiguous chunk
// (layout contiguous), as chunks r and 2n-1-r of 2n (layout zigzag, the causal
// load-balancing layout), or as the chunks its chunk map lists (layout balanced:
// packed documents placed by a solver, sim/chunk_solver). All mask and FLOP questions are answered from the
// global token positions of the shards, so every layout is handled by one rule:
// key position <= query position under a causal mask.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "support/dtype.hpp"
#include "support/expected.hpp"

namespace charm::ir {

using Bytes = std::uint64_t;
using Flops = double;

// Element types live below every layer (support/dtype.hpp); the IR names them as its own.
using charm::DType;
using charm::dtype_size;
using charm::parse_dtype;
using charm::to_string;
enum class Layout : std::uint8_t { Contiguous, Zigzag, Balanced };
enum class PassKind : std::uint8_t { Fwd, Bwd, Both };
/// The pass an individual op belongs to (a plan for PassKind::Both holds both).
enum class Phase : std::uint8_t { Fwd, Bwd };

[[nodiscard]] std::string_view to_string(Layout l);
[[nodiscard]] std::string_view to_string(PassKind p);
[[nodiscard]] std::string_view to_string(Phase p);
[[nodiscard]] Expected<Layout> parse_layout(std::string_view s);
[[nodiscard]] Expected<PassKind> parse_pass(std::string_view s);

/// FlashAttention's FLOP count, the one formula every layer uses: 4 x head_dim for each visible (query, key)
/// pair of each head forward (QK^T and PV, a multiply-add each), 2.5 times that backward. Multiplied in this
/// order: the products of integers stay exact while they fit a double's 53 bits.
[[nodiscard]] constexpr Flops attention_flops(double batch, double heads, double head_dim, double pairs, Phase phase) {
  const double fwd = 4.0 * batch * heads * head_dim * pairs;
  return phase == Phase::Fwd ? fwd : 2.5 * fwd;
}

/// The shape of the part of a (q shard, kv shard) block that the mask leaves.
enum class MaskPiece : std::uint8_t {
  Empty,         // nothing visible: the pair is skipped
  Full,          // every query sees every key
  Causal,        // the diagonal block of the contiguous layout: lower triangle
  ZigzagDiag,    // zigzag, same rank: two triangles and one full chunk pair
  ZigzagKvHead,  // zigzag, kv owner before q owner: all queries, first kv chunk
  ZigzagQTail,   // zigzag, kv owner after q owner: second q chunk, all keys
  Mixed,         // a compute over several owners (Ulysses, USP): a piece per pair, from positions
  Positions,     // packed documents or a sliding window: each query's keys from positions (some visible)
};
[[nodiscard]] std::string_view to_string(MaskPiece m);
[[nodiscard]] Expected<MaskPiece> parse_mask_piece(std::string_view s);

/// Bounds of a workload's counts. Regions and plan buffers hold head ranges in
/// 32-bit fields, and byte counts multiply the counts together; within these
/// every such field and product is exact (2^20 heads is far beyond any model).
inline constexpr std::int64_t kMaxBatch = std::int64_t{1} << 20;
inline constexpr std::int64_t kMaxHeads = std::int64_t{1} << 20;  // query and kv heads
inline constexpr std::int64_t kMaxHeadDim = std::int64_t{1} << 20;
/// batch * seq * heads * head_dim: 2^50 elements of one tensor is beyond any GPU.
inline constexpr std::int64_t kMaxElements = std::int64_t{1} << 50;

struct Workload {
  /// Token positions [begin, begin + count) of the sequence.
  struct Range {
    std::int64_t begin;
    std::int64_t count;
    [[nodiscard]] bool operator==(const Range& o) const { return begin == o.begin && count == o.count; }
  };

  std::int64_t batch = 1;
  std::int64_t seq = 4096;    // global sequence length S
  std::int64_t heads = 8;     // query heads
  std::int64_t kv_heads = 8;  // key/value heads (GQA when < heads)
  std::int64_t head_dim = 128;
  DType dtype = DType::BF16;
  bool causal = false;
  Layout layout = Layout::Contiguous;
  PassKind pass = PassKind::Fwd;
  /// Packed documents (with causal: a query sees the keys of its own document only): token counts in
  /// sequence order, summing to seq (cu_seqlens' differences). Empty: one document.
  std::vector<std::int64_t> documents;
  /// Sliding window (with causal): a query sees the `window` most recent keys, itself included. 0: none.
  std::int64_t window = 0;
  /// Layout balanced (its chunk map): rank r's chunks of the sequence in its local token order, S/n tokens a rank,
  /// every position on exactly one rank (check_chunk_map). Empty on the other layouts.
  std::vector<std::vector<Range>> chunk_map;

  [[nodiscard]] bool operator==(const Workload& o) const;

  /// A causal mask with documents or a window: visibility comes from positions (MaskPiece::Positions), not from a
  /// shape. (check refuses documents and windows without causal.)
  [[nodiscard]] bool position_mask() const { return causal && (!documents.empty() || window > 0); }
  /// TransformerEngine's THD layout: packed documents, each zigzag on its own.
  [[nodiscard]] bool thd() const { return layout == Layout::Zigzag && !documents.empty(); }
  /// THD's blocks in closed form (thd_block_pairs): causal documents without a window, each zigzag on its own.
  [[nodiscard]] bool thd_blocks() const { return causal && window == 0 && thd(); }
  /// The first key position query position q sees (causal: q is the last); 0 without a position mask.
  [[nodiscard]] std::int64_t first_visible(std::int64_t q) const;
  /// (query, key) pairs the mask leaves visible between position ranges [qa, qb) and [ka, kb).
  [[nodiscard]] double pairs_in(std::int64_t qa, std::int64_t qb, std::int64_t ka, std::int64_t kb) const;
  /// With a position mask: the pairs_in of every query range of `qs` against every key range of `ks` (each list
  /// in position order), summed query range by query range, visiting only the key ranges it can see.
  [[nodiscard]] double position_pairs(const std::vector<Range>& qs, const std::vector<Range>& ks) const;
  /// "causal", "full", "document:4096,1024,...", "sliding:4096" (the --mask spelling).
  [[nodiscard]] std::string mask_text() const;

  /// Checks the workload on its own and against a rank count; names the offending field.
  [[nodiscard]] Status check(int ranks) const;
  /// With packed documents on the zigzag layout (each document zigzag on its own, TransformerEngine's THD
  /// layout): every document a multiple of 2 x ranks tokens, or the error naming the padded length.
  [[nodiscard]] Status check_zigzag_documents(int ranks) const;
  /// Layout balanced: packed documents and a chunk map of `ranks` shards of S/n tokens covering the sequence.
  [[nodiscard]] Status check_chunk_map(int ranks) const;

  [[nodiscard]] std::int64_t chunks(int ranks) const { return layout == Layout::Zigzag ? 2 * ranks : ranks; }
  [[nodiscard]] std::int64_t shard_tokens(int ranks) const { return seq / ranks; }
  /// Global positions of rank r's tokens, as (first, count) chunk ranges in local order. Zigzag: chunks r and
  /// 2N-1-r of the sequence, or, with packed documents, of each document in turn (TransformerEngine's THD layout).
  /// Balanced: the chunk map's.
  [[nodiscard]] std::vector<Range> shard_ranges(int rank, int ranks) const;

  [[nodiscard]] MaskPiece mask(int q_rank, int kv_rank, int ranks) const;
  /// (query, key) pairs left visible by the mask between two shards.
  [[nodiscard]] double visible_pairs(int q_rank, int kv_rank, int ranks) const;

  // Bytes of the bundles that travel (per shard). Elements of Q, K, V, dO and
  // the partial O are in `dtype`; LSE and D are fp32; gradient partials (dQ, dK,
  // dV) are fp32, as in ring-flash-attention, because they are accumulated, except
  // RM+'s dK/dV partials, which go home once in `dtype` as the backward kernel writes them.
  [[nodiscard]] Bytes q_bytes(int ranks) const;        // Q
  [[nodiscard]] Bytes kv_bytes(int ranks) const;       // K and V
  [[nodiscard]] Bytes out_bytes(int ranks) const;      // partial O + LSE
  [[nodiscard]] Bytes do_bytes(int ranks) const;       // dO
  [[nodiscard]] Bytes qbundle_bytes(int ranks) const;  // backward bundle: Q, dO, LSE, D
  [[nodiscard]] Bytes dq_bytes(int ranks) const;       // dQ partial (fp32)
  /// dK and dV partial: fp32, or in `dtype` where it is held as the backward kernel writes it
  /// (Buffer::activations_dtype: RM+'s partials that go home once).
  [[nodiscard]] Bytes dkv_bytes(int ranks, bool activations_dtype = false) const;

  /// FLOPs of one block pair under its mask, as FlashAttention counts them:
  /// forward 4*B*Hq*D per visible pair (QK^T and PV), backward 2.5x forward.
  [[nodiscard]] Flops block_flops(Phase phase, int q_rank, int kv_rank, int ranks) const;
};

/// Visible (query, key) pairs between queries [qa, qb) and keys [ka, kb) of one document under a causal mask with
/// a window of `window` tokens (0: none): each query p sees the keys [max(ka, p - window + 1), min(kb - 1, p)].
/// Exact below 2^53 pairs.
[[nodiscard]] double band_pairs(std::int64_t qa, std::int64_t qb, std::int64_t ka, std::int64_t kb,
                                std::int64_t window);

/// The visible pairs of block (q_rank, kv_rank) of `documents` under THD's cut (each document zigzag on its own
/// over `ranks`), causal, without a window: in closed form, O(documents).
[[nodiscard]] double thd_block_pairs(const std::vector<std::int64_t>& documents, int q_rank, int kv_rank, int ranks);

/// THD's cut of w's documents as a chunk map (each document's chunks r and 2n-1-r on rank r: the zigzag layout's
/// shards), where every document is a multiple of 2n tokens; empty otherwise.
[[nodiscard]] std::vector<std::vector<Workload::Range>> thd_chunk_map(const Workload& w, int ranks);

/// Sets w's mask from its --mask spelling: causal | full | document:L1,L2,... | sliding:W (documents and
/// windows are causal). Errors name --mask; the lengths' sum is checked against seq by Workload::check.
[[nodiscard]] Status apply_mask(Workload& w, std::string_view spec);

}  // namespace charm::ir
