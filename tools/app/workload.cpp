// The workload as written (WorkloadSpec): sizes as text, --mask cu_seqlens files and --model Hugging Face configs.
#include "tools/app/workload.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "scheduler/planners/algorithms.hpp"
#include "support/input_file.hpp"
#include "support/json_text.hpp"
#include "support/number_text.hpp"

namespace charm::app {

namespace {

/// "cu_seqlens:FILE" as "document:L1,L2,...": the file holds FlashAttention's cumulative sequence
/// offsets (0, L1, L1+L2, ..., S) as integers separated by commas or whitespace (a tensor printed
/// with numpy.savetxt or as a list). Other specs are returned unchanged.
Expected<std::string> mask_from_cu_seqlens(const std::string& spec) {
  constexpr std::string_view kPrefix = "cu_seqlens:";
  if (spec.rfind(kPrefix, 0) != 0) return spec;
  const std::string path = spec.substr(kPrefix.size());
  CHARM_TRY_LET(text, read_input_file(path, "a cu_seqlens file", "cannot open for reading"));
  std::string items;
  for (const char c : text) items += (c == ',' || std::isspace(static_cast<unsigned char>(c))) ? ',' : c;
  std::vector<std::int64_t> at;
  for (const auto& item : split_list(items)) {
    const auto v = parse_size(item, "--mask");
    if (!v) return Error{"--mask", fmt::format("{}: '{}' is not a token offset", path, item)};
    at.push_back(*v);
  }
  if (at.size() < 2 || at.front() != 0)
    return Error{"--mask",
                 fmt::format("{}: cu_seqlens start at 0 and hold one offset more than there are documents", path)};
  std::string doc = "document:";
  for (std::size_t i = 1; i < at.size(); ++i) {
    if (at[i] <= at[i - 1])
      return Error{"--mask",
                   fmt::format("{}: cu_seqlens must increase: offset {} is {} after {}", path, i, at[i], at[i - 1])};
    doc += fmt::format("{}{}", i > 1 ? "," : "", at[i] - at[i - 1]);
  }
  return doc;
}

/// The attention fields of a Hugging Face config.json (a multimodal one's "text_config" when the top has none).
struct ModelConfig {
  std::int64_t heads = 0, kv_heads = 0, head_dim = 0, layers = 0;
};

Expected<std::int64_t> config_count(const nlohmann::json& c, const char* key, const std::string& path) {
  if (!c.contains(key)) return std::int64_t(0);
  const auto& v = c.at(key);
  if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > (1 << 20))
    return Error{"--model", fmt::format("{}: {} must be a positive integer, got {}", path, key, v.dump())};
  return v.get<std::int64_t>();
}

Expected<ModelConfig> read_model_config(const std::string& path) {
  CHARM_TRY_LET(text, read_input_file(path, "a model config", "cannot open for reading"));
  CHARM_TRY_LET(c, parse_json_strict(text, path));
  if (!c.is_object()) return Error{"--model", fmt::format("{}: a config.json is a JSON object", path)};
  if (!c.contains("num_attention_heads") && c.contains("text_config") && c["text_config"].is_object())
    c = nlohmann::json(c["text_config"]);
  ModelConfig m;
  CHARM_TRY_ASSIGN(m.heads, config_count(c, "num_attention_heads", path));
  if (m.heads == 0) return Error{"--model", fmt::format("{}: no num_attention_heads (the query heads)", path)};
  CHARM_TRY_ASSIGN(m.kv_heads, config_count(c, "num_key_value_heads", path));
  if (m.kv_heads == 0) m.kv_heads = m.heads;  // no GQA
  CHARM_TRY_ASSIGN(m.head_dim, config_count(c, "head_dim", path));
  if (m.head_dim == 0) {
    CHARM_TRY_LET(hidden, config_count(c, "hidden_size", path));
    if (hidden == 0 || hidden % m.heads != 0)
      return Error{"--model", fmt::format("{}: no head_dim, and no hidden_size that num_attention_heads ({}) divides",
                                          path, m.heads)};
    m.head_dim = hidden / m.heads;
  }
  CHARM_TRY_ASSIGN(m.layers, config_count(c, "num_hidden_layers", path));
  return m;
}

/// A count from the model's config, unless the flag gives it too: then they must agree.
Expected<std::int64_t> from_model(std::int64_t model_value, bool given, const std::string& flag_value, const char* flag,
                                  const char* field) {
  if (!given) return model_value;
  CHARM_TRY_LET(v, parse_size(flag_value, flag));
  if (v != model_value)
    return Error{flag,
                 fmt::format("{} contradicts the --model config's {} {}; give one of them", v, field, model_value)};
  return v;
}

/// An enum field read by `parse`, its error named after `flag`.
template <class T>
Expected<T> with_flag(Expected<T> e, const char* flag) {
  if (!e) return Error{flag, e.error().what};
  return e;
}

}  // namespace

