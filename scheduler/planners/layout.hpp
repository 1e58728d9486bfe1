#pragma once
// Deployments: context-parallel groups inside a tensor- and data-parallel layout.
//
// A job of G GPUs runs CP x TP x DP = G: every CP group (one per TP rank and DP replica) runs
// the same context-parallel plan on its own heads (TP splits them) and batch (DP), all at once,
// sharing the cluster's links. `order` says which axis is innermost in GPU numbering:
//   TpInner (Megatron-LM's default): GPU = d*CP*TP + c*TP + t, TP peers adjacent;
//   CpInner:                         GPU = d*CP*TP + t*CP + c, a CP group on consecutive GPUs.
// The deployment plan holds the groups group-major (ir::Plan::groups): group g = d*TP + t on
// ranks [g*CP, (g+1)*CP), CP rank c of group g on GPU layout_gpu(l, g, c) (ir::Plan::gpus).

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "scheduler/ir/plan.hpp"
#include "scheduler/ir/symmetry.hpp"
#include "support/expected.hpp"

namespace charm::sched {

enum class LayoutOrder : std::uint8_t { TpInner, CpInner };

struct Layout {
  int cp = 1, tp = 1, dp = 1;
  LayoutOrder order = LayoutOrder::TpInner;
  [[nodiscard]] int gpus() const { return cp * tp * dp; }
  [[nodiscard]] int groups() const { return tp * dp; }
};

/// "tp-cp" (TP innermost) or "cp-tp"; an error of --order otherwise.
[[nodiscard]] Expected<LayoutOrder> parse_layout_order(std::string_view s);
[[nodiscard]] const char* to_string(LayoutOrder o);

/// The layout of `gpus` GPUs with CP size `cp` and TP size `tp` (DP the rest). Errors (one line,
/// of --cp / --tp): sizes below 1, or cp x tp not dividing the GPUs.
[[nodiscard]] Expected<Layout> make_layout(int gpus, int cp, int tp, LayoutOrder order);

/// The layout of `gpus` GPUs with TP size `tp` and CP the rest (DP 1). Errors (of --tp): tp below 1,
/// or tp not dividing the GPUs.
[[nodiscard]] Expected<Layout> make_tp_layout(int gpus, int tp, LayoutOrder order);

/// One CP group's workload: w with TP's share of the heads and kv heads. Error (of --tp) where TP
/// does not divide them.
[[nodiscard]] Expected<ir::Workload> group_workload(const ir::Workload& w, const Layout& l);

/// The GPU that CP rank c of group g runs on.
[[nodiscard]] int layout_gpu(const Layout& l, int group, int c);
/// Every rank's GPU in the deployment plan's numbering (rank g*cp + c).
[[nodiscard]] std::vector<std::int32_t> layout_gpus(const Layout& l);

/// One hop of a TP ring: GPU `from` sends to GPU `to`.
struct GpuHop {
  int from = 0, to = 0;
};
/// Every TP ring's hops at once (TP rank k of each CP rank's group to k + 1, modulo TP): what one step
/// of TP's ring collectives moves, DP replica by replica, CP rank by CP rank.
[[nodiscard]] std::vector<GpuHop> tp_ring_hops(const Layout& l);

/// The smallest number of ranks, a multiple of cp that divides the GPU count, whose shift of
/// the deployment's ranks shifts their GPUs alike (gpus[(k + b) mod G] = (gpus[k] + b) mod G):
/// the rank rotation the deployment is invariant under (every group runs the same plan). G when
/// only the identity is one (TP innermost with one DP replica: the groups interleave on the GPUs).
[[nodiscard]] int layout_block(std::span<const std::int32_t> gpus, int cp);

/// The deployment plan of `group` (one CP group's full plan, cp ranks) under `l`: copies of it for
/// groups [0, copies), ranks, peers and owners shifted by g*cp, every rank's GPU from the layout.
/// copies == l.groups(): the full deployment; fewer (a multiple-of-cp block b = copies*cp with
/// layout_block dividing b): its quotient under the rotation by b (ir::Plan::symmetry), which the
/// simulator runs as the whole cluster where the topology has that symmetry.
[[nodiscard]] ir::Plan place_groups(const ir::Plan& group, const Layout& l, int copies);

/// How many CP groups of layout `l` to simulate for all on a machine with `blocks`: the smallest class of whole
/// groups that the layout's rotation of ranks and the machine's blocks share, or every group where none is (TP
/// peers interleaving one replica's groups; blocks spanning them all). Error: why not, for --symmetry on.
[[nodiscard]] Expected<int> deployment_copies(const Layout& l, const ir::BlockSymmetry& blocks);

/// Why a deployment (--cp / --tp) cannot run the balanced layout: its chunks are solved for one CP group.
[[nodiscard]] Error balanced_deployment_refusal();

/// "32 GPUs: CP 16 x TP 2 (tp-cp): CP group 0 on GPUs 0,2,4,...,30" — the layout in one line.
[[nodiscard]] std::string layout_text(const Layout& l);

}  // namespace charm::sched
