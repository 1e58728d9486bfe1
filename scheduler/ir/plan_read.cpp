// A plan from JSON (its buffers, results, ops and placement) and load_plan, which reads a plan file.
#include "scheduler/ir/plan_io.hpp"

#include "support/json_text.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <new>
#include <string>
#include <vector>

#include "scheduler/ir/json_reader.hpp"
#include "support/input_file.hpp"

namespace charm::ir {

using detail::as_int64;
using detail::int_in;
using detail::Reader;
using nlohmann::json;

namespace {

Expected<std::int64_t> index_in(const json& v, std::int64_t n, const std::string& path) {
  return int_in(v, 0, n, path, /*half_open=*/true);
}

/// Buffer `index` of a plan of `ranks` ranks that holds `earlier` buffers so far.
Expected<Buffer> buffer_from_json(const json& jb, const std::string& w, std::size_t index, std::int64_t ranks,
                                  std::size_t earlier) {
  Reader r(jb, fmt::format("{}.buffers[{}]", w, index));
  if (auto s = r.known_fields({"rank", "kind", "owner", "init", "bytes", "activations_dtype", "owners", "head_begin",
                               "heads", "part_begin", "parts", "parent", "reuse"});
      !s)
    return s.error();
  Buffer b;
  std::int64_t v = 0;
  CHARM_TRY_ASSIGN(v, r.integer("rank", 0, ranks - 1));
  b.rank = static_cast<RankId>(v);
  CHARM_TRY_ASSIGN(v, r.integer("owner", 0, ranks - 1));
  b.owner = static_cast<RankId>(v);
  CHARM_TRY_ASSIGN(b.kind, r.enumeration<BufKind>("kind", parse_buf_kind));
  CHARM_TRY_ASSIGN(b.init, r.enumeration<BufInit>("init", parse_buf_init));
  CHARM_TRY_ASSIGN(b.activations_dtype, r.boolean("activations_dtype", false));
  CHARM_TRY_ASSIGN(v, r.integer("bytes", 0, std::int64_t{1} << 50));
  b.bytes = static_cast<Bytes>(v);
  // Region fields: ranges are checked against the plan by the validator (rule structure).
  CHARM_TRY_ASSIGN(v, r.integer("owners", 1, ranks, false, 1));
  b.owners = static_cast<std::int32_t>(v);
  CHARM_TRY_ASSIGN(v, r.integer("head_begin", 0, kMaxHeads, false, 0));
  b.head_begin = static_cast<std::int32_t>(v);
  CHARM_TRY_ASSIGN(v, r.integer("heads", 0, kMaxHeads, false, 0));
  b.heads = static_cast<std::int32_t>(v);
  CHARM_TRY_ASSIGN(v, r.integer("part_begin", 0, 1 << 16, false, 0));
  b.part_begin = static_cast<std::int32_t>(v);
  CHARM_TRY_ASSIGN(v, r.integer("parts", 0, 1 << 16, false, 0));
  b.parts = static_cast<std::int32_t>(v);
  CHARM_TRY_ASSIGN(v, r.integer("parent", -1, std::int64_t{1} << 30, false, -1));
  b.parent = static_cast<BufferId>(v);
  if (b.parent >= static_cast<std::int64_t>(earlier))
    return Error{fmt::format("{}.buffers[{}].parent", w, index),
                 fmt::format("must name an earlier buffer, got {}", b.parent)};
  CHARM_TRY_ASSIGN(v, r.integer("reuse", -1, std::int64_t{1} << 30, false, -1));
  b.reuse = static_cast<BufferId>(v);
  if (b.reuse >= static_cast<std::int64_t>(earlier))
    return Error{fmt::format("{}.buffers[{}].reuse", w, index),
                 fmt::format("must name an earlier buffer, got {}", b.reuse)};
  return b;
}

/// The "results" array into plan.results() (one entry per rank, defaults kNone).
Status results_from_json(const json& jr_all, const std::string& w, Plan& plan) {
  if (!jr_all.is_array()) return Error{w + ".results", "must be an array"};
  const std::int64_t ranks = plan.ranks, nbuf = static_cast<std::int64_t>(plan.buffers().size());
  plan.results().assign(static_cast<std::size_t>(ranks), RankResults{});
  std::size_t ri = 0;
  for (const json& jr : jr_all) {
    Reader r(jr, fmt::format("{}.results[{}]", w, ri++));
    if (auto s = r.known_fields({"rank", "out", "dq", "dkv"}); !s) return s.error();
    std::int64_t rank = 0;
    CHARM_TRY_ASSIGN(rank, r.integer("rank", 0, ranks - 1));
    auto& res = plan.results()[static_cast<std::size_t>(rank)];
    std::int64_t v = 0;
    CHARM_TRY_ASSIGN(v, r.integer("out", -1, nbuf - 1, false, -1));
    res.out = static_cast<BufferId>(v);
    CHARM_TRY_ASSIGN(v, r.integer("dq", -1, nbuf - 1, false, -1));
    res.dq = static_cast<BufferId>(v);
    CHARM_TRY_ASSIGN(v, r.integer("dkv", -1, nbuf - 1, false, -1));
    res.dkv = static_cast<BufferId>(v);
  }
  return {};
}

/// An op's "deps" (ids below nops) into `deps`.
Status deps_from_json(Reader& r, const std::string& path, std::int64_t nops, std::vector<OpId>& deps) {
  auto df = r.field("deps");
  if (!df) return df.error();
  if (!(*df)->is_array()) return Error{path + ".deps", "must be an array"};
  deps.clear();
  std::size_t di = 0;
  for (const json& d : **df) {
    if (!d.is_number_integer()) return Error{fmt::format("{}.deps[{}]", path, di), "must be an integer"};
    const auto x = index_in(d, nops, fmt::format("{}.deps[{}]", path, di));
    if (!x) return x.error();
    deps.push_back(static_cast<OpId>(*x));
    ++di;
  }
  return {};
}

/// An op's "bufs" (at most 4 buffer ids or nulls) into op.buf.
Status bufs_from_json(Reader& r, const std::string& path, std::int64_t nbuf, Op& op) {
  auto bfield = r.field("bufs", false);
  if (!bfield) return bfield.error();
  if (*bfield == nullptr) return {};
  if (!(*bfield)->is_array() || (*bfield)->size() > 4)
    return Error{path + ".bufs", "must be an array of at most 4 buffer ids"};
  for (std::size_t k = 0; k < (*bfield)->size(); ++k) {
    const json& b = (**bfield)[k];
    if (b.is_null()) continue;
    if (!b.is_number_integer()) return Error{fmt::format("{}.bufs[{}]", path, k), "must be an integer or null"};
    const auto x = index_in(b, nbuf, fmt::format("{}.bufs[{}]", path, k));
    if (!x) return x.error();
    op.buf[k] = static_cast<BufferId>(*x);
  }
  return {};
}

/// The fields of op.kind: blocks, mask and FLOPs of a compute; peer, tag, bytes and group of a transfer; bytes else.
Status kind_fields_from_json(Reader& r, std::int64_t ranks, Op& op) {
  std::int64_t v = 0;
  switch (op.kind) {
  case OpKind::Compute:
    CHARM_TRY_ASSIGN(v, r.integer("q_block", 0, ranks - 1));
    op.q_owner = static_cast<RankId>(v);
    CHARM_TRY_ASSIGN(v, r.integer("kv_block", 0, ranks - 1));
    op.kv_owner = static_cast<RankId>(v);
    CHARM_TRY_ASSIGN(op.mask, r.enumeration<MaskPiece>("mask", parse_mask_piece));
    CHARM_TRY_ASSIGN(op.flops, r.number("flops"));
    break;
  case OpKind::Send:
  case OpKind::Recv:
    CHARM_TRY_ASSIGN(v, r.integer("peer", 0, ranks - 1));
    op.peer = static_cast<RankId>(v);
    CHARM_TRY_ASSIGN(v, r.integer("tag", 0, std::int64_t{1} << 30));
    op.tag = static_cast<std::int32_t>(v);
    CHARM_TRY_ASSIGN(v, r.integer("bytes", 0, std::int64_t{1} << 50));
    op.bytes = static_cast<Bytes>(v);
    CHARM_TRY_ASSIGN(v, r.integer("group", -1, std::int64_t{1} << 30, false, -1));
    op.group = static_cast<std::int32_t>(v);
    break;
  default:
    CHARM_TRY_ASSIGN(v, r.integer("bytes", 0, std::int64_t{1} << 50, false, 0));
    op.bytes = static_cast<Bytes>(v);
    break;
  }
  return {};
}

/// Op `index` of `nops`; its dependencies go to `deps`.
Expected<Op> op_from_json(const json& jo, const std::string& w, std::int64_t index, std::int64_t nops, const Plan& plan,
                          std::vector<OpId>& deps) {
  const std::string path = fmt::format("{}.ops[{}]", w, index);
  Reader r(jo, path);
  if (auto s = r.known_fields({"id", "rank", "stream", "kind", "deps", "bufs", "pass", "q_block", "kv_block", "mask",
                               "flops", "peer", "tag", "bytes", "group"});
      !s)
    return s.error();
  Op op;
  std::int64_t v = 0;
  CHARM_TRY_ASSIGN(v, r.integer("id", 0, nops - 1));
  if (v != index)
    return Error{path + ".id", fmt::format("ids must be 0, 1, 2, ... in order; expected {}, got {}", index, v)};
  CHARM_TRY_ASSIGN(v, r.integer("rank", 0, plan.ranks - 1));
  op.rank = static_cast<RankId>(v);
  CHARM_TRY_ASSIGN(op.stream, r.enumeration<Stream>("stream", parse_stream));
  CHARM_TRY_ASSIGN(op.kind, r.enumeration<OpKind>("kind", parse_op_kind));
  auto p = r.string("pass", false);
  if (!p) return p.error();
  if (!p->empty()) {
    if (*p == "fwd")
      op.phase = Phase::Fwd;
    else if (*p == "bwd")
      op.phase = Phase::Bwd;
    else
      return Error{path + ".pass", fmt::format("must be fwd or bwd, got '{}'", *p)};
  }
  if (auto s = deps_from_json(r, path, nops, deps); !s) return s.error();
  if (auto s = bufs_from_json(r, path, static_cast<std::int64_t>(plan.buffers().size()), op); !s) return s.error();
  if (auto s = kind_fields_from_json(r, plan.ranks, op); !s) return s.error();
  return op;
}

/// "placement": {"gpus": [g0, g1, ...]}: rank r on GPU g_r, one distinct GPU per rank (whether the
/// topology has them is the simulator's question: sim::check_placement).
Expected<std::vector<std::int32_t>> placement_from_json(const json& j, const std::string& w, int ranks) {
  const std::string at = w + ".placement";
  if (!j.is_object()) return Error{at, "must be an object {\"gpus\": [...]}"};
  Reader p(j, at);
  if (auto s = p.known_fields({"gpus"}); !s) return s.error();
  auto g = p.field("gpus");
  if (!g) return g.error();
  if (!(*g)->is_array() || (*g)->size() != std::size_t(ranks))
    return Error{at + ".gpus", fmt::format("must be an array of {} GPU indices, one per rank", ranks)};
  std::vector<std::int32_t> gpus;
  for (std::size_t i = 0; i < (*g)->size(); ++i) {
    const json& v = (**g)[i];
    const auto n = as_int64(v);
    if (!v.is_number_integer() || !n || *n < 0 || *n >= (1 << 24))
      return Error{fmt::format("{}.gpus[{}]", at, i), "must be a GPU index in [0, 2^24)"};
    gpus.push_back(std::int32_t(*n));
  }
  std::vector<std::int32_t> sorted = gpus;
  std::sort(sorted.begin(), sorted.end());
  if (const auto d = std::adjacent_find(sorted.begin(), sorted.end()); d != sorted.end())
    return Error{at + ".gpus", fmt::format("GPU {} is named twice: each rank needs a GPU of its own", *d)};
  return gpus;
}

}  // namespace

Expected<Plan> plan_from_json(const json& j, std::string_view where) {
  const std::string w(where);
  Reader top(j, w);
  if (auto s = top.known_fields(
          {"schema", "algo", "workload", "ranks", "domains", "parts", "placement", "buffers", "results", "ops"});
      !s)
    return s.error();
  Plan plan;
  std::int64_t schema = 0;
  CHARM_TRY_ASSIGN(schema, top.integer("schema", 0, 1000));
  if (schema != kPlanSchema)
    return Error{w + ".schema", fmt::format("unsupported schema {} (expected {})", schema, kPlanSchema)};
  CHARM_TRY_ASSIGN(plan.algo, top.string("algo"));
  std::int64_t ranks = 0, domains = 1;
  CHARM_TRY_ASSIGN(ranks, top.integer("ranks", 1, 1 << 20));
  CHARM_TRY_ASSIGN(domains, top.integer("domains", 1, 1 << 20, false, 1));
  plan.ranks = static_cast<int>(ranks);
  plan.domains = static_cast<int>(domains);
  std::int64_t parts = 1;
  CHARM_TRY_ASSIGN(parts, top.integer("parts", 1, 1 << 16, false, 1));
  plan.parts = static_cast<int>(parts);
  auto wf = top.field("workload");
  if (!wf) return wf.error();
  CHARM_TRY_ASSIGN(plan.workload, workload_from_json(**wf, w + ".workload"));
  if (j.contains("placement")) CHARM_TRY_ASSIGN(plan.gpus, placement_from_json(j.at("placement"), w, plan.ranks));
  auto bf = top.field("buffers");
  if (!bf) return bf.error();
  if (!(*bf)->is_array()) return Error{w + ".buffers", "must be an array"};
  std::size_t bi = 0;
  for (const json& jb : **bf) {
    auto b = buffer_from_json(jb, w, bi++, ranks, plan.buffers().size());
    if (!b) return b.error();
    (void)plan.add_buffer(*b);
  }
  auto rf = top.field("results");
  if (!rf) return rf.error();
  if (auto s = results_from_json(**rf, w, plan); !s) return s.error();
  auto of = top.field("ops");
  if (!of) return of.error();
  if (!(*of)->is_array()) return Error{w + ".ops", "must be an array"};
  const auto nops = static_cast<std::int64_t>((*of)->size());
  std::vector<OpId> deps;
  std::int64_t index = 0;
  for (const json& jo : **of) {
    auto op = op_from_json(jo, w, index++, nops, plan, deps);
    if (!op) return op.error();
    (void)plan.add_op(*op, deps);
  }
  return plan;
}

Expected<Plan> load_plan(const std::string& path) {
  auto text = read_input_file(path, "a plan file", "cannot open for reading");
  if (!text) return text.error();
  auto j = parse_json_strict(*text, path);
  if (!j) return j.error();
  auto plan = [&] {
    try {
      return plan_from_json(*j, path);
    } catch (const std::bad_alloc&) {
      release_json(*j);  // before its destructor, which would allocate
      throw;
    }
  }();
  if (plan) return plan;
  // "file.json.ops[3].peer" -> "file.json: ops[3].peer", as the topology loader writes it.
  Error e = plan.error();
  const std::string_view at = e.where;
  if (at.size() > path.size() + 1 && at.starts_with(path) && at[path.size()] == '.')  // a place, not a meaning
    e = Error{path, e.where.substr(path.size() + 1) + ": " + e.what};
  return e;
}
}  // namespace charm::ir
