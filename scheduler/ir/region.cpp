#include "scheduler/ir/region.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "scheduler/ir/plan.hpp"

namespace charm::ir {

Region Region::intersect(const Region& o) const {
  return {std::max(owner_begin, o.owner_begin), std::min(owner_end, o.owner_end),   std::max(head_begin, o.head_begin),
          std::min(head_end, o.head_end),       std::max(part_begin, o.part_begin), std::min(part_end, o.part_end)};
}

Region shard_region(std::int32_t owner, const Workload& w, int parts) {
  return {owner, owner + 1, 0, static_cast<std::int32_t>(w.kv_heads), 0, parts};
}

Bytes region_bytes(const Workload& w, int ranks, int parts, BufKind kind, const Region& r, bool activations_dtype) {
  const Bytes t = Bytes(w.seq / ranks) / Bytes(parts) * Bytes(r.parts());
  const Bytes hkv = Bytes(r.heads()), h = Bytes(w.heads / w.kv_heads) * hkv;
  const Bytes b = Bytes(w.batch), d = Bytes(w.head_dim), es = dtype_size(w.dtype);
  const Bytes q = b * t * h * d * es, kv = 2 * b * t * hkv * d * es, rows = b * h * t * 4;
  Bytes one = 0;
  switch (kind) {
  case BufKind::Q:
  case BufKind::Dout:
    one = q;
    break;
  case BufKind::Kv:
    one = kv;
    break;
  case BufKind::Out:
    one = q + rows;
    break;
  case BufKind::QBundle:
    one = 2 * q + 2 * rows;
    break;
  case BufKind::Dq:
    one = b * t * h * d * (activations_dtype ? es : 4);
    break;
  case BufKind::Dkv:
    one = 2 * b * t * hkv * d * (activations_dtype ? es : 4);
    break;
  }
  return one * Bytes(r.owners());
}

namespace {
// Causal pairs (key <= query) between query positions [qa, qb) and key positions [ka, kb).
double causal_pairs(std::int64_t qa, std::int64_t qb, std::int64_t ka, std::int64_t kb) {
  if (qa >= qb || ka >= kb) return 0.0;
  // Row i sees clamp(i + 1 - ka, 0, kb - ka) keys: a ramp over [ka, kb), flat after.
  const std::int64_t lo = std::max(qa, ka), hi = std::min(qb, kb);
  double sum = 0;
  if (lo < hi) sum += (double(lo + 1 - ka) + double(hi - ka)) * double(hi - lo) / 2;  // ramp rows
  if (qb > kb) sum += double(qb - std::max(qa, kb)) * double(kb - ka);                // rows past the keys
  return sum;
}

// The global position ranges of local tokens [t0, t1) of a shard.
template <class Fn>
void for_local_range(const Workload& w, int rank, int ranks, std::int64_t t0, std::int64_t t1, Fn&& fn) {
  std::int64_t local = 0;
  for (const auto& c : w.shard_ranges(rank, ranks)) {
    const std::int64_t a = std::max(t0, local), b = std::min(t1, local + c.count);
    if (a < b) fn(c.begin + (a - local), c.begin + (b - local));
    local += c.count;
  }
}
}  // namespace

double visible_pairs(const Workload& w, int ranks, int parts, std::int32_t q_owner, std::int32_t q_part_begin,
                     std::int32_t q_part_end, std::int32_t kv_owner, std::int32_t kv_part_begin,
                     std::int32_t kv_part_end) {
  const std::int64_t tp = w.seq / ranks / parts;
  if (!w.causal) return double(tp * (q_part_end - q_part_begin)) * double(tp * (kv_part_end - kv_part_begin));
  std::vector<Workload::Range> qs, ks;  // in position order, as a shard's chunks are
  for_local_range(w, q_owner, ranks, tp * q_part_begin, tp * q_part_end, [&](std::int64_t a, std::int64_t b) {
    qs.push_back({a, b - a});
  });
  for_local_range(w, kv_owner, ranks, tp * kv_part_begin, tp * kv_part_end, [&](std::int64_t a, std::int64_t b) {
    ks.push_back({a, b - a});
  });
  if (w.position_mask()) return w.position_pairs(qs, ks);
  double sum = 0;
  for (const auto& q : qs)
    for (const auto& k : ks) sum += causal_pairs(q.begin, q.begin + q.count, k.begin, k.begin + k.count);
  return sum;
}

std::string region_suffix(const Region& r, const Workload& w, int parts) {
  std::string s =
      r.owners() == 1 ? fmt::format("{}", r.owner_begin) : fmt::format("[{}-{}]", r.owner_begin, r.owner_end - 1);
  if (r.head_begin != 0 || r.head_end != w.kv_heads)
    s += r.heads() == 1 ? fmt::format("h{}", r.head_begin) : fmt::format("h{}-{}", r.head_begin, r.head_end - 1);
  if (r.part_begin != 0 || r.part_end != parts)
    s += r.parts() == 1 ? fmt::format("p{}/{}", r.part_begin, parts)
                        : fmt::format("p{}-{}/{}", r.part_begin, r.part_end - 1, parts);
  return s;
}

}  // namespace charm::ir
