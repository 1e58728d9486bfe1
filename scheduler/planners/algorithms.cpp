// The algorithm table (algorithms.hpp): one row per algorithm, the schedules it builds from
// schedules.hpp, and the rank symmetry of its plans (checked against ir::check_symmetric by the
// tests over algorithms, passes, masks, layouts, rank and domain counts).

#include "scheduler/planners/algorithms.hpp"

#include <algorithm>

#include "scheduler/planners/planners.hpp"
#include "scheduler/planners/schedules.hpp"

namespace charm::sched {

using namespace charm::ir;
using Kind = RankSymmetry::Kind;

namespace {

// ---- symmetries: a causal mask breaks every one but usp's on zigzag (planners.hpp) ----

RankSymmetry rotate_by_rank(const PlanRequest& r) {
  return r.workload.causal ? RankSymmetry{} : RankSymmetry{Kind::Rotate, 1};
}
RankSymmetry merge_symmetry(const PlanRequest& r) {
  // The backward's reduce-scatter orders the owners it sends by their number: blocks of ranks / 2.
  if (r.workload.causal) return {};
  return {Kind::Xor, r.workload.pass == PassKind::Fwd ? 1 : std::max(1, r.ranks / 2)};
}
RankSymmetry xor_by_rank(const PlanRequest& r) {
  return r.workload.causal ? RankSymmetry{} : RankSymmetry{Kind::Xor, 1};
}
RankSymmetry charm_symmetry(const PlanRequest& r) {
  // Queries cross more than two domains as a rotation of whole domains.
  if (r.workload.causal) return {};
  return r.domains <= 2 ? RankSymmetry{Kind::Xor, 1} : RankSymmetry{Kind::Rotate, r.ranks / r.domains};
}
RankSymmetry heads_by_rank(const PlanRequest&) {
  // A rank's head slice is its own, but every slice costs the same: a symmetry by cost, causal or not
  // (each rank computes the whole sequence of its heads).
  return {.kind = Kind::Rotate, .block = 1, .heads_are_labels = true};
}
RankSymmetry usp_symmetry(const PlanRequest& r) {
  // Its computes span whole domains, whose pairs all see the same number of keys under zigzag.
  const int per_domain = r.ranks / r.domains;
  if (r.domains <= 1) return {};
  if (r.workload.causal && !(r.workload.layout == Layout::Zigzag && per_domain > 1)) return {};
  return {Kind::Rotate, per_domain};
}

// ---- the schedules each algorithm builds ----

void ring_fwd(PlanBuilder& b, std::vector<detail::RankState>& st, const PlanRequest&) { detail::ring_forward(b, st); }
void ring_bwd(PlanBuilder& b, std::vector<detail::RankState>& st, const PlanRequest&) { detail::ring_backward(b, st); }
void merge_fwd(PlanBuilder& b, std::vector<detail::RankState>& st, const PlanRequest&) { detail::merge_forward(b, st); }
void merge_bwd(PlanBuilder& b, std::vector<detail::RankState>& st, const PlanRequest&) {
  detail::merge_backward(b, st);
}
void gather_fwd(PlanBuilder& b, std::vector<detail::RankState>& st, const PlanRequest&) {
  detail::allgather_forward(b, st);
}
void gather_bwd(PlanBuilder& b, std::vector<detail::RankState>& st, const PlanRequest&) {
  detail::allgather_backward(b, st);
}
void rmplus_fwd(PlanBuilder& b, std::vector<detail::RankState>& st, const PlanRequest&) {
  detail::charm_forward(b, st, 1);
}
void rmplus_bwd(PlanBuilder& b, std::vector<detail::RankState>& st, const PlanRequest&) {
  detail::charm_backward(b, st, 1);
}
void charm_fwd(PlanBuilder& b, std::vector<detail::RankState>& st, const PlanRequest& r) {
  detail::charm_forward(b, st, r.domains);
}
void charm_bwd(PlanBuilder& b, std::vector<detail::RankState>& st, const PlanRequest& r) {
  detail::charm_backward(b, st, r.domains);
}
void tasp_fwd(PlanBuilder& b, std::vector<detail::RankState>& st, const PlanRequest&) { detail::tasp_forward(b, st); }
void ulysses_fwd(PlanBuilder& b, std::vector<detail::RankState>& st, const PlanRequest&) {
  detail::usp_forward(b, st, 1);
}
void ulysses_bwd(PlanBuilder& b, std::vector<detail::RankState>& st, const PlanRequest&) {
  detail::usp_backward(b, st, 1);
}
void usp_fwd(PlanBuilder& b, std::vector<detail::RankState>& st, const PlanRequest& r) {
  detail::usp_forward(b, st, r.domains);
}
void usp_bwd(PlanBuilder& b, std::vector<detail::RankState>& st, const PlanRequest& r) {
  detail::usp_backward(b, st, r.domains);
}

constexpr std::string_view kTaspForwardOnly = "the TASP paper and its reference code are forward only";

using A = Algorithm;

// Ops per ranks^2 measured at 32 ranks (fwd, fwd+bwd): ring 2.9 / 8.9, merge 2.9 / 8.8, rm+ 4.4 / 10.3,
// charm 3.8 / 7.9, allgather-kv 2.9 / 8.8, ulysses 8.8 / 17.7, usp 2.4 / 5.1; tasp 2.9 per part; rounded up.
// Megatron-LM cuts a causal sequence into 2N chunks, rank r holding chunks r and 2N-1-r (the zigzag layout),
// for every communication type; ring-flash-attention's ring_flash_attn and llama3_flash_attn take
// contiguous shards, zigzag_ring_flash_attn zigzag ones. Megatron-LM spells the all-gather type
// `allgather`, TransformerEngine `all_gather`.

void add_rings(std::vector<Algorithm>& t) {
  A ring{.name = "ring",
         .forward = ring_fwd,
         .backward = ring_bwd,
         .symmetry = rotate_by_rank,
         .counterparts = {{Layout::Contiguous, "p2p", "p2p", Layout::Zigzag, "ring_flash_attn", Layout::Contiguous,
                           "Megatron-LM's causal split is zigzag: that is ring [zigzag]"},
                          {Layout::Zigzag, "p2p", "p2p", Layout::Zigzag, "zigzag_ring_flash_attn", Layout::Zigzag, ""}},
         .closed_form = A::ClosedForm::Ring,
         .baseline = true,
         .colour = "#555555"};
  t.push_back(ring);
  A ring_zigzag = ring;
  ring_zigzag.name = "ring-zigzag";
  ring_zigzag.baseline = false;
  ring_zigzag.colour = "#8c564b";
  ring_zigzag.forced_layout = Layout::Zigzag;
  ring_zigzag.base = "ring";
  ring_zigzag.counterparts = {
      {{}, "p2p", "p2p", Layout::Zigzag, "zigzag_ring_flash_attn", Layout::Zigzag, "ring on the zigzag layout"}};
  t.push_back(ring_zigzag);
}

/// The paper's schedules: its merge baseline, RM+ and CHARM+.
void add_merges(std::vector<Algorithm>& t) {
  t.push_back(A{.name = "merge",
                .ranks = A::Ranks::PowerOfTwo,
                .forward = merge_fwd,
                .backward = merge_bwd,
                .symmetry = merge_symmetry,
                .counterparts = {{.note = "this project's merge schedule (the paper's baseline)"}},
                .closed_form = A::ClosedForm::Merge,
                .passes_overlap = true,
                .colour = "#1f77b4"});
  t.back().gather_tables = 1;
  t.push_back(A{.name = "rm+",
                .ranks = A::Ranks::PowerOfTwo,
                .ops_fwd = {.square = 4.5},
                .ops_both = {.square = 10.5},
                .causal_ops = A::CausalOps::Pairs,
                .forward = rmplus_fwd,
                .backward = rmplus_bwd,
                .symmetry = xor_by_rank,
                .counterparts = {{.note = "the paper's re-merge schedule"}},
                .closed_form = A::ClosedForm::RmPlus,
                .passes_overlap = true,
                .colour = "#2ca02c"});
  t.push_back(A{.name = "charm",
                .ranks = A::Ranks::PowerOfTwoPerDomain,
                .uses_domains = true,
                .ops_fwd = {.square = 3.5, .over_domains = 1},
                .ops_both = {.square = 7, .over_domains = 3.5},
                .causal_ops = A::CausalOps::Pairs,
                .forward = charm_fwd,
                .backward = charm_bwd,
                .symmetry = charm_symmetry,
                .counterparts = {{.note = "the paper's cross-hardware schedule"}},
                .colour = "#d62728"});
}

void add_gather_and_tasp(std::vector<Algorithm>& t) {
  t.push_back(A{.name = "allgather-kv",
                .gather_tables = 1,
                .forward = gather_fwd,
                .backward = gather_bwd,
                .symmetry = rotate_by_rank,
                .counterparts = {{{},
                                  "allgather",
                                  "all_gather",
                                  Layout::Zigzag,
                                  "llama3_flash_attn",
                                  Layout::Contiguous,
                                  "KV gathered whole before attention"}},
                .colour = "#9467bd"});
  A tasp{.name = "tasp",
         .no_backward = kTaspForwardOnly,
         .token_parts = true,
         .forward = tasp_fwd,
         .symmetry = rotate_by_rank,
         .counterparts = {{.note = "TASP's Hamiltonian-cycle schedule"}},
         .colour = "#ff7f0e"};
  tasp.ops_fwd = tasp.ops_both = {.square = 3};
  t.push_back(tasp);
  A tasp_zigzag = tasp;
  tasp_zigzag.name = "tasp-zigzag";
  tasp_zigzag.forced_layout = Layout::Zigzag;
  tasp_zigzag.base = "tasp";
  tasp_zigzag.counterparts = {{.note = "tasp on the zigzag layout"}};
  tasp_zigzag.colour = "#bcbd22";
  t.push_back(tasp_zigzag);
}

/// The head-splitting schedules: Ulysses' all-to-all, and USP (Ulysses inside a domain, a ring across).
void add_head_splits(std::vector<Algorithm>& t) {
  t.push_back(A{.name = "ulysses",
                .heads = A::HeadSplit::AllRanks,
                .ops_fwd = {.square = 9},
                .ops_both = {.square = 18},
                .causal_ops = A::CausalOps::Unchanged,
                .forward = ulysses_fwd,
                .backward = ulysses_bwd,
                .packs_bundle = true,
                .symmetry = heads_by_rank,
                .counterparts = {{.megatron = "a2a",
                                  .te = "a2a",
                                  .note = "ring-flash-attention has no all-to-all",
                                  .other_call = "DeepSpeed-Ulysses deepspeed.sequence.layer.DistributedAttention"}},
                .colour = "#17becf"});
  t.push_back(A{.name = "usp",
                .uses_domains = true,
                .heads = A::HeadSplit::PerDomain,
                .ops_fwd = {.square = 0, .over_domains = 9, .across = 3},
                .ops_both = {.square = 0, .over_domains = 18, .across = 9},
                .causal_ops = A::CausalOps::Unchanged,
                .forward = usp_fwd,
                .backward = usp_bwd,
                .packs_bundle = true,
                .symmetry = usp_symmetry,
                .counterparts = {{.megatron = "a2a+p2p",
                                  .te = "a2a+p2p",
                                  .megatron_shards = Layout::Zigzag,
                                  .note = "ring-flash-attention has no all-to-all",
                                  .other_call = "yunchang LongContextAttention (USP's own implementation)"}},
                .colour = "#e377c2"});
}

std::vector<Algorithm> make_table() {
  std::vector<Algorithm> t;
  add_rings(t);
  add_merges(t);
  add_gather_and_tasp(t);
  add_head_splits(t);
  return t;
}

}  // namespace

const std::vector<Algorithm>& algorithms() {
  static const std::vector<Algorithm> table = make_table();
  return table;
}

const Algorithm* find_algorithm(std::string_view name) {
  for (const auto& a : algorithms())
    if (a.name == name) return &a;
  return nullptr;
}

std::string_view baseline_algorithm() {
  for (const auto& a : algorithms())
    if (a.baseline) return a.name;
  CHARM_ASSERT(false, "the algorithm table marks a baseline");
  return {};
}

std::string_view default_algorithm() { return "charm"; }

bool Algorithm::baseline_family() const { return baseline || base == baseline_algorithm(); }

bool in_baseline_family(std::string_view name) {
  const Algorithm* a = find_algorithm(name);
  return a != nullptr && a->baseline_family();
}

}  // namespace charm::sched
