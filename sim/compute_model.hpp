#pragma once
// ComputeModel: how long one op of a plan keeps its stream busy.
//
// An attention block, with the kernel's shape known (sm_count > 0):
//
//   tiles      q_tiles = ceil(Lq / tile_q), kv_tiles = ceil(Lk / tile_kv) per batch-head
//   thread blocks  one per (batch, head, query tile), each running its kv loop;
//              a full block's loop is kv_tiles long, a causal diagonal's i-th query
//              tile sees the tiles up to the diagonal (tile granularity: a diagonal
//              tile costs a whole one)
//   waves      full:   ceil(B*H*q_tiles / SMs) * kv_tiles tile steps per SM
//              causal: max(ceil(sum of loops / SMs), longest loop)
//   time       launch + tile steps * t_tile,   t_tile = flops(tile) / (peak/SMs * efficiency)
//
// so small blocks leave SMs idle and pay the launch, and at large sizes the time
// tends to flops / (peak * efficiency). A block of packed documents or a sliding window runs as a varlen
// kernel: each document's piece its own tiles, loops summed as the causal ones (varlen_tiles.hpp).
// Without the shape (sm_count 0):
//
//   compute:        flops / (peak(dtype) * efficiency(pass, block side)) + launch
//   efficiency:     e_pass * side / (side + half_tokens), side = sqrt(visible pairs per batch-head)
//
// Every attention block also pays the stack's per-step cost (the framework issuing it) and
// its update of the running results: update_passes * 12 bytes per fp32 result element of the
// forward's O, bwd_update_passes * 12 per element of the backward's dQ, dK and dV, over the HBM rate.
//   merge/acc/copy: bytes * merge_traffic / hbm_bandwidth + launch   (free when hbm_bandwidth is 0)
// A user calibrates it from measured kernel times through the topology's "gpu"
// block (efficiency, sm_count, kernel tiles, launch_us, hbm_gbps) and "stack".

#include <memory>
#include <optional>
#include <vector>

#include "scheduler/ir/plan.hpp"
#include "topologies/topology.hpp"

namespace charm::sim {

class DocumentShards;
using Seconds = double;

/// The query and key tokens of one attention block (per batch-head) and whether it is a causal
/// diagonal (query i sees keys up to its own position: q == kv).
struct BlockShape {
  double q = 0, kv = 0;
  bool triangle = false;

  /// The shape a planner's block of `pairs` visible pairs per batch-head and mask piece has
  /// (square unless the piece says otherwise).
  [[nodiscard]] static BlockShape of(double pairs, ir::MaskPiece mask);
  /// Visible (query, key) pairs per batch-head.
  [[nodiscard]] double pairs() const;
};

/// What a kernel library's table says a tile wave attains, by pass, mask, head dim and block size:
/// each table row turned into the attainment under which the tile model gives the row's measured time
/// back, interpolated in log head dim and log tokens between rows, the nearest row held outside them.
class KernelAttainment {
 public:
  struct Point {
    double head_dim = 0, tokens = 0, efficiency = 0;
  };
  /// The attainment at a block of `tokens` (sqrt(q x kv)) and `head_dim`; `outside` is set when the
  /// table does not bracket them (the nearest row holds).
  [[nodiscard]] double at(bool fwd, bool causal, double head_dim, double tokens, bool* outside = nullptr) const;
  /// Adds one row's point; add every row, then ask.
  void add(bool fwd, bool causal, Point p);

 private:
  /// One head dim's points of one pass and mask, by log2 tokens.
  struct Curve {
    double log_head_dim = 0;
    std::vector<double> log_tokens, efficiency;
  };
  static int index(bool fwd, bool causal) { return (fwd ? 0 : 2) + (causal ? 1 : 0); }
  std::vector<Curve> curves_[4];  // by log2 head dim
};

struct ComputeModel {
  double peak_flops = 1e14;
  double efficiency_fwd = 1.0, efficiency_bwd = 1.0;
  double half_tokens = 0;
  Seconds launch_s = 0;
  double hbm_bytes_per_s = 0;  // 0: memory-bound ops take no time
  int sm_count = 0;            // 0: no kernel shape
  topo::KernelTile tile_fwd, tile_bwd;
  Seconds step_s = 0;            // the stack's cost per attention block
  double update_passes = 0;      // the stack's fused passes over a block's fp32 results (12 bytes an element)
  double bwd_update_passes = 0;  // ... over the backward's dQ, dK and dV
  double merge_traffic = 1;      // merge bytes in fused passes
  /// The kernel library's attainment (null: the flat efficiency_fwd / efficiency_bwd), times the scales.
  std::shared_ptr<const KernelAttainment> attainment;
  double kernel_scale_fwd = 1, kernel_scale_bwd = 1;

