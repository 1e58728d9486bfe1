// The workload flags (WorkloadFlags): --mask cu_seqlens files and --model Hugging Face configs.
#include "tools/cli_common.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "scheduler/planners/algorithms.hpp"
#include "support/input_file.hpp"
#include "support/json_text.hpp"

namespace charm::cli {

void WorkloadFlags::add(CLI::App& app, bool with_pass) {
  app.add_option("--batch,-b", batch, "batch size")->capture_default_str();
  app.add_option("--seq,-s", seq, "global sequence length (4096, 128k, ...)")->capture_default_str();
  app.add_option("--heads", heads, "query heads")->capture_default_str()->each([this](const std::string&) {
    heads_given = true;
  });
  app.add_option("--kv-heads", kv_heads, "key/value heads (GQA; default: = heads)")->each([this](const std::string&) {
    kv_heads_given = true;
  });
  app.add_option("--head-dim", head_dim, "head dimension")->capture_default_str()->each([this](const std::string&) {
    head_dim_given = true;
  });
  app.add_option("--model", model,
                 "a Hugging Face config.json: its num_attention_heads, num_key_value_heads and head_dim (or "
                 "hidden_size / heads) give the workload's heads, and num_hidden_layers advise's --layers");
  app.add_option("--dtype", dtype, "bf16 | fp16 | fp32")->capture_default_str();
  app.add_flag("--causal", causal, "causal mask");
  app.add_option("--mask", mask,
                 "causal | full | document:L1,L2,... (packed documents of these token counts, causal within each; "
                 "they sum to --seq) | cu_seqlens:FILE (the same as FlashAttention's cumulative offsets 0,L1,L1+L2,"
                 "...,S: integers in a text file) | sliding:W (causal, each query sees its W most recent keys)");
  app.add_option("--layout", layout,
                 "contiguous | zigzag (with --mask document: each document zigzag on its own, TransformerEngine's THD) "
                 "| balanced (with --mask document: a solver places chunks of the documents on the ranks for the least "
                 "simulated time; on it the ring forwards a shard only as far as its last reader)")
      ->capture_default_str()
      ->each([this](const std::string&) { layout_given = true; });
  app.add_option("--solve-ms", solve_ms,
                 "--layout balanced: the solver's time budget in ms (its structured candidates always run)")
      ->capture_default_str();
  app.add_option("--solve-seed", solve_seed, "--layout balanced: the seed of the solver's shuffled candidates")
      ->capture_default_str();
  if (with_pass) app.add_option("--pass", pass, "fwd | bwd | both")->capture_default_str();
}

namespace {

/// "cu_seqlens:FILE" as "document:L1,L2,...": the file holds FlashAttention's cumulative sequence
/// offsets (0, L1, L1+L2, ..., S) as integers separated by commas or whitespace (a tensor printed
/// with numpy.savetxt or as a list). Other specs are returned unchanged.
std::string mask_from_cu_seqlens(const std::string& spec) {
  constexpr std::string_view kPrefix = "cu_seqlens:";
  if (spec.rfind(kPrefix, 0) != 0) return spec;
  const std::string path = spec.substr(kPrefix.size());
  const std::string text = unwrap(read_input_file(path, "a cu_seqlens file", "cannot open for reading"));
  std::string items;
  for (const char c : text) items += (c == ',' || std::isspace(static_cast<unsigned char>(c))) ? ',' : c;
  std::vector<std::int64_t> at;
  for (const auto& item : split_list(items)) {
    const auto v = parse_size(item, "--mask");
    if (!v) fail(Error{"--mask", fmt::format("{}: '{}' is not a token offset", path, item)});
    at.push_back(*v);
  }
  if (at.size() < 2 || at.front() != 0)
    fail(Error{"--mask",
               fmt::format("{}: cu_seqlens start at 0 and hold one offset more than there are documents", path)});
  std::string doc = "document:";
  for (std::size_t i = 1; i < at.size(); ++i) {
    if (at[i] <= at[i - 1])
      fail(Error{"--mask",
                 fmt::format("{}: cu_seqlens must increase: offset {} is {} after {}", path, i, at[i], at[i - 1])});
    doc += fmt::format("{}{}", i > 1 ? "," : "", at[i] - at[i - 1]);
  }
  return doc;
}

}  // namespace

namespace {

/// The attention fields of a Hugging Face config.json (a multimodal one's "text_config" when the top has none).
struct ModelConfig {
  std::int64_t heads = 0, kv_heads = 0, head_dim = 0, layers = 0;
};

std::int64_t config_count(const nlohmann::json& c, const char* key, const std::string& path) {
  if (!c.contains(key)) return 0;
  const auto& v = c.at(key);
  if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > (1 << 20))
    fail(Error{"--model", fmt::format("{}: {} must be a positive integer, got {}", path, key, v.dump())});
  return v.get<std::int64_t>();
}

ModelConfig read_model_config(const std::string& path) {
  const std::string text = unwrap(read_input_file(path, "a model config", "cannot open for reading"));
  nlohmann::json c = unwrap(parse_json_strict(text, path));
  if (!c.is_object()) fail(Error{"--model", fmt::format("{}: a config.json is a JSON object", path)});
  if (!c.contains("num_attention_heads") && c.contains("text_config") && c["text_config"].is_object())
    c = c["text_config"];
  ModelConfig m;
  m.heads = config_count(c, "num_attention_heads", path);
  if (m.heads == 0) fail(Error{"--model", fmt::format("{}: no num_attention_heads (the query heads)", path)});
  m.kv_heads = config_count(c, "num_key_value_heads", path);
  if (m.kv_heads == 0) m.kv_heads = m.heads;  // no GQA
  m.head_dim = config_count(c, "head_dim", path);
  if (m.head_dim == 0) {
    const std::int64_t hidden = config_count(c, "hidden_size", path);
    if (hidden == 0 || hidden % m.heads != 0)
      fail(Error{"--model", fmt::format("{}: no head_dim, and no hidden_size that num_attention_heads ({}) divides",
                                        path, m.heads)});
    m.head_dim = hidden / m.heads;
  }
  m.layers = config_count(c, "num_hidden_layers", path);
  return m;
}

/// A count from the model's config, unless the flag gives it too: then they must agree.
std::int64_t from_model(std::int64_t model_value, bool given, const std::string& flag_value, const char* flag,
                        const char* field) {
  if (!given) return model_value;
  const std::int64_t v = unwrap(parse_size(flag_value, flag));
  if (v != model_value)
    fail(
        Error{flag, fmt::format("{} contradicts the --model config's {} {}; give one of them", v, field, model_value)});
  return v;
}

}  // namespace

