// A workload to and from JSON: its shape, dtype, mask (documents, window) and chunk map.
#include "scheduler/ir/plan_io.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

#include "scheduler/ir/json_reader.hpp"

namespace charm::ir {

using detail::as_int64;
using detail::int_in;
using detail::Reader;
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
}  // namespace charm::ir