  [[nodiscard]] static ComputeModel from_gpu(const topo::GpuSpec& g, ir::DType dtype);
  /// The GPU's model with the topology's stack.
  [[nodiscard]] static ComputeModel from_topology(const topo::Topology& t, ir::DType dtype);
  /// Time of an op that runs on a stream by itself (Compute, Merge, Accumulate, Copy). Given the plan's shards cut
  /// by document (`shards`, made once for the many blocks of one workload), a block of packed documents or a
  /// sliding window is priced as a varlen kernel runs it (varlen_seconds); otherwise as compute_seconds' square.
  [[nodiscard]] Seconds op_seconds(const ir::Op& op, const ir::Workload& w,
                                   const DocumentShards* shards = nullptr) const;
  /// A compute block of packed documents or a sliding window (MaskPiece::Positions) as a varlen kernel runs it:
  /// each document's piece its own tiles (varlen_tiles.hpp), each piece at the attainment of its size, with the
  /// stack's step and update as compute_seconds has them. Nullopt where the kernel's shape is not known, or
  /// where the op is not one whole block of the shards' ranks (Ulysses' and USP's head slices, TASP's parts):
  /// those keep compute_seconds' square block.
  [[nodiscard]] std::optional<Seconds> varlen_seconds(const ir::Op& op, const ir::Workload& w,
                                                      const DocumentShards& shards) const;
  /// Time of a compute block of `flops` in `phase` with mask piece `mask` (the closed forms use this too).
  [[nodiscard]] Seconds compute_seconds(ir::Flops flops, ir::Phase phase, const ir::Workload& w,
                                        ir::MaskPiece mask = ir::MaskPiece::Full) const;
  /// The kernel alone (no per-step cost, no update): the tile model when the GPU's shape is
  /// known. What a single-GPU kernel benchmark times.
  [[nodiscard]] Seconds kernel_seconds(const BlockShape& block, ir::Phase phase, const ir::Workload& w) const;
  /// The attained fraction of peak a tile wave of `block` runs at in `phase` (the table's, or the flat one).
  [[nodiscard]] double efficiency(const BlockShape& block, ir::Phase phase, double head_dim) const;
  /// The kernel's busy time at attainment `eff`, without the launch: tile waves over the SMs, or FLOPs alone.
  [[nodiscard]] Seconds busy_seconds(const BlockShape& block, ir::Phase phase, double head_dim, double batch_heads,
                                     double eff) const;
  /// The stack's fused passes over a block's fp32 results (0 without an HBM rate).
  [[nodiscard]] Seconds update_seconds(const BlockShape& block, ir::Phase phase, const ir::Workload& w) const;
  /// Whether the kernel's shape (SMs and tiles) is known for `phase`: the tile model, else flops alone.
  [[nodiscard]] bool shaped(ir::Phase phase) const;
  /// Whether varlen_seconds may price `op`: a whole compute block under a position mask, its kernel shaped.
  [[nodiscard]] bool varlen_priced(const ir::Op& op) const;
  /// Whether the causal zigzag layout's two half blocks (all queries x the first half of the keys, the
  /// second half of the queries x all keys) take the same time in both passes: they hold as many pairs,
  /// so they do where no kernel shape and no result update (which scales with the queries) is priced.
  [[nodiscard]] bool prices_zigzag_halves_alike() const;
  /// FLOPs per visible (query, key) pair of one batch-head: 4*D forward, 2.5x that backward.
  [[nodiscard]] static double flops_per_pair(const ir::Workload& w, ir::Phase phase);
};

}  // namespace charm::sim
