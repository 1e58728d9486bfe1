#include "sim/frameworks.hpp"

#include <fmt/format.h>

#include <vector>

#include "scheduler/planners/algorithms.hpp"

namespace charm::sim {

using ir::Layout;

namespace {

/// The algorithm table's counterparts, one row each (an algorithm without any: one row of none).
std::vector<FrameworkRow> make_table() {
  std::vector<FrameworkRow> t;
  for (const auto& a : sched::algorithms()) {
    if (a.counterparts.empty()) t.push_back(FrameworkRow{{}, a.name});
    for (const auto& c : a.counterparts) t.push_back(FrameworkRow{c, a.name});
  }
  return t;
}

const std::vector<FrameworkRow>& table() {
  static const std::vector<FrameworkRow> t = make_table();
  return t;
}

const FrameworkRow* find_row(std::string_view algo, Layout layout) {
  for (const auto& r : table())
    if (r.algo == algo && (!r.layout || *r.layout == layout)) return &r;
  return nullptr;
}

/// Whether a counterpart that takes `shards` holds for a candidate on `layout`: any layout without a mask.
bool holds(std::optional<Layout> shards, Layout layout, bool causal) { return !causal || !shards || *shards == layout; }

std::string layout_text(std::optional<Layout> l) { return l ? std::string(ir::to_string(*l)) : "any"; }

}  // namespace

std::span<const FrameworkRow> framework_table() { return table(); }

FrameworkSettings framework_settings(std::string_view algo, Layout layout, bool causal, int ranks, int domains,
                                     int tp) {
  FrameworkSettings s;
  if (ranks <= 1) causal = false;  // a CP group of one GPU splits nothing: every layout is the same sequence
  if (layout == Layout::Balanced && ranks > 1) {
    s.note = "the balanced layout (solved chunks of the packed documents, a ring that stops at each shard's last "
             "reader) is this tool's schedule; no framework lays documents out or prunes its ring so";
    return s;
  }
  const FrameworkRow* row = find_row(algo, layout);
  if (row == nullptr) {
    s.note = fmt::format("{} is not in the table of counterparts", algo);
    return s;
  }
  s.note = std::string(row->note);
  std::vector<std::string> ruled_out;
  if (!row->megatron.empty()) {
    if (holds(row->megatron_shards, layout, causal)) {
      std::string type(row->megatron), te(row->te), extra;
      if (const sched::Algorithm* a = sched::find_algorithm(algo);
          a != nullptr && a->heads == sched::Algorithm::HeadSplit::PerDomain) {
        // USP's degrees: Ulysses over n/D adjacent ranks, the ring over D; a degenerate split is one of them.
        const int inner = domains > 0 ? ranks / domains : ranks;
        if (domains <= 1) {
          type = te = "a2a";
        } else if (inner <= 1) {
          type = te = "p2p";
        } else {
          extra = fmt::format(" --hierarchical-context-parallel-sizes {} {}", inner, domains);
        }
      }
      const std::string tp_args =
          tp > 0 ? fmt::format("--tensor-model-parallel-size {}{} ", tp, tp > 1 ? " --sequence-parallel" : "") : "";
      s.megatron_args = fmt::format("{}--context-parallel-size {} --cp-comm-type {}{}", tp_args, ranks, type, extra);
      s.te = te;
    } else {
      ruled_out.push_back(fmt::format("Megatron-LM splits a causal sequence {}", layout_text(row->megatron_shards)));
    }
  }
  if (!row->ring_flash_attn.empty()) {
    if (holds(row->rfa_shards, layout, causal))
      s.ring_flash_attn = std::string(row->ring_flash_attn);
    else
      ruled_out.push_back(fmt::format("{} takes {} shards", row->ring_flash_attn, layout_text(row->rfa_shards)));
  }
  s.other_call = std::string(row->other_call);
  for (const auto& why : ruled_out) s.note += (s.note.empty() ? "" : "; ") + why;
  return s;
}

std::string FrameworkSettings::line() const {
  const std::string why = note.empty() ? "" : fmt::format(" ({})", note);
  if (!runnable()) return "no counterpart in Megatron-LM/TE or ring-flash-attention" + why;
  const std::string megatron =
      megatron_args.empty() ? "none" : fmt::format("{} (TransformerEngine cp_comm_type \"{}\")", megatron_args, te);
  return fmt::format("in Megatron-LM: {}; ring-flash-attention: {}{}{}", megatron,
                     ring_flash_attn.empty() ? "none" : ring_flash_attn,
                     other_call.empty() ? "" : fmt::format("; also {}", other_call), why);
}

nlohmann::json framework_json(const FrameworkSettings& s) {
  using nlohmann::json;
  auto or_null = [](const std::string& v) { return v.empty() ? json(nullptr) : json(v); };
  return {{"megatron_lm", or_null(s.megatron_args)},
          {"transformer_engine_cp_comm_type", or_null(s.te)},
          {"ring_flash_attention", or_null(s.ring_flash_attn)},
          {"other", or_null(s.other_call)},
          {"runnable", s.runnable()},
          {"note", s.note},
          {"line", s.line()}};
}

std::string framework_table_markdown() {
  std::string out =
      "| algo | layout | Megatron-LM `--cp-comm-type` | TransformerEngine `cp_comm_type` | Megatron-LM's causal "
      "shards | ring-flash-attention | its shards | other library | note |\n"
      "|---|---|---|---|---|---|---|---|---|\n";
  auto code = [](std::string_view s) { return s.empty() ? std::string("none") : fmt::format("`{}`", s); };
  for (const auto& r : table()) {
    const bool m = !r.megatron.empty(), f = !r.ring_flash_attn.empty();
    if (!m && !f && r.note.empty()) continue;  // an algorithm the table says nothing of
    out += fmt::format("| `{}` | {} | {} | {} | {} | {} | {} | {} | {} |\n", r.algo, layout_text(r.layout),
                       code(r.megatron), code(r.te), m ? layout_text(r.megatron_shards) : "-", code(r.ring_flash_attn),
                       f ? layout_text(r.rfa_shards) : "-", r.other_call.empty() ? "-" : std::string(r.other_call),
                       r.note.empty() ? "-" : std::string(r.note));
  }
  return out;
}

}  // namespace charm::sim
