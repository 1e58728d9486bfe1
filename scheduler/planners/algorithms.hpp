#pragma once
// The algorithm table: everything the pass driver, the request checks, the estimates and the
// symmetry know about one algorithm, in one row (algorithms.cpp). A new algorithm is one row
// plus its schedule builders (schedules.hpp).

#include <optional>
#include <string_view>
#include <vector>

#include "scheduler/ir/plan.hpp"

namespace charm::sched {

class PlanBuilder;
struct PlanRequest;
namespace detail {
struct RankState;
}

/// What an algorithm is called where people configure context parallelism: Megatron-LM's
/// `--cp-comm-type` (TransformerEngine's `cp_comm_type` underneath) and the ring-flash-attention
/// package's function, with the shards each takes (sim/frameworks.hpp turns these into settings).
struct Counterpart {
  std::optional<ir::Layout> layout{};           // the candidates' layout this entry is for; unset: either
  std::string_view megatron{};                  // Megatron-LM --cp-comm-type; empty: no counterpart
  std::string_view te{};                        // TransformerEngine cp_comm_type (the same scheme)
  std::optional<ir::Layout> megatron_shards{};  // the layout Megatron-LM's causal split gives; unset: any
  std::string_view ring_flash_attn{};           // ring-flash-attention function; empty: none
  std::optional<ir::Layout> rfa_shards{};       // the shards it takes; unset: any
  std::string_view note{};                      // why there is none, or what differs
  std::string_view other_call{};                // another library's call that runs it ("DeepSpeed-Ulysses: ...")
};

struct Algorithm {
  using Build = void (*)(PlanBuilder&, std::vector<detail::RankState>&, const PlanRequest&);
  using Symmetry = ir::RankSymmetry (*)(const PlanRequest&);

  /// Which rank counts the schedule takes.
  enum class Ranks : std::uint8_t { Any, PowerOfTwo, PowerOfTwoPerDomain };
  /// How the schedule splits heads over ranks (Ulysses' all-to-all): not, over every rank, over a domain's.
  enum class HeadSplit : std::uint8_t { None, AllRanks, PerDomain };
  /// The paper's closed form of its time (sim/formulas), if it has one: Eq. 1-2 (ring), 3-4 (merge), 5-6 (rm+).
  enum class ClosedForm : std::uint8_t { None, Ring, Merge, RmPlus };
  /// What a causal mask on the contiguous layout takes off its op count (estimate_plan): the ops of
  /// hidden pairs (it plans pairs, transfers included), their computes only (the ring family moves
  /// every shard), or nothing (whole heads computed locally).
  enum class CausalOps : std::uint8_t { Pairs, ComputesOnly, Unchanged };

  std::string_view name;
  std::optional<ir::Layout> forced_layout{};  // the layout it always runs on (the -zigzag variants)
  std::string_view base{};                    // ... and the algorithm that runs on either layout
  Ranks ranks = Ranks::Any;
  bool uses_domains = false;          // PlanRequest::domains shapes the schedule (charm, usp)
  std::string_view no_backward{};     // why it plans no backward pass (empty: it does)
  HeadSplit heads = HeadSplit::None;  // ulysses, usp
  bool token_parts = false;           // each shard in one part per Hamiltonian cycle (tasp)
  /// estimate_plan's op count of a pass on n ranks in d domains (per part with token_parts):
  /// n^2 (square + over_domains / d) + across n d. Fitted to plans of 64 and 256 ranks in 1 to 64 domains,
  /// and rounded up: charm's merge levels fall as domains grow (d = 1 is rm+), usp's all-to-all spans a
  /// domain (n^2 / d: d = 1 is ulysses) and its ring crosses the domains (n d).
  struct OpCount {
    double square = 3, over_domains = 0, across = 0;
    [[nodiscard]] double at(double n, double d) const { return n * n * (square + over_domains / d) + across * n * d; }
  };
  OpCount ops_fwd{}, ops_both{.square = 9};
  CausalOps causal_ops = CausalOps::ComputesOnly;
  double gather_tables = 0;  // estimate_quotient_plan: ranks^2 id tables per pass over all ranks
  Build forward = nullptr;
  Build backward = nullptr;     // after the driver packs each rank's bundle, unless packs_bundle
  bool packs_bundle = false;    // the backward packs its own bundles (on head shards)
  Symmetry symmetry = nullptr;  // its plans' rank symmetry without a position mask (plan_symmetry)
  /// Its names in the frameworks: one entry, or one per layout where they differ (none: no counterpart).
  std::vector<Counterpart> counterparts{};
  ClosedForm closed_form = ClosedForm::None;
  bool passes_overlap = false;  // its backward starts while its forward's last steps still run (pass both)
  bool baseline = false;        // what speedups are over (compare, sweep, calibrate's speedup rows)
  std::string_view colour{};    // its line in every figure (sweep's gnuplot)

  /// Whether it is the baseline or the baseline on a forced layout (ring, ring-zigzag).
  [[nodiscard]] bool baseline_family() const;
};

/// Every algorithm, in the order reports list them.
[[nodiscard]] const std::vector<Algorithm>& algorithms();
/// The row of a canonical name (resolve_algorithm's); nullptr for any other.
[[nodiscard]] const Algorithm* find_algorithm(std::string_view name);
/// The baseline's name (the row marked baseline: ring).
[[nodiscard]] std::string_view baseline_algorithm();
/// What --algo means when not given (the paper's schedule).
[[nodiscard]] std::string_view default_algorithm();
/// Whether `name` is the baseline or the baseline on a forced layout; false for an unknown name.
[[nodiscard]] bool in_baseline_family(std::string_view name);

}  // namespace charm::sched
