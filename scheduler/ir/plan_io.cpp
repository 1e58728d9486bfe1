#include "scheduler/ir/plan_io.hpp"

#include "scheduler/support/json_text.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <new>
#include <optional>
#include <ostream>
#include <span>
#include <sstream>

#include "scheduler/ir/plan_index.hpp"
#include "scheduler/support/input_file.hpp"

namespace charm::ir {

using nlohmann::json;

json workload_to_json(const Workload& w) {
  json j{{"batch", w.batch},         {"seq", w.seq},
         {"heads", w.heads},         {"kv_heads", w.kv_heads},
         {"head_dim", w.head_dim},   {"dtype", to_string(w.dtype)},
         {"causal", w.causal},       {"layout", to_string(w.layout)},
         {"pass", to_string(w.pass)}};
  // Written only where set, so files of plain masks read as before.
  if (!w.documents.empty()) j["documents"] = w.documents;
  if (w.window > 0) j["window"] = w.window;
  if (!w.chunk_map.empty()) {
    json ranks = json::array();
    for (const auto& chunks : w.chunk_map) {
      json row = json::array();
      for (const auto& c : chunks) row.push_back(json::array({c.begin, c.count}));
      ranks.push_back(std::move(row));
    }
    j["chunks"] = std::move(ranks);  // rank r's [first position, tokens] chunks in its local order
  }
  return j;
}

namespace {

/// A JSON integer as int64, if it has one. JSON integers have no width: one past
/// int64 is held as unsigned, and is reported as written rather than wrapped.
std::optional<std::int64_t> as_int64(const json& v) {
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > std::uint64_t(std::numeric_limits<std::int64_t>::max()))
    return std::nullopt;
  return v.get<std::int64_t>();
}

/// v (an integer) in [lo, hi], or the error naming `path` and the number as written.
Expected<std::int64_t> int_in(const json& v, std::int64_t lo, std::int64_t hi, const std::string& path,
                              bool half_open = false) {
  const auto x = as_int64(v);
  const bool ok = x && *x >= lo && (half_open ? *x < hi : *x <= hi);
  if (!ok)
    return Error{path, half_open ? fmt::format("must be in [{}, {}), got {}", lo, hi, v.dump())
                                 : fmt::format("must be in [{}, {}], got {}", lo, hi, v.dump())};
  return *x;
}

// A small reader that names the JSON path of every problem.
class Reader {
 public:
  Reader(const json& j, std::string path) : j_(j), path_(std::move(path)) {}
  [[nodiscard]] const std::string& path() const { return path_; }

  /// Unknown fields are rejected, not ignored, as in topology files: a misspelt
  /// field would otherwise be silently dropped (docs/errors.md).
  Status known_fields(std::initializer_list<const char*> known) const {
    if (!j_.is_object()) return Error{path_, "must be an object"};
    for (const auto& item : j_.items()) {
      bool ok = false;
      for (const char* k : known) ok = ok || item.key() == k;
      if (ok) continue;
      std::string list;
      for (const char* k : known) list += fmt::format("{}{}", list.empty() ? "" : ", ", k);
      return Error{path_ + "." + item.key(), fmt::format("unknown field (expected one of: {})", list)};
    }
    return {};
  }
  Expected<const json*> field(const char* key, bool required = true) const {
    if (!j_.is_object()) return Error{path_, "must be an object"};
    auto it = j_.find(key);
    if (it == j_.end()) {
      if (required) return Error{path_ + "." + key, "missing field"};
      return static_cast<const json*>(nullptr);
    }
    return &*it;
  }
  Expected<std::int64_t> integer(const char* key, std::int64_t lo, std::int64_t hi, bool required = true,
                                 std::int64_t dflt = 0) const {
    auto f = field(key, required);
    if (!f) return f.error();
    if (*f == nullptr) return dflt;
    const json& v = **f;
    if (!v.is_number_integer()) return Error{path_ + "." + key, "must be an integer"};
    return int_in(v, lo, hi, path_ + "." + key);
  }
  Expected<bool> boolean(const char* key, bool dflt) const {
    auto f = field(key, false);
    if (!f) return f.error();
    if (*f == nullptr) return dflt;
    if (!(*f)->is_boolean()) return Error{path_ + "." + key, "must be true or false"};
    return (*f)->get<bool>();
  }
  Expected<double> number(const char* key, bool required = true) const {
    auto f = field(key, required);
    if (!f) return f.error();
    if (*f == nullptr) return 0.0;
    if (!(*f)->is_number()) return Error{path_ + "." + key, "must be a number"};
    const double x = (*f)->get<double>();
    if (!(x >= 0) || x > 1e30) return Error{path_ + "." + key, fmt::format("must be a finite number >= 0, got {}", x)};
    return x;
  }
  Expected<std::string> string(const char* key, bool required = true) const {
    auto f = field(key, required);
    if (!f) return f.error();
    if (*f == nullptr) return std::string{};
    if (!(*f)->is_string()) return Error{path_ + "." + key, "must be a string"};
    auto s = (*f)->get<std::string>();
    // A plan's strings are names, printed to terminals (validate, run) and CSV rows.
    for (std::size_t i = 0; i < s.size(); ++i)
      if (const auto c = static_cast<unsigned char>(s[i]); c < 0x20 || c == 0x7f)
        return Error{
            path_ + "." + key,
            fmt::format("holds a control character (byte {:#04x} at offset {}): a name must be plain text", c, i)};
    return s;
  }
  template <class E, class P>
  Expected<E> enumeration(const char* key, P parse) const {
    auto s = string(key);
    if (!s) return s.error();
    auto e = parse(*s);
    if (!e) return Error{path_ + "." + key, e.error().what};
    return *e;
  }