void WorkloadFlags::check_layout_for(const std::string& algo, const ir::Workload& w) const {
  const sched::Algorithm* a = sched::find_algorithm(algo);
  if (layout_given && a != nullptr && a->forced_layout && w.layout != *a->forced_layout)
    fail(Error{Field::Layout, fmt::format("{} runs on the {} layout, not {}: drop --layout, or use {}", a->name,
                                          ir::to_string(*a->forced_layout), ir::to_string(w.layout), a->base)});
}

sim::ChunkSolveOptions WorkloadFlags::solve_options() const {
  if (!(solve_ms >= 0)) fail(Error{"--solve-ms", fmt::format("must be >= 0, got {}", solve_ms)});
  sim::ChunkSolveOptions o;
  o.budget_ms = solve_ms;
  o.seed = solve_seed;
  return o;
}

int WorkloadFlags::model_layers() const { return model.empty() ? 0 : int(read_model_config(model).layers); }

ir::Workload WorkloadFlags::get() const {
  ir::Workload w;
  w.batch = unwrap(parse_size(batch, "--batch"));
  w.seq = unwrap(parse_size(seq, "--seq"));
  if (!model.empty()) {
    const ModelConfig m = read_model_config(model);
    w.heads = from_model(m.heads, heads_given, heads, "--heads", "num_attention_heads");
    w.kv_heads = from_model(m.kv_heads, kv_heads_given, kv_heads, "--kv-heads", "num_key_value_heads");
    w.head_dim = from_model(m.head_dim, head_dim_given, head_dim, "--head-dim", "head_dim");
  } else {
    w.heads = unwrap(parse_size(heads, "--heads"));
    w.kv_heads = kv_heads.empty() ? w.heads : unwrap(parse_size(kv_heads, "--kv-heads"));
    w.head_dim = unwrap(parse_size(head_dim, "--head-dim"));
  }
  auto with_flag = [](auto e, const char* flag) {
    if (!e) fail(Error{flag, e.error().what});
    return *e;
  };
  w.dtype = with_flag(ir::parse_dtype(dtype), "--dtype");
  w.layout = with_flag(ir::parse_layout(layout), "--layout");
  w.pass = with_flag(ir::parse_pass(pass), "--pass");
  w.causal = causal;
  if (!mask.empty()) {
    if (auto st = ir::apply_mask(w, mask_from_cu_seqlens(mask)); !st) fail(st.error());
    if (causal && !w.causal) fail(Error{"--mask", "full contradicts --causal; give one of them"});
  }
  return w;
}

}  // namespace charm::cli
