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

sim::ChunkSolveOptions WorkloadFlags::solve_options() const {
  return unwrap(app::chunk_solve_options(solve_ms, solve_seed));
}

}  // namespace charm::cli
