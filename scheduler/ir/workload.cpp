#include "scheduler/ir/workload.hpp"

#include "scheduler/ir/plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace charm {
void invariant_failed(const char* expr, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "charm: internal error: %s:%d: %s (%s)\n", file, line, msg.c_str(), expr);
  std::abort();
}
}  // namespace charm

namespace charm::ir {

std::string_view to_string(DType t) {
  switch (t) {
  case DType::BF16:
    return "bf16";
  case DType::FP16:
    return "fp16";
  case DType::FP32:
    return "fp32";
  }
  return "?";
}
std::string_view to_string(Layout l) { return l == Layout::Zigzag ? "zigzag" : "contiguous"; }
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

Expected<DType> parse_dtype(std::string_view s) {
  if (s == "bf16") return DType::BF16;
  if (s == "fp16") return DType::FP16;
  if (s == "fp32") return DType::FP32;
  return Error{"", fmt::format("unknown dtype '{}' (expected bf16, fp16 or fp32)", s)};
}
Expected<Layout> parse_layout(std::string_view s) {
  if (s == "contiguous") return Layout::Contiguous;
  if (s == "zigzag") return Layout::Zigzag;
  return Error{"", fmt::format("unknown layout '{}' (expected contiguous or zigzag)", s)};
}
Expected<PassKind> parse_pass(std::string_view s) {
  if (s == "fwd") return PassKind::Fwd;
  if (s == "bwd") return PassKind::Bwd;
  if (s == "both") return PassKind::Both;
  return Error{"", fmt::format("unknown pass '{}' (expected fwd, bwd or both)", s)};
}
Bytes dtype_size(DType t) { return t == DType::FP32 ? 4 : 2; }

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
  }
  return "?";
}
Expected<MaskPiece> parse_mask_piece(std::string_view s) {
  for (auto m : {MaskPiece::Empty, MaskPiece::Full, MaskPiece::Causal, MaskPiece::ZigzagDiag, MaskPiece::ZigzagKvHead,
                 MaskPiece::ZigzagQTail, MaskPiece::Mixed})
    if (to_string(m) == s) return m;
  return Error{"", fmt::format("unknown mask piece '{}'", s)};
}

Status Workload::check(int ranks) const {
  auto positive = [](std::int64_t v, const char* name) -> Status {
    if (v <= 0) return Error{name, fmt::format("must be > 0, got {}", v)};
    return {};
  };
  if (auto s = positive(batch, "--batch"); !s) return s;
  if (auto s = positive(seq, "--seq"); !s) return s;
  if (auto s = positive(heads, "--heads"); !s) return s;
  if (auto s = positive(kv_heads, "--kv-heads"); !s) return s;
  if (auto s = positive(head_dim, "--head-dim"); !s) return s;
  auto at_most = [](std::int64_t v, std::int64_t max, const char* name) -> Status {
    if (v > max) return Error{name, fmt::format("must be <= {}, got {}", max, v)};
    return {};
  };
  if (auto s = at_most(batch, kMaxBatch, "--batch"); !s) return s;
  if (auto s = at_most(heads, kMaxHeads, "--heads"); !s) return s;
  if (auto s = at_most(kv_heads, kMaxHeads, "--kv-heads"); !s) return s;
  if (auto s = at_most(head_dim, kMaxHeadDim, "--head-dim"); !s) return s;
  if (ranks <= 0) return Error{"--ranks", fmt::format("must be > 0, got {}", ranks)};
  if (kv_heads > heads || heads % kv_heads != 0)
    return Error{"--kv-heads",
                 fmt::format("{} query heads cannot be grouped over {} kv heads (must divide)", heads, kv_heads)};
  const auto c = chunks(ranks);
  if (seq % c != 0)
    return Error{"--seq", fmt::format("sequence length {} cannot be split into {} {} chunks for {} ranks", seq, c,
                                      to_string(layout), ranks)};
  // Keep byte counts far from overflow.
  const double elems = double(batch) * double(seq) * double(heads) * double(head_dim);
  if (elems > double(kMaxElements))
    return Error{"workload", fmt::format("batch*seq*heads*head_dim = {:.3g} elements is too large", elems)};
  return {};
}

std::vector<Workload::Range> Workload::shard_ranges(int rank, int ranks) const {
  if (layout == Layout::Contiguous) return {{rank * (seq / ranks), seq / ranks}};
  const std::int64_t c = seq / (2 * ranks);
  return {{rank * c, c}, {(2 * ranks - 1 - rank) * c, c}};
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

double Workload::visible_pairs(int q_rank, int kv_rank, int ranks) const {
  const double t = double(seq / ranks);
  if (!causal) return t * t;
  double sum = 0;
  for (auto q : shard_ranges(q_rank, ranks))
    for (auto k : shard_ranges(kv_rank, ranks)) sum += causal_pairs(q, k);
  return sum;
}

MaskPiece Workload::mask(int q_rank, int kv_rank, int ranks) const {
  if (!causal) return MaskPiece::Full;
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
Bytes Workload::dkv_bytes(int ranks) const {
  return region_bytes(*this, ranks, 1, BufKind::Dkv, shard_region(0, *this, 1));
}

Flops Workload::block_flops(Phase phase, int q_rank, int kv_rank, int ranks) const {
  const double fwd = 4.0 * double(batch) * double(heads) * double(head_dim) * visible_pairs(q_rank, kv_rank, ranks);
  return phase == Phase::Fwd ? fwd : 2.5 * fwd;
}

}  // namespace charm::ir
