#include "sim/compute_model.hpp"

#include "sim/varlen_tiles.hpp"

#include <algorithm>
#include <cmath>
#include <mutex>

namespace charm::sim {

namespace {

/// Linear interpolation of y over x between the two points of `xs` around x (sorted); the end points hold outside.
template <class Get>
double interpolate(const std::vector<double>& xs, double x, Get y, bool& outside) {
  if (x <= xs.front() || xs.size() == 1) {
    outside |= x < xs.front() * (1 - 1e-9);
    return y(0);
  }
  if (x >= xs.back()) {
    outside |= x > xs.back() * (1 + 1e-9);
    return y(xs.size() - 1);
  }
  std::size_t i = 1;
  while (xs[i] < x) ++i;
  const double f = (x - xs[i - 1]) / (xs[i] - xs[i - 1]);
  return y(i - 1) * (1 - f) + y(i) * f;
}

/// The attainment each table row implies: the tile model's time at attainment 1 over the row's measured time.
std::shared_ptr<const KernelAttainment> attainment_of(const topo::KernelTable& table, const ComputeModel& m) {
  auto a = std::make_shared<KernelAttainment>();
  for (const auto& r : table.rows) {
    const BlockShape b{r.q_tokens, r.kv_tokens, r.causal};
    const ir::Phase phase = r.fwd ? ir::Phase::Fwd : ir::Phase::Bwd;
    const double eff = m.busy_seconds(b, phase, r.head_dim, r.batch_heads, 1.0) / r.seconds;
    a->add(r.fwd, r.causal, {double(r.head_dim), std::sqrt(r.q_tokens * r.kv_tokens), eff});
  }
  return a;
}

/// attainment_of, remembered: a sweep or a fit builds a compute model per simulation, and the table's
/// inversion (a tile model per row) would cost as much as a small simulation. Keyed by everything the
/// inversion reads; an entry holds its table, so a key's pointer is never reused.
std::shared_ptr<const KernelAttainment> remembered_attainment(const std::shared_ptr<const topo::KernelTable>& table,
                                                              const ComputeModel& m) {
  struct Entry {
    std::shared_ptr<const topo::KernelTable> table;
    double peak = 0;
    int sms = 0;
    topo::KernelTile fwd, bwd;
    std::shared_ptr<const KernelAttainment> attainment;
  };
  static std::mutex mu;
  static std::vector<Entry> entries;  // few: one per table and GPU a process sees
  const auto same = [&](const Entry& e) {
    return e.table == table && e.peak == m.peak_flops && e.sms == m.sm_count && e.fwd.q == m.tile_fwd.q &&
           e.fwd.kv == m.tile_fwd.kv && e.bwd.q == m.tile_bwd.q && e.bwd.kv == m.tile_bwd.kv;
  };
  {
    const std::lock_guard<std::mutex> lock(mu);
    for (const auto& e : entries)
      if (same(e)) return e.attainment;
  }
  auto a = attainment_of(*table, m);
  const std::lock_guard<std::mutex> lock(mu);
  if (entries.size() >= 64) entries.erase(entries.begin());  // a fit of SM counts or tiles: keep the latest
  entries.push_back({table, m.peak_flops, m.sm_count, m.tile_fwd, m.tile_bwd, a});
  return a;
}

}  // namespace

void KernelAttainment::add(bool fwd, bool causal, Point p) {
  auto& curves = curves_[index(fwd, causal)];
  const double hd = std::log2(p.head_dim), tok = std::log2(std::max(p.tokens, 1.0));
  auto c = std::find_if(curves.begin(), curves.end(), [&](const Curve& x) { return x.log_head_dim == hd; });
  if (c == curves.end()) {
    c = curves.insert(
        std::upper_bound(curves.begin(), curves.end(), hd, [](double h, const Curve& x) { return h < x.log_head_dim; }),
        Curve{hd, {}, {}});
  }
  const auto at = std::upper_bound(c->log_tokens.begin(), c->log_tokens.end(), tok);
  c->efficiency.insert(c->efficiency.begin() + (at - c->log_tokens.begin()), p.efficiency);
  c->log_tokens.insert(at, tok);
}

double KernelAttainment::at(bool fwd, bool causal, double head_dim, double tokens, bool* outside) const {
  // A pass and mask the table has no rows for (a user's timings of one pass) borrows the nearest it has:
  // the other mask, then the other pass. Every bundled table has all four.
  const std::vector<Curve>* curves = nullptr;
  for (const int i : {index(fwd, causal), index(fwd, !causal), index(!fwd, causal), index(!fwd, !causal)})
    if (curves == nullptr && !curves_[i].empty()) curves = &curves_[i];
  CHARM_ASSERT(curves != nullptr, "a kernel attainment holds at least one row");
  bool out = false;
  std::vector<double> dims;
  dims.reserve(curves->size());
  for (const auto& c : *curves) dims.push_back(c.log_head_dim);
  const double tok = std::log2(std::max(tokens, 1.0));
  const double e = interpolate(
      dims, std::log2(head_dim),
      [&](std::size_t i) {
        const Curve& c = (*curves)[i];
        return interpolate(
            c.log_tokens, tok, [&](std::size_t k) { return c.efficiency[k]; }, out);
      },
      out);
  if (outside) *outside = out;
  return e;
}

ComputeModel ComputeModel::from_gpu(const topo::GpuSpec& g, ir::DType dtype) {
  ComputeModel m;
  m.peak_flops = g.peak_flops(dtype);
  m.efficiency_fwd = g.efficiency_fwd;
  m.efficiency_bwd = g.efficiency_bwd;
  m.half_tokens = g.half_tokens;
  m.launch_s = g.launch_us * 1e-6;
  m.hbm_bytes_per_s = g.hbm_gbps * 1e9;
  m.sm_count = g.sm_count;
  m.tile_fwd = g.tile_fwd;
  m.tile_bwd = g.tile_bwd;
  m.kernel_scale_fwd = g.kernel_scale_fwd;
  m.kernel_scale_bwd = g.kernel_scale_bwd;
  if (g.kernel && !g.kernel->rows.empty()) m.attainment = remembered_attainment(g.kernel, m);
  return m;
}

ComputeModel ComputeModel::from_topology(const topo::Topology& t, ir::DType dtype) {
  ComputeModel m = from_gpu(t.gpu, dtype);
  m.step_s = t.stack.step_us * 1e-6;
  m.update_passes = t.stack.update_passes;
  m.bwd_update_passes = t.stack.bwd_update_passes;
  m.merge_traffic = t.stack.merge_traffic;
  return m;
}

double ComputeModel::flops_per_pair(const ir::Workload& w, ir::Phase phase) {
  return ir::attention_flops(1, 1, double(w.head_dim), 1, phase);
}

BlockShape BlockShape::of(double pairs, ir::MaskPiece mask) {
  pairs = std::max(pairs, 0.0);
  switch (mask) {
  case ir::MaskPiece::Causal:
  case ir::MaskPiece::ZigzagDiag: {
    // s(s+1)/2 pairs with the diagonal (zigzag: two such triangles of s/2 and a square of s/2: the same).
    const double side = (std::sqrt(1 + 8 * pairs) - 1) / 2;
    return {side, side, true};
  }
  case ir::MaskPiece::ZigzagKvHead: {  // all queries, the first half of the keys
    const double q = std::sqrt(2 * pairs);
    return {q, q / 2, false};
  }
  case ir::MaskPiece::ZigzagQTail: {  // the second half of the queries, all keys
    const double kv = std::sqrt(2 * pairs);
    return {kv / 2, kv, false};
  }
  default: {
    const double side = std::sqrt(pairs);
    return {side, side, false};
  }
  }
}

double BlockShape::pairs() const { return triangle ? q * (q + 1) / 2 : q * kv; }

bool ComputeModel::shaped(ir::Phase phase) const {
  const topo::KernelTile tile = phase == ir::Phase::Fwd ? tile_fwd : tile_bwd;
  return sm_count > 0 && tile.q > 0 && tile.kv > 0;
}

bool ComputeModel::prices_zigzag_halves_alike() const {
  const bool updates = hbm_bytes_per_s > 0 && (update_passes > 0 || bwd_update_passes > 0);
  return !shaped(ir::Phase::Fwd) && !shaped(ir::Phase::Bwd) && !updates && !attainment;
}

double ComputeModel::efficiency(const BlockShape& block, ir::Phase phase, double head_dim) const {
  const bool fwd = phase == ir::Phase::Fwd;
  if (!attainment) return fwd ? efficiency_fwd : efficiency_bwd;
  const double tokens = block.triangle ? block.q : std::sqrt(block.q * block.kv);
  const double e = attainment->at(fwd, block.triangle, head_dim, tokens) * (fwd ? kernel_scale_fwd : kernel_scale_bwd);
  return std::min(e, 1.0);
}

Seconds ComputeModel::busy_seconds(const BlockShape& block, ir::Phase phase, double head_dim, double batch_heads,
                                   double eff) const {
  const bool fwd = phase == ir::Phase::Fwd;
  const double per_pair = ir::attention_flops(1, 1, head_dim, 1, phase);
  const double flops = block.pairs() * per_pair * batch_heads;
  const topo::KernelTile tile = fwd ? tile_fwd : tile_bwd;
  if (!shaped(phase)) {
    double e = eff;
    if (half_tokens > 0) {
      const double side = std::sqrt(block.pairs());
      e *= side / (side + half_tokens);
    }
    return flops / (peak_flops * e);
  }
  // The forward kernel gives each thread block query tiles and loops over keys; the backward
  // one (FlashAttention-2) the other way round: its outer tiles are the keys.
  BlockShape b = block;
  if (!fwd) std::swap(b.q, b.kv);
  const double outer = std::ceil(b.q / tile.q - 1e-9), inner = std::ceil(b.kv / tile.kv - 1e-9);
  const double sms = double(sm_count);
  double steps;
  if (!b.triangle) {
    steps = std::ceil(batch_heads * outer / sms - 1e-9) * inner;
  } else {
    // Outer tile i (0-based) sees inner tiles up to the diagonal: ceil((i+1) * tile.q / tile.kv), at most all.
    double loops = 0;
    for (double i = 0; i < outer; ++i) loops += std::min(inner, std::ceil((i + 1) * tile.q / tile.kv - 1e-9));
    steps = std::max(std::ceil(batch_heads * loops / sms - 1e-9), inner);
  }
  const double t_tile = per_pair * tile.q * tile.kv / (peak_flops / sms * eff);
  return steps * t_tile;
}

Seconds ComputeModel::kernel_seconds(const BlockShape& block, ir::Phase phase, const ir::Workload& w) const {
  const double batch_heads = double(w.batch) * double(w.heads);
  return busy_seconds(block, phase, double(w.head_dim), batch_heads, efficiency(block, phase, double(w.head_dim))) +
         launch_s;
}

Seconds ComputeModel::compute_seconds(ir::Flops flops, ir::Phase phase, const ir::Workload& w,
                                      ir::MaskPiece mask) const {
  if (flops <= 0) return launch_s;
  const BlockShape b = BlockShape::of(flops / (flops_per_pair(w, phase) * double(w.batch) * double(w.heads)), mask);
  return kernel_seconds(b, phase, w) + step_s + update_seconds(b, phase, w);
}

Seconds ComputeModel::update_seconds(const BlockShape& b, ir::Phase phase, const ir::Workload& w) const {
  const double passes = phase == ir::Phase::Fwd ? update_passes : bwd_update_passes;
  if (passes <= 0 || hbm_bytes_per_s <= 0) return 0;
  const double per_token = double(w.head_dim) * double(w.batch);
  const double elements = phase == ir::Phase::Fwd ? b.q * per_token * double(w.heads)
                                                  : (b.q * double(w.heads) + 2 * b.kv * double(w.kv_heads)) * per_token;
  return passes * 12.0 * elements / hbm_bytes_per_s;
}

bool ComputeModel::varlen_priced(const ir::Op& op) const {
  return op.kind == ir::OpKind::Compute && op.mask == ir::MaskPiece::Positions && op.flops > 0 && op.q_owner >= 0 &&
         op.kv_owner >= 0 && shaped(op.phase);
}

std::optional<Seconds> ComputeModel::varlen_seconds(const ir::Op& op, const ir::Workload& w,
                                                    const DocumentShards& shards) const {
  if (!varlen_priced(op) || shards.ranks() <= 0) return std::nullopt;
  const double batch_heads = double(w.batch) * double(w.heads);
  const double per_pair = flops_per_pair(w, op.phase);
  const double pairs = op.flops / (per_pair * batch_heads);
  const auto pieces = shards.pieces(op.q_owner % shards.ranks(), op.kv_owner % shards.ranks());
  double sum = 0;
  for (const VarlenPiece& p : pieces) sum += p.pairs;
  if (pieces.empty() || std::abs(sum - pairs) > 1e-9 * pairs) return std::nullopt;  // not one whole block
  // Each piece runs at the attainment of its own size (a piece on the diagonal: a causal triangle).
  double eff = 0;
  for (const VarlenPiece& p : pieces) {
    const BlockShape shape = BlockShape::of(p.pairs, p.diagonal() ? ir::MaskPiece::Causal : ir::MaskPiece::Full);
    eff += efficiency(shape, op.phase, double(w.head_dim)) * p.pairs / sum;
  }
  const bool fwd = op.phase == ir::Phase::Fwd;
  const topo::KernelTile tile = fwd ? tile_fwd : tile_bwd;
  const TileLoops loops = varlen_tile_loops(pieces, w.window, tile, fwd);
  const double sms = double(sm_count);
  const double steps = std::max(std::ceil(batch_heads * loops.sum / sms - 1e-9), loops.longest);
  const double t_tile = per_pair * tile.q * tile.kv / (peak_flops / sms * eff);
  return steps * t_tile + launch_s + step_s + update_seconds(BlockShape::of(pairs, op.mask), op.phase, w);
}

Seconds ComputeModel::op_seconds(const ir::Op& op, const ir::Workload& w, const DocumentShards* shards) const {
  switch (op.kind) {
  case ir::OpKind::Compute:
    if (shards != nullptr)
      if (const auto s = varlen_seconds(op, w, *shards)) return *s;
    return compute_seconds(op.flops, op.phase, w, op.mask);
  // The framework issues merges and copies too: each pays its per-op cost beside the kernel's.
  case ir::OpKind::Merge:
  case ir::OpKind::Accumulate:
    return (hbm_bytes_per_s > 0 ? double(op.bytes) * merge_traffic / hbm_bytes_per_s : 0.0) + launch_s + step_s;
  case ir::OpKind::Copy:
    return (hbm_bytes_per_s > 0 ? double(op.bytes) / hbm_bytes_per_s : 0.0) + launch_s + step_s;
  case ir::OpKind::Send:
  case ir::OpKind::Recv:
    break;
  }
  return 0;
}

}  // namespace charm::sim
