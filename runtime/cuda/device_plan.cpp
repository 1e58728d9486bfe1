#include "runtime/cuda/device_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "runtime/buffer_store.hpp"
#include "runtime/cuda/cuda_check.hpp"
#include "runtime/region_copy.hpp"
#include "scheduler/ir/buffer_rules.hpp"

namespace charm::rt::cuda {

namespace {

std::string op_where(const ir::Plan& plan, ir::OpId id) {
  return fmt::format("rank {} op {} ({})", plan.op(id).rank, id, ir::op_label(plan, id));
}

/// Roots of Out buffers in a half dtype that a local Send or Recv moves: they get a wire area.
Status mark_wire_roots(const ir::Plan& plan, const std::vector<char>& local, DeviceBuffers& d) {
  d.wire_root.assign(plan.buffers().size(), 0);
  for (ir::OpId id = 0; id < ir::OpId(plan.size()); ++id) {
    const auto& op = plan.op(id);
    if (!ir::is_comm(op) || op.rank < 0 || op.rank >= plan.ranks || !local[std::size_t(op.rank)]) continue;
    auto a = ir::decode(plan, id);
    if (!a) return Error{op_where(plan, id), a.error().what};
    const ir::BufferId b =
        op.kind == ir::OpKind::Send ? std::get<ir::SendArgs>(*a).src : std::get<ir::RecvArgs>(*a).dst;
    if (d[b].staged) d.wire_root[std::size_t(d[b].root)] = 1;
  }
  return {};
}

}  // namespace

Expected<DeviceBuffers> DeviceBuffers::of(const ir::Plan& plan, const std::vector<char>& local) {
  DeviceBuffers d;
  const auto& w = plan.workload;
  d.buf.resize(plan.buffers().size());
  for (ir::BufferId b = 0; b < ir::BufferId(plan.buffers().size()); ++b) {
    const ir::Buffer& buf = plan.buffer(b);
    if (buf.rank < 0 || buf.rank >= plan.ranks || !local[std::size_t(buf.rank)]) continue;
    CHARM_TRY(ir::check_buffer(plan, b));
    DeviceBuffer& x = d.buf[std::size_t(b)];
    x.region = plan.region(b);
    x.block = ShardShape::of_region(w, plan.ranks, plan.parts, x.region);
    x.layout = DeviceLayout::of(buf.kind, x.block, w.dtype);
    x.wire = DeviceLayout::of(buf.kind, x.block, w.dtype, true);
    x.staged = x.wire.bytes != x.layout.bytes;
    x.root = b;
    if (buf.parent != ir::kNone) {
      // A view: its owners' blocks of the root (same heads and parts, so the same block layout).
      const DeviceBuffer& p = d.buf[std::size_t(buf.parent)];
      x.root = buf.parent;
      x.offset = p.block_at(x.region.owner_begin);
      x.wire_offset = std::size_t(x.region.owner_begin - p.region.owner_begin) * p.wire.bytes;
    }
  }
  CHARM_TRY(mark_wire_roots(plan, local, d));
  return d;
}

std::vector<Copy2D> region_copies(const ir::Workload& w, int ranks, int parts, ir::BufKind kind, const DeviceBuffer& s,
                                  const DeviceBuffer& d) {
  std::vector<Copy2D> out;
  const ir::Region &rs = s.region, &rd = d.region, ov = rs.intersect(rd);
  if (ov.empty()) return out;
  const std::size_t B = std::size_t(w.batch), D = std::size_t(w.head_dim);
  const std::size_t tp = std::size_t(w.seq / ranks / parts), tn = tp * std::size_t(ov.parts());
  const std::size_t Ts = std::size_t(s.block.tokens), Td = std::size_t(d.block.tokens);
  const std::size_t ts0 = tp * std::size_t(ov.part_begin - rs.part_begin);
  const std::size_t td0 = tp * std::size_t(ov.part_begin - rd.part_begin);
  RegionComponent comp[4];
  const int nc = region_components(kind, w.heads / w.kv_heads, comp);
  for (ir::RankId x = ov.owner_begin; x < ov.owner_end; ++x)
    for (int c = 0; c < nc; ++c) {
      const Section &ss = s.layout.sections[std::size_t(c)], &sd = d.layout.sections[std::size_t(c)];
      const std::size_t es = ss.f32 ? 4 : ir::dtype_size(w.dtype);
      const std::size_t grp = std::size_t(comp[c].group);
      const std::size_t Hs = grp * std::size_t(rs.heads()), Hd = grp * std::size_t(rd.heads());
      const std::size_t hn = grp * std::size_t(ov.heads());
      const std::size_t hs0 = grp * std::size_t(ov.head_begin - rs.head_begin);
      const std::size_t hd0 = grp * std::size_t(ov.head_begin - rd.head_begin);
      const std::size_t s0 = s.block_at(x) + ss.offset, d0 = d.block_at(x) + sd.offset;
      for (std::size_t b = 0; b < B; ++b) {
        Copy2D k;
        if (comp[c].rows) {  // [B, H, T]: one token run per head
          k = {s0 + ((b * Hs + hs0) * Ts + ts0) * es,
               d0 + ((b * Hd + hd0) * Td + td0) * es,
               Ts * es,
               Td * es,
               tn * es,
               hn};
        } else {  // [B, T, H, D]: one head slice per token
          k = {s0 + ((b * Ts + ts0) * Hs + hs0) * D * es,
               d0 + ((b * Td + td0) * Hd + hd0) * D * es,
               Hs * D * es,
               Hd * D * es,
               hn * D * es,
               tn};
        }
        out.push_back(k);
      }
    }
  return out;
}

MaskTable::MaskTable(const ir::Workload& w, int ranks, int parts) : causal_(w.causal), positions_(w, ranks, parts) {}

bool MaskTable::visible(ir::RankId x, const ir::Region& rq, ir::RankId y, const ir::Region& rk) const {
  return positions_.visible(positions_.of(x, rq), positions_.of(y, rk));
}

std::size_t MaskTable::add(ir::RankId x, const ir::Region& rq, ir::RankId y, const ir::Region& rk) {
  const auto key = std::make_tuple(x, rq.part_begin, rq.part_end, y, rk.part_begin, rk.part_end);
  if (auto it = at_.find(key); it != at_.end()) return it->second;
  const auto qp = positions_.of(x, rq), kp = positions_.of(y, rk);
  const std::size_t at = counts_.size();
  for (const std::int64_t p : qp)
    counts_.push_back(causal_ ? int(std::upper_bound(kp.begin(), kp.end(), p) - kp.begin()) : int(kp.size()));
  at_.emplace(key, at);
  return at;
}

Expected<ComputeBlocks> compute_blocks(const ir::Plan& plan, ir::OpId id, const DeviceBuffers& bufs, MaskTable& masks) {
  auto a = ir::decode(plan, id);
  if (!a) return Error{op_where(plan, id), a.error().what};
  ir::BufferId q = ir::kNone, kv = ir::kNone, acc = ir::kNone, dkv = ir::kNone;
  if (const auto* f = std::get_if<ir::ComputeFwdArgs>(&*a)) {
    q = f->q, kv = f->kv, acc = f->out;
  } else if (const auto* g = std::get_if<ir::ComputeBwdArgs>(&*a)) {
    q = g->qbundle, kv = g->kv, acc = g->dq, dkv = g->dkv;
  } else {
    return Error{op_where(plan, id), "not a compute"};
  }
  for (ir::BufferId b : {q, kv, acc, dkv})
    if (b != ir::kNone && bufs[b].root == ir::kNone)
      return Error{op_where(plan, id), fmt::format("buffer {} is not on this rank", b)};
  const ir::Region &rq = bufs[q].region, &rk = bufs[kv].region;
  CHARM_TRY(check_compute_blocks(plan, id, q, rq, kv, rk));
  if (bufs[acc].region != rq || (dkv != ir::kNone && bufs[dkv].region != rk))
    return Error{op_where(plan, id), "its accumulators hold other regions than its inputs"};
  const auto& w = plan.workload;
  ComputeBlocks c;
  c.dims = BlockDims{w.batch,
                     bufs[q].block.heads,
                     bufs[q].block.kv_heads,
                     w.head_dim,
                     bufs[q].block.tokens,
                     bufs[kv].block.tokens,
                     float(1.0 / std::sqrt(double(w.head_dim)))};
  for (ir::RankId x = rq.owner_begin; x < rq.owner_end; ++x)
    for (ir::RankId y = rk.owner_begin; y < rk.owner_end; ++y)
      if (masks.visible(x, rq, y, rk)) c.blocks.push_back({x, y, masks.add(x, rq, y, rk)});
  return c;
}

}  // namespace charm::rt::cuda
