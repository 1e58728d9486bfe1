#pragma once
// One attention layer's workload as a person writes it: the command's flags and the Python module's arguments
// fill the same value (sizes as text, "4k"; a Hugging Face config.json for the heads; a mask spec, or a file of
// FlashAttention's cu_seqlens), and WorkloadSpec::get reads it into an ir::Workload. Errors are values, each
// naming its flag. Below the application layer (target charm_app_workload, no simulator): `charm plan` and
// `charm run` read workloads in builds without one.

#include <cstdint>
#include <string>

#include "scheduler/ir/workload.hpp"
#include "sim/chunk_solver.hpp"
#include "support/expected.hpp"

namespace charm::app {

struct WorkloadSpec {
  std::string batch = "1", seq = "4k", heads = "8", kv_heads, head_dim = "128";
  std::string dtype = "bf16", layout = "contiguous", pass = "fwd";
  bool causal = false;
  std::string mask;           // --mask: causal | full | document:L1,L2,... | cu_seqlens:FILE | sliding:W
  std::string model;          // --model: a Hugging Face config.json giving the heads, kv heads and head dim
  bool layout_given = false;  // --layout was given (not its default)
  // --heads, --kv-heads, --head-dim given: with --model each must agree with the config's.
  bool heads_given = false, kv_heads_given = false, head_dim_given = false;

  /// The workload. Errors name the flag: a size that does not parse, a model config without its heads or
  /// contradicting a count also given, a mask that does not apply (or a full one beside --causal).
  [[nodiscard]] Expected<ir::Workload> get() const;
  /// An error of --layout where it was given and `w` (get()'s) names another layout than the one `algo` always
  /// runs on (the -zigzag variants: the planner would run theirs instead of the one asked for).
  [[nodiscard]] Status check_layout_for(const std::string& algo, const ir::Workload& w) const;
  /// The model's attention layers (its config's num_hidden_layers), or 0 without --model.
  [[nodiscard]] Expected<int> model_layers() const;
};

/// The balanced layout's chunk-map solver options: its time budget in ms (--solve-ms, at least 0) and the seed of
/// its shuffled candidates (--solve-seed).
[[nodiscard]] Expected<sim::ChunkSolveOptions> chunk_solve_options(double budget_ms, std::uint64_t seed);

}  // namespace charm::app
