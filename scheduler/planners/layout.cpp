#include "scheduler/planners/layout.hpp"

#include <fmt/format.h>

#include <numeric>

namespace charm::sched {

using ir::Plan;

Expected<LayoutOrder> parse_layout_order(std::string_view s) {
  if (s == "tp-cp") return LayoutOrder::TpInner;
  if (s == "cp-tp") return LayoutOrder::CpInner;
  return Error{Field::Order, fmt::format("must be tp-cp (tensor-parallel peers on adjacent GPUs) or cp-tp (a "
                                         "context-parallel group on consecutive GPUs), got '{}'",
                                         s)};
}

const char* to_string(LayoutOrder o) { return o == LayoutOrder::TpInner ? "tp-cp" : "cp-tp"; }

Expected<Layout> make_layout(int gpus, int cp, int tp, LayoutOrder order) {
  if (cp < 1) return Error{Field::Cp, fmt::format("must be at least 1, got {}", cp)};
  if (tp < 1) return Error{Field::Tp, fmt::format("must be at least 1, got {}", tp)};
  if (gpus % (std::int64_t(cp) * tp) != 0)
    return Error{Field::Cp, fmt::format("CP {} x TP {} = {} does not divide the topology's {} GPUs", cp, tp,
                                        std::int64_t(cp) * tp, gpus)};
  return Layout{cp, tp, gpus / (cp * tp), order};
}

Expected<Layout> make_tp_layout(int gpus, int tp, LayoutOrder order) {
  if (tp < 1) return Error{Field::Tp, fmt::format("must be at least 1, got {}", tp)};
  if (gpus % tp != 0) return Error{Field::Tp, fmt::format("TP {} does not divide the topology's {} GPUs", tp, gpus)};
  return make_layout(gpus, gpus / tp, tp, order);
}

Expected<ir::Workload> group_workload(const ir::Workload& w, const Layout& l) {
  if (w.heads % l.tp != 0 || w.kv_heads % l.tp != 0)
    return Error{Field::Tp,
                 fmt::format("TP {} must divide the heads ({}) and the kv heads ({}): each TP rank's CP group "
                             "attends over its share of them",
                             l.tp, w.heads, w.kv_heads)};
  ir::Workload g = w;
  g.heads = w.heads / l.tp;
  g.kv_heads = w.kv_heads / l.tp;
  return g;
}

int layout_gpu(const Layout& l, int group, int c) {
  const int d = group / l.tp, t = group % l.tp;
  const int within = l.order == LayoutOrder::TpInner ? c * l.tp + t : t * l.cp + c;
  return d * l.cp * l.tp + within;
}

std::vector<std::int32_t> layout_gpus(const Layout& l) {
  std::vector<std::int32_t> gpus(std::size_t(l.gpus()));
  for (int g = 0; g < l.groups(); ++g)
    for (int c = 0; c < l.cp; ++c) gpus[std::size_t(g * l.cp + c)] = layout_gpu(l, g, c);
  return gpus;
}

std::vector<GpuHop> tp_ring_hops(const Layout& l) {
  std::vector<GpuHop> hops;
  hops.reserve(std::size_t(l.gpus()));
  for (int d = 0; d < l.dp; ++d)
    for (int c = 0; c < l.cp; ++c)
      for (int k = 0; k < l.tp; ++k)
        hops.push_back({layout_gpu(l, d * l.tp + k, c), layout_gpu(l, d * l.tp + (k + 1) % l.tp, c)});
  return hops;
}

int layout_block(std::span<const std::int32_t> gpus, int cp) {
  const auto n = std::int64_t(gpus.size());
  for (std::int64_t b = cp; b < n; b += cp) {
    if (n % b != 0) continue;
    bool shifts = true;
    for (std::int64_t k = 0; k < n && shifts; ++k)
      shifts = gpus[std::size_t((k + b) % n)] == (gpus[std::size_t(k)] + b) % n;
    if (shifts) return int(b);
  }
  return int(n);
}

Expected<int> deployment_copies(const Layout& l, const ir::BlockSymmetry& blocks) {
  const int block = layout_block(layout_gpus(l), l.cp);
  if (block >= l.gpus()) return Error{"", "the layout interleaves its CP groups on the GPUs"};
  auto q = ir::coarsen_to_blocks({ir::RankSymmetry::Kind::Rotate, block}, blocks, l.gpus());
  if (!q) return q.error();
  if (q->block % l.cp != 0 || q->block >= l.gpus())
    return Error{"", fmt::format("the topology's blocks ({} GPUs) span every CP group", blocks.gpus)};
  return q->block / l.cp;
}

Error balanced_deployment_refusal() {
  return Error{Field::Layout, "the balanced layout is solved for one CP group; drop --cp / --tp or use zigzag"};
}

Plan place_groups(const Plan& group, const Layout& l, int copies) {
  CHARM_ASSERT(group.ranks == l.cp && group.groups == 1 && !group.symmetry.active(),
               "a deployment places one CP group's full plan");
  CHARM_ASSERT(copies >= 1 && copies <= l.groups() && l.groups() % copies == 0, "whole copies of the group");
  Plan out;
  out.algo = group.algo;
  out.workload = group.workload;
  out.ranks = l.gpus();
  out.domains = group.domains;
  out.parts = group.parts;
  out.groups = l.groups();
  out.gpus = layout_gpus(l);
  if (copies < l.groups()) out.symmetry = {ir::RankSymmetry::Kind::Rotate, copies * l.cp};
  const auto nbuf = std::int32_t(group.buffers().size());
  const auto nops = std::int32_t(group.size());
  out.reserve(std::size_t(nops) * std::size_t(copies), group.num_deps() * std::size_t(copies),
              std::size_t(nbuf) * std::size_t(copies));
  out.results().assign(std::size_t(out.ranks), ir::RankResults{});
  std::vector<ir::OpId> deps;
  for (int g = 0; g < copies; ++g) {
    const std::int32_t dr = g * l.cp, db = g * nbuf, dop = g * nops;
    const auto shift_rank = [&](ir::RankId r) { return r == ir::kNone ? r : r + dr; };
    const auto shift_buf = [&](ir::BufferId b) { return b == ir::kNone ? b : b + db; };
    for (const ir::Buffer& b : group.buffers()) {
      ir::Buffer nb = b;
      nb.rank += dr;
      nb.owner += dr;
      nb.parent = shift_buf(b.parent);
      nb.reuse = shift_buf(b.reuse);
      out.add_buffer(nb);
    }
    for (ir::OpId id = 0; id < nops; ++id) {
      ir::Op o = group.op(id);
      o.rank += dr;
      if (ir::is_comm(o)) {
        o.peer = shift_rank(o.peer);
      } else if (o.kind == ir::OpKind::Compute) {
        o.q_owner = shift_rank(o.q_owner);
        o.kv_owner = shift_rank(o.kv_owner);
      }
      for (auto& b : o.buf) b = shift_buf(b);
      deps.clear();
      for (const ir::OpId d : group.deps(id)) deps.push_back(d + dop);
      out.add_op(o, deps);
    }
    for (int r = 0; r < l.cp; ++r) {
      const ir::RankResults& from = group.results()[std::size_t(r)];
      out.results()[std::size_t(dr + r)] = {shift_buf(from.out), shift_buf(from.dq), shift_buf(from.dkv)};
    }
  }
  return out;
}

std::string layout_text(const Layout& l) {
  std::string gpus;
  const int shown = std::min(l.cp, 6);
  for (int c = 0; c < shown; ++c) gpus += fmt::format("{}{}", c ? "," : "", layout_gpu(l, 0, c));
  if (shown < l.cp) gpus += fmt::format(",...,{}", layout_gpu(l, 0, l.cp - 1));
  return fmt::format("{} GPUs: CP {} x TP {} x DP {} ({}, {} CP group{} at once); CP group 0 on GPUs {}", l.gpus(),
                     l.cp, l.tp, l.dp, to_string(l.order), l.groups(), l.groups() == 1 ? "" : "s", gpus);
}

}  // namespace charm::sched
