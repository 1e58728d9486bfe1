#include "runtime/region_copy.hpp"

#include <fmt/format.h>

#include <cstring>

namespace charm::rt {

int region_components(ir::BufKind k, std::int64_t g, RegionComponent (&out)[4]) {
  switch (k) {
  case ir::BufKind::Q:
  case ir::BufKind::Dout:
  case ir::BufKind::Dq:
    out[0] = {false, g};
    return 1;
  case ir::BufKind::Kv:
  case ir::BufKind::Dkv:
    out[0] = out[1] = {false, 1};
    return 2;
  case ir::BufKind::Out:
    out[0] = {false, g};
    out[1] = {true, g};
    return 2;
  case ir::BufKind::QBundle:
    out[0] = out[1] = {false, g};
    out[2] = out[3] = {true, g};
    return 4;
  }
  return 0;
}

Status copy_region(const ir::Workload& w, int ranks, int parts, ir::BufKind kind, const ir::Region& rs,
                   std::span<const float> src, const ir::Region& rd, std::span<float> dst) {
  const ShardShape ss = ShardShape::of_region(w, ranks, parts, rs), sd = ShardShape::of_region(w, ranks, parts, rd);
  const std::int64_t bs = ss.elems(kind), bd = sd.elems(kind);
  if (std::int64_t(src.size()) != bs * rs.owners() || std::int64_t(dst.size()) != bd * rd.owners())
    return Error{"copy",
                 fmt::format("{} region copy: source of {} floats (expected {}), destination of {} (expected {})",
                             ir::to_string(kind), src.size(), bs * rs.owners(), dst.size(), bd * rd.owners())};
  const ir::Region ov = rs.intersect(rd);
  if (ov.empty()) return {};
  const std::int64_t B = w.batch, D = w.head_dim, g = w.heads / w.kv_heads, tp = w.seq / ranks / parts;
  const std::int64_t Ts = ss.tokens, Td = sd.tokens, tn = tp * ov.parts();
  const std::int64_t ts0 = tp * (ov.part_begin - rs.part_begin), td0 = tp * (ov.part_begin - rd.part_begin);
  RegionComponent comp[4];
  const int nc = region_components(kind, g, comp);
  for (std::int32_t x = ov.owner_begin; x < ov.owner_end; ++x) {
    const float* s = src.data() + bs * (x - rs.owner_begin);
    float* d = dst.data() + bd * (x - rd.owner_begin);
    for (int c = 0; c < nc; ++c) {
      const std::int64_t grp = comp[c].group;
      const std::int64_t Hs = grp * rs.heads(), Hd = grp * rd.heads(), hn = grp * ov.heads();
      const std::int64_t hs0 = grp * (ov.head_begin - rs.head_begin), hd0 = grp * (ov.head_begin - rd.head_begin);
      if (comp[c].rows) {
        for (std::int64_t b = 0; b < B; ++b)
          for (std::int64_t h = 0; h < hn; ++h)
            std::memmove(d + (b * Hd + hd0 + h) * Td + td0, s + (b * Hs + hs0 + h) * Ts + ts0,
                         sizeof(float) * std::size_t(tn));
        s += B * Hs * Ts;
        d += B * Hd * Td;
      } else {
        for (std::int64_t b = 0; b < B; ++b)
          for (std::int64_t t = 0; t < tn; ++t)
            std::memmove(d + ((b * Td + td0 + t) * Hd + hd0) * D, s + ((b * Ts + ts0 + t) * Hs + hs0) * D,
                         sizeof(float) * std::size_t(hn * D));
        s += B * Ts * Hs * D;
        d += B * Td * Hd * D;
      }
    }
  }
  return {};
}

}  // namespace charm::rt
