// A plan to JSON, and as text: the Graphviz DOT graph and the per-rank listing.
#include "scheduler/ir/plan_io.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <ostream>
#include <span>
#include <utility>
#include <vector>

#include "scheduler/ir/plan_index.hpp"

namespace charm::ir {

using nlohmann::json;

json plan_to_json(const Plan& plan) {
  CHARM_ASSERT(!plan.symmetry.active(), "plan files hold every rank's ops, not one class of ranks");
  CHARM_ASSERT(plan.groups == 1, "plan files hold one group's plan, not its deployment");
  json ops = json::array();
  for (OpId id = 0; id < static_cast<OpId>(plan.size()); ++id) {
    const Op& op = plan.op(id);
    json o{{"id", id}, {"rank", op.rank}, {"stream", to_string(op.stream)}, {"kind", to_string(op.kind)}};
    json deps = json::array();
    for (OpId d : plan.deps(id)) deps.push_back(d);
    o["deps"] = std::move(deps);
    json bufs = json::array();
    for (BufferId b : op.buf)
      if (b != kNone)
        bufs.push_back(b);
      else
        bufs.push_back(nullptr);
    while (!bufs.empty() && bufs.back().is_null()) bufs.erase(bufs.end() - 1);
    o["bufs"] = std::move(bufs);
    switch (op.kind) {
    case OpKind::Compute:
      o["pass"] = to_string(op.phase);
      o["q_block"] = op.q_owner;
      o["kv_block"] = op.kv_owner;
      o["mask"] = to_string(op.mask);
      o["flops"] = op.flops;
      break;
    case OpKind::Send:
    case OpKind::Recv:
      o["pass"] = to_string(op.phase);
      o["peer"] = op.peer;
      o["tag"] = op.tag;
      o["bytes"] = op.bytes;
      if (op.group != kNone) o["group"] = op.group;
      break;
    default:
      o["pass"] = to_string(op.phase);
      o["bytes"] = op.bytes;
      break;
    }
    ops.push_back(std::move(o));
  }
  json bufs = json::array();
  for (const Buffer& b : plan.buffers()) {
    json jb{{"rank", b.rank},
            {"kind", to_string(b.kind)},
            {"owner", b.owner},
            {"init", to_string(b.init)},
            {"bytes", b.bytes}};
    if (b.activations_dtype) jb["activations_dtype"] = true;  // written where set: other plans keep their form
    // Region fields only where they differ from a whole shard: plain plans keep their old form.
    if (b.owners != 1) jb["owners"] = b.owners;
    if (b.heads != 0) {
      jb["head_begin"] = b.head_begin;
      jb["heads"] = b.heads;
    }
    if (b.parts != 0) {
      jb["part_begin"] = b.part_begin;
      jb["parts"] = b.parts;
    }
    if (b.parent != kNone) jb["parent"] = b.parent;
    if (b.reuse != kNone) jb["reuse"] = b.reuse;
    bufs.push_back(std::move(jb));
  }
  json results = json::array();
  for (std::size_t r = 0; r < plan.results().size(); ++r) {
    const auto& res = plan.results()[r];
    json o{{"rank", r}};
    if (res.out != kNone) o["out"] = res.out;
    if (res.dq != kNone) o["dq"] = res.dq;
    if (res.dkv != kNone) o["dkv"] = res.dkv;
    results.push_back(std::move(o));
  }
  json out{{"schema", kPlanSchema},         {"algo", plan.algo},       {"workload", workload_to_json(plan.workload)},
           {"ranks", plan.ranks},           {"domains", plan.domains}, {"buffers", std::move(bufs)},
           {"results", std::move(results)}, {"ops", std::move(ops)}};
  if (plan.parts != 1) out["parts"] = plan.parts;
  // A group placed by hand: rank r on GPU gpus[r] of the topology it is simulated on.
  if (!plan.gpus.empty()) out["placement"] = {{"gpus", plan.gpus}};
  return out;
}
namespace {
/// Each rank's op ids in id order, in one pass over the plan (a counting sort by rank): a listing of
/// every rank walks the plan once, not once per rank.
struct OpsByRank {
  std::vector<std::size_t> start;  // ranks + 1 offsets into ids
  std::vector<OpId> ids;
  explicit OpsByRank(const Plan& plan) : start(std::size_t(std::max(0, plan.ranks)) + 1, 0), ids(plan.size()) {
    for (OpId id = 0; id < static_cast<OpId>(plan.size()); ++id) ++start[std::size_t(plan.op(id).rank) + 1];
    for (std::size_t r = 1; r < start.size(); ++r) start[r] += start[r - 1];
    std::vector<std::size_t> next(start.begin(), start.end() - 1);
    for (OpId id = 0; id < static_cast<OpId>(plan.size()); ++id) ids[next[std::size_t(plan.op(id).rank)]++] = id;
  }
  [[nodiscard]] std::span<const OpId> of(int r) const {
    return {ids.data() + start[std::size_t(r)], ids.data() + start[std::size_t(r) + 1]};
  }
};
}  // namespace

void write_dot(const Plan& plan, std::ostream& os) {
  os << "digraph plan {\n  rankdir=LR;\n  node [shape=box, fontname=\"monospace\", fontsize=10];\n";
  const OpsByRank by_rank(plan);
  for (int r = 0; r < plan.ranks; ++r) {
    os << fmt::format("  subgraph cluster_rank{} {{\n    label=\"rank {}\";\n", r, r);
    for (OpId id : by_rank.of(r)) {
      const Op& op = plan.op(id);
      const char* color = op.kind == OpKind::Compute                             ? "lightblue"
                          : (op.kind == OpKind::Send || op.kind == OpKind::Recv) ? "lightyellow"
                                                                                 : "lightgrey";
      os << fmt::format("    op{} [label=\"#{} [{}]\\n{}\", style=filled, fillcolor={}];\n", id, id,
                        to_string(op.stream), op_label(plan, id), color);
    }
    os << "  }\n";
  }
  for (OpId id = 0; id < static_cast<OpId>(plan.size()); ++id)
    for (OpId d : plan.deps(id)) os << fmt::format("  op{} -> op{};\n", d, id);
  // Matched messages as dashed edges.
  const PlanIndex idx(plan);
  for (OpId id = 0; id < static_cast<OpId>(plan.size()); ++id)
    if (plan.op(id).kind == OpKind::Recv && idx.partner(id) != kNone)
      os << fmt::format("  op{} -> op{} [style=dashed, color=red];\n", idx.partner(id), id);
  os << "}\n";
}

void write_listing(const Plan& plan, std::ostream& os, int only_rank) {
  os << fmt::format("# plan {} ranks={} domains={} ops={}\n", plan.algo, plan.ranks, plan.domains, plan.size());
  const OpsByRank by_rank(plan);
  for (int r = 0; r < plan.ranks; ++r) {
    if (only_rank >= 0 && r != only_rank) continue;
    os << fmt::format("rank {}:\n", r);
    if (!plan.workload.chunk_map.empty()) {  // the balanced layout: the positions this rank holds
      std::string chunks;
      for (const auto& c : plan.workload.chunk_map[std::size_t(r)])
        chunks += fmt::format(" [{}, {})", c.begin, c.begin + c.count);
      os << fmt::format("  tokens{}\n", chunks);
    }
    for (OpId id : by_rank.of(r)) {
      const Op& op = plan.op(id);
      std::string deps;
      for (OpId d : plan.deps(id)) deps += fmt::format("{}{}", deps.empty() ? "" : ",", d);
      os << fmt::format("  #{:<6} {:<8} {:<32}", id, to_string(op.stream), op_label(plan, id));
      if (op.kind == OpKind::Compute)
        os << fmt::format(" {:.3g} GFLOP", op.flops / 1e9);
      else if (op.bytes)
        os << fmt::format(" {:.3g} MB", double(op.bytes) / 1e6);
      if (!deps.empty()) os << "  after " << deps;
      os << "\n";
    }
  }
}

}  // namespace charm::ir