 private:
  const json& j_;
  std::string path_;
};

#define CHARM_TRY_ASSIGN(lhs, expr)                                                                                    \
  do {                                                                                                                 \
    auto charm_tmp_ = (expr);                                                                                          \
    if (!charm_tmp_) return charm_tmp_.error();                                                                        \
    lhs = std::move(*charm_tmp_);                                                                                      \
  } while (0)

}  // namespace

namespace {
/// A chunk map's shape: an array per rank of [first position, tokens] pairs inside [0, seq); the ranks'
/// token counts and the covering are Workload::check_chunk_map's.
Expected<std::vector<std::vector<Workload::Range>>> chunk_map_from_json(const json& j, std::int64_t seq,
                                                                        const std::string& at) {
  if (!j.is_array() || j.empty()) return Error{at, "must be a non-empty array (one array of chunks per rank)"};
  std::vector<std::vector<Workload::Range>> out;
  for (std::size_t r = 0; r < j.size(); ++r) {
    const std::string rank_at = fmt::format("{}[{}]", at, r);
    if (!j[r].is_array() || j[r].empty()) return Error{rank_at, "must be a non-empty array of [first, tokens] chunks"};
    auto& chunks = out.emplace_back();
    for (std::size_t i = 0; i < j[r].size(); ++i) {
      const json& c = j[r][i];
      const std::string chunk_at = fmt::format("{}[{}]", rank_at, i);
      if (!c.is_array() || c.size() != 2 || !c[0].is_number_integer() || !c[1].is_number_integer())
        return Error{chunk_at, "must be [first position, tokens]"};
      auto first = int_in(c[0], 0, seq, chunk_at, true);
      if (!first) return first.error();
      auto count = int_in(c[1], 1, seq - *first, chunk_at);
      if (!count) return count.error();
      chunks.push_back({*first, *count});
    }
  }
  return out;
}
}  // namespace

Expected<Workload> workload_from_json(const json& j, std::string_view where) {
  Reader r(j, std::string(where));
  if (auto s = r.known_fields({"batch", "seq", "heads", "kv_heads", "head_dim", "dtype", "causal", "layout", "pass",
                               "documents", "window", "chunks"});
      !s)
    return s.error();
  Workload w;
  CHARM_TRY_ASSIGN(w.batch, r.integer("batch", 1, kMaxBatch));
  CHARM_TRY_ASSIGN(w.seq, r.integer("seq", 1, kMaxElements));
  CHARM_TRY_ASSIGN(w.heads, r.integer("heads", 1, kMaxHeads));
  CHARM_TRY_ASSIGN(w.kv_heads, r.integer("kv_heads", 1, kMaxHeads));
  CHARM_TRY_ASSIGN(w.head_dim, r.integer("head_dim", 1, kMaxHeadDim));
  // The same bound on the product as Workload::check: every byte count stays exact.
  if (const double elems = double(w.batch) * double(w.seq) * double(w.heads) * double(w.head_dim);
      elems > double(kMaxElements))
    return Error{std::string(where),
                 fmt::format("batch*seq*heads*head_dim = {:.3g} elements is too large (at most 2^50)", elems)};
  CHARM_TRY_ASSIGN(w.dtype, r.enumeration<DType>("dtype", parse_dtype));
  CHARM_TRY_ASSIGN(w.layout, r.enumeration<Layout>("layout", parse_layout));
  CHARM_TRY_ASSIGN(w.pass, r.enumeration<PassKind>("pass", parse_pass));
  auto c = r.field("causal");
  if (!c) return c.error();
  if (!(*c)->is_boolean()) return Error{std::string(where) + ".causal", "must be true or false"};
  w.causal = (*c)->get<bool>();
  CHARM_TRY_ASSIGN(w.window, r.integer("window", 1, kMaxElements, false, 0));
  auto docs = r.field("documents", false);
  if (!docs) return docs.error();
  if (*docs != nullptr) {
    const std::string at = std::string(where) + ".documents";
    if (!(*docs)->is_array() || (*docs)->empty()) return Error{at, "must be a non-empty array of token counts"};
    std::int64_t sum = 0;
    for (std::size_t i = 0; i < (*docs)->size(); ++i) {
      const json& v = (**docs)[i];
      const auto n = as_int64(v);
      if (!v.is_number_integer() || !n || *n < 1 || *n > w.seq)
        return Error{fmt::format("{}[{}]", at, i), fmt::format("must be a token count in [1, {}]", w.seq)};
      sum += *n;
      if (sum > w.seq) return Error{at, fmt::format("the lengths sum past seq {}", w.seq)};
      w.documents.push_back(*n);
    }
    if (sum != w.seq) return Error{at, fmt::format("the lengths sum to {}, not seq {}", sum, w.seq)};
  }
  if ((!w.documents.empty() || w.window > 0) && !w.causal)
    return Error{std::string(where) + ".causal", "documents and windows are causal masks: must be true"};
  auto chunks = r.field("chunks", false);
  if (!chunks) return chunks.error();
  if (*chunks != nullptr) {
    auto m = chunk_map_from_json(**chunks, w.seq, std::string(where) + ".chunks");
    if (!m) return m.error();
    w.chunk_map = std::move(*m);
  }
  return w;
}

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