Status WorkloadSpec::check_layout_for(const std::string& algo, const ir::Workload& w) const {
  const sched::Algorithm* a = sched::find_algorithm(algo);
  if (layout_given && a != nullptr && a->forced_layout && w.layout != *a->forced_layout)
    return Error{Field::Layout, fmt::format("{} runs on the {} layout, not {}: drop --layout, or use {}", a->name,
                                            ir::to_string(*a->forced_layout), ir::to_string(w.layout), a->base)};
  return {};
}

Expected<int> WorkloadSpec::model_layers() const {
  if (model.empty()) return 0;
  CHARM_TRY_LET(m, read_model_config(model));
  return int(m.layers);
}

Expected<ir::Workload> WorkloadSpec::get() const {
  ir::Workload w;
  CHARM_TRY_ASSIGN(w.batch, parse_size(batch, "--batch"));
  CHARM_TRY_ASSIGN(w.seq, parse_size(seq, "--seq"));
  if (!model.empty()) {
    CHARM_TRY_LET(m, read_model_config(model));
    CHARM_TRY_ASSIGN(w.heads, from_model(m.heads, heads_given, heads, "--heads", "num_attention_heads"));
    CHARM_TRY_ASSIGN(w.kv_heads, from_model(m.kv_heads, kv_heads_given, kv_heads, "--kv-heads", "num_key_value_heads"));
    CHARM_TRY_ASSIGN(w.head_dim, from_model(m.head_dim, head_dim_given, head_dim, "--head-dim", "head_dim"));
  } else {
    CHARM_TRY_ASSIGN(w.heads, parse_size(heads, "--heads"));
    if (kv_heads.empty())
      w.kv_heads = w.heads;
    else
      CHARM_TRY_ASSIGN(w.kv_heads, parse_size(kv_heads, "--kv-heads"));
    CHARM_TRY_ASSIGN(w.head_dim, parse_size(head_dim, "--head-dim"));
  }
  CHARM_TRY_ASSIGN(w.dtype, with_flag(ir::parse_dtype(dtype), "--dtype"));
  CHARM_TRY_ASSIGN(w.layout, with_flag(ir::parse_layout(layout), "--layout"));
  CHARM_TRY_ASSIGN(w.pass, with_flag(ir::parse_pass(pass), "--pass"));
  w.causal = causal;
  if (!mask.empty()) {
    CHARM_TRY_LET(spec, mask_from_cu_seqlens(mask));
    if (auto st = ir::apply_mask(w, spec); !st) return st.error();
    if (causal && !w.causal) return Error{"--mask", "full contradicts --causal; give one of them"};
  }
  return w;
}

Expected<sim::ChunkSolveOptions> chunk_solve_options(double budget_ms, std::uint64_t seed) {
  if (!(budget_ms >= 0)) return Error{"--solve-ms", fmt::format("must be >= 0, got {}", budget_ms)};
  sim::ChunkSolveOptions o;
  o.budget_ms = budget_ms;
  o.seed = seed;
  o.jobs = int(std::max(1u, std::thread::hardware_concurrency()));  // as many as the memory budget allows
  return o;
}

}  // namespace charm::app
