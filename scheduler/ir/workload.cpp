#include "scheduler/ir/workload.hpp"

#include "scheduler/ir/plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>

namespace charm::ir {

std::string_view to_string(Layout l) {
  switch (l) {
  case Layout::Contiguous:
    return "contiguous";
  case Layout::Zigzag:
    return "zigzag";
  case Layout::Balanced:
    return "balanced";
  }
  return "?";
}
std::string_view to_string(PassKind p) {
  switch (p) {
  case PassKind::Fwd:
    return "fwd";
  case PassKind::Bwd:
    return "bwd";
  case PassKind::Both:
    return "both";
  }
  return "?";
}
std::string_view to_string(Phase p) { return p == Phase::Fwd ? "fwd" : "bwd"; }

Expected<Layout> parse_layout(std::string_view s) {
  if (s == "contiguous") return Layout::Contiguous;
  if (s == "zigzag") return Layout::Zigzag;
  if (s == "balanced") return Layout::Balanced;
  return Error{"", fmt::format("unknown layout '{}' (expected contiguous, zigzag or balanced)", s)};
}
Expected<PassKind> parse_pass(std::string_view s) {
  if (s == "fwd") return PassKind::Fwd;
  if (s == "bwd") return PassKind::Bwd;
  if (s == "both") return PassKind::Both;
  return Error{"", fmt::format("unknown pass '{}' (expected fwd, bwd or both)", s)};
}

std::string_view to_string(MaskPiece m) {
  switch (m) {
  case MaskPiece::Empty:
    return "empty";
  case MaskPiece::Full:
    return "full";
  case MaskPiece::Causal:
    return "causal";
  case MaskPiece::ZigzagDiag:
    return "zigzag-diag";
  case MaskPiece::ZigzagKvHead:
    return "zigzag-kv-head";
  case MaskPiece::ZigzagQTail:
    return "zigzag-q-tail";
  case MaskPiece::Mixed:
    return "mixed";
  case MaskPiece::Positions:
    return "positions";
  }
  return "?";
}
Expected<MaskPiece> parse_mask_piece(std::string_view s) {
  for (auto m : {MaskPiece::Empty, MaskPiece::Full, MaskPiece::Causal, MaskPiece::ZigzagDiag, MaskPiece::ZigzagKvHead,
                 MaskPiece::ZigzagQTail, MaskPiece::Mixed, MaskPiece::Positions})
    if (to_string(m) == s) return m;
  return Error{"", fmt::format("unknown mask piece '{}'", s)};
}

Status Workload::check(int ranks) const {
  auto positive = [](std::int64_t v, Field field) -> Status {
    if (v <= 0) return Error{field, fmt::format("must be > 0, got {}", v)};
    return {};
  };
  if (auto s = positive(batch, Field::Batch); !s) return s;
  if (auto s = positive(seq, Field::Seq); !s) return s;
  if (auto s = positive(heads, Field::Heads); !s) return s;
  if (auto s = positive(kv_heads, Field::KvHeads); !s) return s;
  if (auto s = positive(head_dim, Field::HeadDim); !s) return s;
  auto at_most = [](std::int64_t v, std::int64_t max, Field field) -> Status {
    if (v > max) return Error{field, fmt::format("must be <= {}, got {}", max, v)};
    return {};
  };
  if (auto s = at_most(batch, kMaxBatch, Field::Batch); !s) return s;
  if (auto s = at_most(heads, kMaxHeads, Field::Heads); !s) return s;
  if (auto s = at_most(kv_heads, kMaxHeads, Field::KvHeads); !s) return s;
  if (auto s = at_most(head_dim, kMaxHeadDim, Field::HeadDim); !s) return s;
  if (ranks <= 0) return Error{Field::Ranks, fmt::format("must be > 0, got {}", ranks)};
  if (kv_heads > heads || heads % kv_heads != 0)
    return Error{Field::KvHeads,
                 fmt::format("{} query heads cannot be grouped over {} kv heads (must divide)", heads, kv_heads)};
  const auto c = chunks(ranks);
  if (seq % c != 0)
    return Error{Field::Seq, fmt::format("sequence length {} cannot be split into {} {} chunks for {} ranks", seq, c,
                                         to_string(layout), ranks)};
  if (!documents.empty() || window != 0) {
    if (!causal) return Error{Field::Mask, "documents and sliding windows are causal masks"};
    std::int64_t sum = 0;
    for (std::size_t i = 0; i < documents.size(); ++i) {
      if (documents[i] < 1)
        return Error{Field::Mask,
                     fmt::format("document {} has {} tokens; every document needs at least 1", i, documents[i])};
      sum += documents[i];
      if (sum > seq) break;
    }
    if (!documents.empty() && sum != seq)
      return Error{Field::Mask, fmt::format("the document lengths sum to {}{}, not the sequence length {}", sum,
                                            sum > seq ? " or more" : "", seq)};
    if (auto s = check_zigzag_documents(ranks); !s) return s;
    if (window < 0 || window > seq)
      return Error{Field::Mask, fmt::format("a sliding window is 1 to {} tokens (the sequence), got {}", seq, window)};
  }
  if (auto s = check_chunk_map(ranks); !s) return s;
  // Keep byte counts far from overflow.
  const double elems = double(batch) * double(seq) * double(heads) * double(head_dim);
  if (elems > double(kMaxElements))
    return Error{"workload", fmt::format("batch*seq*heads*head_dim = {:.3g} elements is too large", elems)};
  return {};
}

Status Workload::check_zigzag_documents(int ranks) const {
  if (layout != Layout::Zigzag || documents.empty()) return {};
  const std::int64_t unit = 2 * std::int64_t(ranks);
  for (std::size_t i = 0; i < documents.size(); ++i)
    if (documents[i] % unit != 0)
      return Error{Field::Mask,
                   fmt::format("document {} has {} tokens: the zigzag layout splits every document into 2 x {} = {} "
                               "chunks, as TransformerEngine's THD layout does, which pads each one to a multiple of "
                               "{} (cu_seqlens_padded): give {} tokens (padding included), or --layout contiguous",
                               i, documents[i], ranks, unit, unit, (documents[i] + unit - 1) / unit * unit)};
  return {};
}

Status Workload::check_chunk_map(int ranks) const {
  if (layout != Layout::Balanced) {
    if (!chunk_map.empty())
      return Error{"chunks",
                   "a chunk map is the balanced layout's; this workload's layout is " + std::string(to_string(layout))};
    return {};
  }
  if (documents.empty() || window > 0)
    return Error{Field::Layout,
                 "the balanced layout places packed documents: give --mask document:... or cu_seqlens:FILE"};
  if (chunk_map.empty())
    return Error{Field::Layout,
                 "the balanced layout's chunk map is solved against a topology (simulate, plan --topology, "
                 "run, advise) or read from a plan file; none was given"};
  if (std::int64_t(chunk_map.size()) != ranks)
    return Error{"chunks", fmt::format("has {} ranks' chunks, the plan {} ranks", chunk_map.size(), ranks)};
  std::vector<Range> all;
  for (std::size_t r = 0; r < chunk_map.size(); ++r) {
    std::int64_t tokens = 0, end = 0;
    for (const Range& c : chunk_map[r]) {
      if (c.count < 1 || c.begin < 0 || c.begin > seq - c.count)
        return Error{"chunks", fmt::format("rank {} has the chunk [{}, {}) outside the sequence [0, {})", r, c.begin,
                                           c.begin + c.count, seq)};
      // The kernels walk a shard's keys in position order, as in every other layout.
      if (c.begin < end)
        return Error{"chunks", fmt::format("rank {}'s chunks are not in position order (the one at {} after one "
                                           "ending at {})",
                                           r, c.begin, end)};
      end = c.begin + c.count;
      tokens += c.count;
      all.push_back(c);
    }
    if (tokens != seq / ranks)
      return Error{"chunks", fmt::format("rank {} holds {} tokens, not S/n = {}", r, tokens, seq / ranks)};
  }
  std::sort(all.begin(), all.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (std::size_t i = 0; i + 1 < all.size(); ++i)
    if (all[i].begin + all[i].count != all[i + 1].begin)
      return Error{"chunks", fmt::format("positions {} to {} are on no rank or on two",
                                         std::min(all[i].begin + all[i].count, all[i + 1].begin),
                                         std::max(all[i].begin + all[i].count, all[i + 1].begin))};
  return {};
}

std::vector<Workload::Range> Workload::shard_ranges(int rank, int ranks) const {
  if (layout == Layout::Contiguous) return {{rank * (seq / ranks), seq / ranks}};
  if (layout == Layout::Balanced) return chunk_map[std::size_t(rank)];
  if (documents.empty()) {
    const std::int64_t c = seq / (2 * ranks);
    return {{rank * c, c}, {(2 * ranks - 1 - rank) * c, c}};
  }
  // Packed documents: each one zigzag on its own (TransformerEngine's THD layout), its chunks r and
  // 2N-1-r to rank r, in sequence order; every document is a multiple of 2N tokens (check).
  std::vector<Range> out;
  out.reserve(2 * documents.size());
  std::int64_t start = 0;
  for (const std::int64_t len : documents) {
    const std::int64_t c = len / (2 * ranks);
    out.push_back({start + rank * c, c});
    out.push_back({start + (2 * ranks - 1 - rank) * c, c});
    start += len;
  }
  return out;
}

namespace {
// Visible (q, k) pairs between two chunk ranges of equal length under a causal mask.
double causal_pairs(Workload::Range q, Workload::Range k) {
  if (k.begin >= q.begin + q.count) return 0.0;                                // keys all after queries
  if (k.begin + k.count <= q.begin) return double(q.count) * double(k.count);  // all before
  // Equal, aligned chunks in every layout here: the diagonal.
  const double c = double(q.count);
  return c * (c + 1) / 2;
}
}  // namespace

namespace {
/// Sum over query positions q in [u, v) of document start s of the keys below K that q sees:
/// max(0, min(q, K - 1) - max(s, q - W + 1) + 1), W = 0 for no window. The summand is linear
/// between the breakpoints (K, s + W, K + W), so each piece is an arithmetic series.
double rows_below(std::int64_t u, std::int64_t v, std::int64_t s, std::int64_t W, std::int64_t K) {
  if (u >= v || K <= s) return 0;
  if (W <= 0) {  // no window: q - s + 1 keys up to K, then K - s (the same integers as the general sum below)
    double sum = 0;
    const std::int64_t a = std::max(u, s), b = std::min(v, K);
    if (a < b) sum += double(b - a) * double((a - s + 1) + (b - s)) / 2;
    if (const std::int64_t c = std::max(u, K); c < v) sum += double(v - c) * double(K - s);
    return sum;
  }
  const auto g = [&](std::int64_t q) {
    const std::int64_t lo = W > 0 ? std::max(s, q - W + 1) : s;
    return std::max<std::int64_t>(0, std::min(q, K - 1) - lo + 1);
  };
  std::int64_t cut[5] = {u, v, K, W > 0 ? s + W : u, W > 0 ? K + W : u};
  std::sort(cut, cut + 5);
  // In doubles: exact below 2^53 pairs, and no overflow for sequences of 2^50 tokens.
  double sum = 0;
  for (int i = 0; i + 1 < 5; ++i) {
    const std::int64_t x = std::max(cut[i], u), y = std::min(cut[i + 1], v);
    if (x < y) sum += double(y - x) * double(g(x) + g(y - 1)) / 2;
  }
  return sum;
}
}  // namespace

double band_pairs(std::int64_t qa, std::int64_t qb, std::int64_t ka, std::int64_t kb, std::int64_t window) {
  // Queries before ka see none of the keys; the others see the document's keys from ka on: start it there.
  return rows_below(std::max(qa, ka), qb, ka, window, kb);
}

std::int64_t Workload::first_visible(std::int64_t q) const {
  std::int64_t start = 0;
  for (std::int64_t s = 0; const std::int64_t len : documents) {
    if (s > q) break;
    start = s;
    s += len;
  }
  return window > 0 ? std::max(start, q - window + 1) : start;
}

namespace {
/// Where each document starts, then seq (one document: 0, seq).
std::vector<std::int64_t> document_starts(const Workload& w) {
  std::vector<std::int64_t> starts{0};
  for (const std::int64_t len : w.documents) starts.push_back(starts.back() + len);
  if (w.documents.empty()) starts.push_back(w.seq);
  return starts;
}

/// Causal pairs between [qa, qb) and [ka, kb) over documents starting at `starts` (then seq): only the
/// documents that hold both a query of [qa, qb) and a key of [ka, kb) are visited, found by bisection.
double pairs_between(const std::vector<std::int64_t>& starts, std::int64_t window, std::int64_t qa, std::int64_t qb,
                     std::int64_t ka, std::int64_t kb) {
  if (qa >= qb || ka >= kb) return 0.0;
  double sum = 0;
  auto i = std::size_t(std::upper_bound(starts.begin(), starts.end() - 1, std::max(qa, ka)) - starts.begin()) - 1;
  for (; i + 1 < starts.size() && starts[i] < std::min(qb, kb); ++i) {
    const std::int64_t s = starts[i], u = std::max(qa, s), v = std::min(qb, starts[i + 1]);
    if (u < v) sum += rows_below(u, v, s, window, kb) - rows_below(u, v, s, window, ka);
  }
  return sum;
}
}  // namespace

double Workload::pairs_in(std::int64_t qa, std::int64_t qb, std::int64_t ka, std::int64_t kb) const {
  if (qa >= qb || ka >= kb) return 0.0;
  if (!causal) return double(qb - qa) * double(kb - ka);
  return pairs_between(document_starts(*this), window, qa, qb, ka, kb);
}

std::string Workload::mask_text() const {
  if (!causal) return "full";
  if (!documents.empty()) {
    std::string s = "document:";
    for (std::size_t i = 0; i < documents.size(); ++i) s += fmt::format("{}{}", i ? "," : "", documents[i]);
    return window > 0 ? s + fmt::format(" sliding:{}", window) : s;
  }
  return window > 0 ? fmt::format("sliding:{}", window) : "causal";
}

Status apply_mask(Workload& w, std::string_view spec) {
  w.documents.clear();
  w.window = 0;
  const auto number = [&](std::string_view t) -> Expected<std::int64_t> {
    std::int64_t v = 0;
    const auto r = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || r.ec != std::errc{} || r.ptr != t.data() + t.size() || v < 1)
      return Error{Field::Mask, fmt::format("'{}' in '{}' is not a token count >= 1", t, spec)};
    return v;
  };
  if (spec == "causal" || spec == "full") {
    w.causal = spec == "causal";
  } else if (spec.starts_with("document:")) {
    w.causal = true;
    for (std::string_view rest = spec.substr(9);;) {
      const auto comma = rest.find(',');
      auto v = number(rest.substr(0, comma));
      if (!v) return v.error();
      w.documents.push_back(*v);
      if (comma == std::string_view::npos) break;
      rest = rest.substr(comma + 1);
    }
  } else if (spec.starts_with("sliding:")) {
    w.causal = true;
    auto v = number(spec.substr(8));
    if (!v) return v.error();
    w.window = *v;
  } else {
    return Error{Field::Mask, fmt::format("must be causal, full, document:L1,L2,... (token counts of packed documents, "
                                          "causal within each) or sliding:W (a causal window of W tokens), got '{}'",
                                          spec)};
  }
  return {};
}

double Workload::position_pairs(const std::vector<Range>& qs, const std::vector<Range>& ks) const {
  // A query range sees keys from the first one its first query sees up to its last, so only the key ranges
  // over that span are visited (the others add no pair).
  const std::vector<std::int64_t> starts = document_starts(*this);
  double sum = 0;
  for (const Range& q : qs) {
    if (q.count <= 0) continue;
    const std::int64_t doc = *std::prev(std::upper_bound(starts.begin(), starts.end() - 1, q.begin));
    const std::int64_t lo = window > 0 ? std::max(doc, q.begin - window + 1) : doc, hi = q.begin + q.count;
    auto k = std::lower_bound(ks.begin(), ks.end(), lo,
                              [](const Range& r, std::int64_t x) { return r.begin + r.count <= x; });
    for (; k != ks.end() && k->begin < hi; ++k)
      if (k->count > 0) sum += pairs_between(starts, window, q.begin, hi, k->begin, k->begin + k->count);
  }
  return sum;
}

/// The visible pairs of THD's block (q_rank, kv_rank): every document of n tokens is 2N chunks of c = n / 2N, rank
/// r holding chunks r and 2N-1-r, and query chunk i sees c^2 pairs of key chunk j < i of its document, c(c+1)/2 of
/// j = i, none of j > i. So the block holds (its chunk pairs j < i) x sum of c^2 plus (its pairs j = i) x sum of
/// c(c+1)/2, in O(documents) where counting range by range took O(documents x log documents). Integers in
/// doubles: the same value as the range by range count below 2^53 pairs.
double thd_block_pairs(const std::vector<std::int64_t>& documents, int q_rank, int kv_rank, int ranks) {
  const int q[2] = {q_rank, 2 * ranks - 1 - q_rank}, k[2] = {kv_rank, 2 * ranks - 1 - kv_rank};
  int below = 0, same = 0;
  for (const int i : q)
    for (const int j : k) {
      below += j < i;
      same += j == i;
    }
  double squares = 0, triangles = 0;
  for (const std::int64_t len : documents) {
    const double c = double(len / (2 * std::int64_t(ranks)));
    squares += c * c;
    triangles += c * (c + 1) / 2;
  }
  return below * squares + same * triangles;
}

std::vector<std::vector<Workload::Range>> thd_chunk_map(const Workload& w, int ranks) {
  Workload z = w;
  z.layout = Layout::Zigzag;
  z.chunk_map.clear();
  if (w.documents.empty() || !z.check_zigzag_documents(ranks).ok()) return {};
  std::vector<std::vector<Workload::Range>> map;
  for (int r = 0; r < ranks; ++r) map.push_back(z.shard_ranges(r, ranks));
  return map;
}

double Workload::visible_pairs(int q_rank, int kv_rank, int ranks) const {
  const double t = double(seq / ranks);
  if (!causal) return t * t;
  if (thd_blocks()) return thd_block_pairs(documents, q_rank, kv_rank, ranks);
  // A shard's chunks are in position order in every layout.
  if (position_mask()) return position_pairs(shard_ranges(q_rank, ranks), shard_ranges(kv_rank, ranks));
  double sum = 0;
  for (auto q : shard_ranges(q_rank, ranks))
    for (auto k : shard_ranges(kv_rank, ranks)) sum += causal_pairs(q, k);
  return sum;
}

MaskPiece Workload::mask(int q_rank, int kv_rank, int ranks) const {
  if (!causal) return MaskPiece::Full;
  if (position_mask()) return visible_pairs(q_rank, kv_rank, ranks) > 0 ? MaskPiece::Positions : MaskPiece::Empty;
  if (layout == Layout::Contiguous) {
    if (kv_rank > q_rank) return MaskPiece::Empty;
    return kv_rank == q_rank ? MaskPiece::Causal : MaskPiece::Full;
  }
  if (kv_rank == q_rank) return MaskPiece::ZigzagDiag;
  return kv_rank < q_rank ? MaskPiece::ZigzagKvHead : MaskPiece::ZigzagQTail;
}

// The whole-shard sizes; region_bytes (region.cpp) holds the one formula.
Bytes Workload::q_bytes(int ranks) const {
  return region_bytes(*this, ranks, 1, BufKind::Q, shard_region(0, *this, 1));
}
Bytes Workload::kv_bytes(int ranks) const {
  return region_bytes(*this, ranks, 1, BufKind::Kv, shard_region(0, *this, 1));
}
Bytes Workload::out_bytes(int ranks) const {
  return region_bytes(*this, ranks, 1, BufKind::Out, shard_region(0, *this, 1));
}
Bytes Workload::do_bytes(int ranks) const { return q_bytes(ranks); }
Bytes Workload::qbundle_bytes(int ranks) const {
  return region_bytes(*this, ranks, 1, BufKind::QBundle, shard_region(0, *this, 1));
}
Bytes Workload::dq_bytes(int ranks) const {
  return region_bytes(*this, ranks, 1, BufKind::Dq, shard_region(0, *this, 1));
}
Bytes Workload::dkv_bytes(int ranks, bool activations_dtype) const {
  return region_bytes(*this, ranks, 1, BufKind::Dkv, shard_region(0, *this, 1), activations_dtype);
}

bool Workload::operator==(const Workload& o) const {
  return batch == o.batch && seq == o.seq && heads == o.heads && kv_heads == o.kv_heads && head_dim == o.head_dim &&
         dtype == o.dtype && causal == o.causal && layout == o.layout && pass == o.pass && documents == o.documents &&
         window == o.window && chunk_map == o.chunk_map;
}

Flops Workload::block_flops(Phase phase, int q_rank, int kv_rank, int ranks) const {
  return attention_flops(double(batch), double(heads), double(head_dim), visible_pairs(q_rank, kv_rank, ranks), phase);
}

}  // namespace charm::ir
