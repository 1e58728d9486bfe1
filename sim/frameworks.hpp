#pragma once
// What each algorithm is called where people configure context parallelism:
// Megatron-LM's `--cp-comm-type` (TransformerEngine's `cp_comm_type` underneath)
// and the ring-flash-attention package's functions, read from the algorithm table
// (sched::Algorithm::counterparts): `charm advise` prints its best candidate's row,
// `docs/algorithms.md` holds `framework_table_markdown()` verbatim (frameworks_test checks both).
//
// Layouts: Megatron-LM cuts the sequence into 2N chunks and gives rank r chunks
// r and 2N-1-r (this project's zigzag layout) whenever the mask is causal, for
// every communication type; ring-flash-attention's ring_flash_attn and
// llama3_flash_attn take contiguous shards, zigzag_ring_flash_attn zigzag ones.
// Without a mask the layouts cost the same, so a counterpart holds on either.

#include <nlohmann/json.hpp>

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "scheduler/ir/workload.hpp"
#include "scheduler/planners/algorithms.hpp"

namespace charm::sim {

/// One counterpart of the algorithm table (layout, Megatron-LM and TE types, ring-flash-attention's
/// function, the shards each takes, a note) with the algorithm's name.
struct FrameworkRow : sched::Counterpart {
  std::string_view algo{};  // the planner's name (sched::algorithm_names)
};

/// Every algorithm's rows (an algorithm whose counterpart depends on the layout has one per layout).
[[nodiscard]] std::span<const FrameworkRow> framework_table();

/// The settings for one candidate, on `ranks` GPUs in `domains` (usp's ring degree).
struct FrameworkSettings {
  std::string megatron_args;    // "--context-parallel-size 16 --cp-comm-type p2p"; empty: no counterpart
  std::string te;               // TransformerEngine cp_comm_type; empty with megatron_args
  std::string ring_flash_attn;  // empty: no counterpart
  std::string other_call;       // another library's call (DeepSpeed-Ulysses, yunchang); empty: none
  std::string note;             // the row's note, or why the mask and layout rule a counterpart out
  /// Whether some framework runs this schedule (a row a team can launch).
  [[nodiscard]] bool runnable() const {
    return !megatron_args.empty() || !ring_flash_attn.empty() || !other_call.empty();
  }
  /// One line: "in Megatron-LM: ... (TransformerEngine cp_comm_type "p2p"); ring-flash-attention: ..."
  /// or "no counterpart in Megatron-LM/TE or ring-flash-attention (...)".
  [[nodiscard]] std::string line() const;
};
/// An algorithm the table does not list (a planner added without a row) has no counterpart, said so.
/// `tp` > 0: the candidate runs in a CP x TP layout: Megatron-LM's arguments name the TP size too (with
/// --sequence-parallel where TP > 1, the scheme the attention block's costs assume).
[[nodiscard]] FrameworkSettings framework_settings(std::string_view algo, ir::Layout layout, bool causal, int ranks,
                                                   int domains, int tp = 0);

/// {"megatron_lm", "transformer_engine_cp_comm_type", "ring_flash_attention" (each null where none), "note",
/// "line"}: a candidate's entry in `charm advise --json`.
[[nodiscard]] nlohmann::json framework_json(const FrameworkSettings& s);

/// The table as docs/algorithms.md shows it (Markdown, one row per FrameworkRow that names a counterpart or has a
/// note).
[[nodiscard]] std::string framework_table_markdown();

}  // namespace charm::sim
