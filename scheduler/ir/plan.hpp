#pragma once
// The DAG IR: one plan that the validator, the simulator and every executor consume.
//
// A plan is a contiguous vector of value-type ops indexed by OpId, a table of
// rank-local buffers, dependency edges in CSR form, and per-rank result buffers.
//
// Semantics (the contract every consumer relies on):
// - Ops on one (rank, stream) run in the order of their ids.
// - An op starts once every op in deps() has completed. Deps are always on the
//   same rank: ranks only meet through matched Send/Recv pairs.
// - A Send on (stream s, rank a, peer b) with tag t matches the Recv on
//   (stream s, rank b, peer a) with tag t. Tags count 0, 1, 2, ... per
//   (stream, src, dst), i.e. matching is in issue order, as NCCL matches.
// - Consecutive Send/Recv ops of one (rank, stream) with the same group id >= 0
//   are issued together (ncclGroupStart/End), progress in any order, and
//   complete as a whole: an op that depends on the group's last member may use
//   what any member received (PlanBuilder relies on this).
// - Buffers are rank-local. Op::buf holds, per kind (op_args.hpp names the
//   slots: ir::decode checks them and returns one struct per kind):
//     Compute (fwd)  [q, kv, out-acc, -]        out-acc is read and written
//     Compute (bwd)  [qbundle, kv, dq-acc, dkv-acc]  both accs read and written
//     Send           [src, -, -, -]
//     Recv           [dst, -, -, -]
//     Merge          [partial, acc, -, -]       (O, LSE) merged into acc
//     Accumulate     [partial, acc, -, -]       gradient partial added to acc
//     Copy (pack)    [q, dout, out, qbundle]    builds the backward bundle, D = rowsum(dO*O)
//     Copy (plain)   [src, dst, -, -]           copies the overlap of the two regions
// - Regions (region.hpp; Ulysses, USP and TASP plans): a buffer may hold several
//   owners' shards, a range of kv heads and a range of token parts. Rules:
//     * every range lies inside the workload; Plan::parts divides the shard tokens;
//       heads == 0 ("all") needs head_begin == 0, parts == 0 needs part_begin == 0;
//     * Input buffers and results are whole shards of their own rank, never views;
//     * a view's parent is an earlier buffer of the same rank and kind that is not
//       a view, with the same heads and parts; the view's owners lie inside it;
//       a view's init is None (its storage is the parent's);
//     * Compute: q and out (fwd), qbundle and dq (bwd) have equal regions; kv and
//       dkv have equal regions; all share one head range. The op's q_owner and
//       kv_owner are the first owners; mask is the pair's piece for one owner
//       each, else Mixed (the executor takes each pair's mask from positions);
//     * Merge, Accumulate, pack and every Send/Recv pair: equal regions;
//     * plain Copy: same kind, one region contains the other.
// - Storage reuse (bounded in-flight buffers, e.g. double buffering): a buffer
//   whose `reuse` names an earlier buffer of the same rank takes over that
//   buffer's storage. Every access of the earlier buffer happens before the
//   first access of the later one, which writes it (a Zero buffer is zeroed
//   as it takes the storage over, so it may be read first); a buffer is reused at most
//   once (storage passes along a chain), and neither is a view, an Input or a
//   result, and the later one is no larger than the storage, which is that of
//   the chain's first buffer (so a chain may hold buffers of several kinds and
//   sizes, e.g. a dK/dV slot that also takes the smaller dQ partials). Peak
//   memory counts one allocation per chain; executors may alias the storage or
//   allocate afresh.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "scheduler/ir/region.hpp"
#include "scheduler/ir/symmetry.hpp"
#include "scheduler/ir/workload.hpp"

namespace charm::ir {

using OpId = std::int32_t;
using BufferId = std::int32_t;
using RankId = std::int32_t;
inline constexpr std::int32_t kNone = -1;

enum class OpKind : std::uint8_t { Compute, Send, Recv, Merge, Accumulate, Copy };

/// Send and Recv: the ops that meet a peer (the rest are local to their rank).
[[nodiscard]] constexpr bool is_comm(OpKind k) { return k == OpKind::Send || k == OpKind::Recv; }

/// Streams of one rank. Comm streams map to one communicator each on NCCL.
enum class Stream : std::uint8_t { Compute, Kv, Q, Out, Cross, Dkv };
inline constexpr int kNumStreams = 6;

enum class BufKind : std::uint8_t {
  Q,        // queries of `owner`
  Kv,       // keys and values of `owner`
  Out,      // (O, LSE) of queries of `owner`: accumulator or partial
  Dout,     // dO of `owner` (backward input)
  QBundle,  // backward bundle of `owner`: Q, dO, LSE, D
  Dq,       // dQ of `owner`: accumulator or partial
  Dkv,      // dK, dV of `owner`: accumulator or partial
};
inline constexpr int kNumBufKinds = 7;  // BufKind values are 0 .. kNumBufKinds - 1

/// What a buffer holds before the plan runs.
enum class BufInit : std::uint8_t {
  None,   // written by an op before any read
  Input,  // the rank's own input tensor (Q, KV, dO; Out for a backward-only plan)
  Zero,   // an accumulator: empty (O: lse = -inf; gradients: zero)
};

[[nodiscard]] std::string_view to_string(OpKind k);
[[nodiscard]] std::string_view to_string(Stream s);
[[nodiscard]] std::string_view to_string(BufKind k);
[[nodiscard]] std::string_view to_string(BufInit i);
[[nodiscard]] Expected<OpKind> parse_op_kind(std::string_view s);
[[nodiscard]] Expected<Stream> parse_stream(std::string_view s);
[[nodiscard]] Expected<BufKind> parse_buf_kind(std::string_view s);
[[nodiscard]] Expected<BufInit> parse_buf_init(std::string_view s);

/// A rank-local buffer. By default it holds one whole shard of `owner`; the
/// region fields cut it finer (region.hpp), and a view aliases an owner
/// sub-range of its parent's storage (so a receive can land in place).
/// 48 bytes (the 8-byte size last: no padding between the 4-byte fields); cluster-scale plans hold tens of millions.
struct Buffer {
  RankId rank = 0;
  BufKind kind = BufKind::Q;
  BufInit init = BufInit::None;
  // Dq and Dkv: held in the workload's dtype, as the backward kernel writes them, not in fp32. A partial that
  // goes home once, to be added to an fp32 accumulator there (RM+'s dK/dV partials); accumulators stay fp32.
  bool activations_dtype = false;
  RankId owner = 0;  // whose data (query owner for Q/Out/Dq/QBundle, kv owner for Kv/Dkv); first owner of a region
  std::int32_t owners = 1;                 // owners [owner, owner + owners)
  std::int32_t head_begin = 0, heads = 0;  // kv heads [head_begin, head_begin + heads); heads 0 = all
  std::int32_t part_begin = 0, parts = 0;  // token parts, of Plan::parts; parts 0 = all
  BufferId parent = kNone;                 // a view of this buffer's owners inside `parent`
  BufferId reuse = kNone;                  // takes over this earlier buffer's storage once it is dead
  Bytes bytes = 0;
};
static_assert(sizeof(Buffer) == 48, "a Buffer packs its fields without holes");

/// One operation. Plain data, 48 bytes; dependencies live in the plan (CSR).
/// A field that only one kind has shares its bytes with one that only the other kinds have: read the
/// member of the op's kind (a Compute op's `peer`, `tag` and `bytes` are its q_owner, kv_owner and flops).
struct Op {
  RankId rank = 0;
  Stream stream = Stream::Compute;
  OpKind kind = OpKind::Compute;
  Phase phase = Phase::Fwd;
  MaskPiece mask = MaskPiece::Full;  // Compute only
  union {
    RankId q_owner = kNone;  // Compute: whose queries
    RankId peer;             // Send/Recv
  };
  union {
    RankId kv_owner = kNone;  // Compute: whose keys/values
    std::int32_t tag;         // Send/Recv
  };
  std::int32_t group = kNone;  // Send/Recv: ncclGroup id, kNone = alone
  BufferId buf[4] = {kNone, kNone, kNone, kNone};
  union {
    Bytes bytes = 0;  // Send/Recv: payload; Merge/Accumulate/Copy: bytes touched
    Flops flops;      // Compute
  };
};
static_assert(sizeof(Op) == 48, "an Op packs its fields: plans of tens of millions of ops stay compact");

[[nodiscard]] constexpr bool is_comm(const Op& o) { return is_comm(o.kind); }

/// Which buffers of a rank hold its final results.
struct RankResults {
  BufferId out = kNone;  // O and LSE of its queries (forward)
  BufferId dq = kNone;   // backward
  BufferId dkv = kNone;  // backward
};

class Plan {
 public:
  std::string algo;
  Workload workload;
  int ranks = 0;
  int domains = 1;
  int parts = 1;  // token parts per shard that buffer regions count in (TASP sends shards in parts)
  /// Active: a quotient plan (symmetry.hpp), the ops and buffers of ranks [0, symmetry.block) only.
  RankSymmetry symmetry;
  /// A deployment (sched::place_groups): `groups` independent copies of one context-parallel
  /// group's plan, group g on ranks [g * group_ranks(), (g + 1) * group_ranks()), each on its
  /// own data (a tensor-parallel peer's heads, a data-parallel replica's batch); the workload
  /// is one group's. 1: the plan is one group.
  int groups = 1;
  /// Where each rank runs: rank r on GPU gpus[r] of the topology (distinct GPUs); empty: GPU r.
  std::vector<std::int32_t> gpus;

  [[nodiscard]] int group_ranks() const { return ranks / groups; }
  [[nodiscard]] std::int32_t gpu_of(RankId r) const { return gpus.empty() ? r : gpus[static_cast<std::size_t>(r)]; }

  [[nodiscard]] std::size_t size() const { return ops_.size(); }
  [[nodiscard]] const Op& op(OpId id) const { return ops_[static_cast<std::size_t>(id)]; }
  [[nodiscard]] Op& op(OpId id) { return ops_[static_cast<std::size_t>(id)]; }
  [[nodiscard]] const std::vector<Op>& ops() const { return ops_; }
  [[nodiscard]] std::span<const OpId> deps(OpId id) const {
    auto b = dep_begin_[static_cast<std::size_t>(id)], e = dep_begin_[static_cast<std::size_t>(id) + 1];
    return {dep_ids_.data() + b, dep_ids_.data() + e};
  }
  [[nodiscard]] const std::vector<Buffer>& buffers() const { return buffers_; }
  [[nodiscard]] const Buffer& buffer(BufferId id) const { return buffers_[static_cast<std::size_t>(id)]; }
  /// The region buffer b holds, defaults resolved.
  [[nodiscard]] Region region(BufferId b) const { return region(buffer(b)); }
  /// The region a buffer record of this plan holds (one kept outside it too: a planner's phantoms).
  [[nodiscard]] Region region(const Buffer& b) const;
  /// The buffer whose storage b lives in (b itself unless b is a view).
  [[nodiscard]] BufferId root(BufferId b) const;
  /// The first buffer of b's storage-reuse chain (b's root, following Buffer::reuse back).
  [[nodiscard]] BufferId storage(BufferId b) const;
  /// True if some buffer is cut finer than a whole shard (Ulysses, USP, TASP plans).
  [[nodiscard]] bool has_regions() const;
  [[nodiscard]] std::vector<RankResults>& results() { return results_; }
  [[nodiscard]] const std::vector<RankResults>& results() const { return results_; }

  /// Room for this many ops, dependencies and buffers (a planner's estimate): no
  /// copy of the arrays as they grow, and pages reserved but never written cost nothing.
  void reserve(std::size_t ops, std::size_t deps, std::size_t buffers);
  /// Appends an op; returns its id. Deps must already exist or be added before use.
  OpId add_op(const Op& op, std::span<const OpId> deps);
  BufferId add_buffer(const Buffer& b);
  /// Replaces an op's dependency list (tests use this to break plans on purpose).
  void set_deps(OpId id, std::span<const OpId> deps);
  /// Removes ops (ids renumbered, deps remapped, deps on removed ops dropped).
  void erase_ops(std::span<const OpId> ids);

  [[nodiscard]] std::size_t num_deps() const { return dep_ids_.size(); }
  /// Bytes of heap memory the plan holds (ops, deps, buffers).
  [[nodiscard]] std::size_t memory_bytes() const;

  /// Whether scale_batch can turn this plan into the one planned for `batch`: the batch is a power-of-two
  /// multiple or fraction of the plan's. Every byte count of a plan is the batch times an integer and every
  /// FLOP count the batch times a product of doubles, and a planner decides nothing from sizes but their
  /// order, which a common factor keeps; scaling by 2^k is exact in both, so the result is the plan
  /// make_plan builds for `batch`, bit for bit (planners_test holds every algorithm to that).
  [[nodiscard]] bool can_scale_batch(std::int64_t batch) const;
  /// The same plan for another batch (can_scale_batch): byte and FLOP counts scaled, nothing else moved.
  void scale_batch(std::int64_t batch);

 private:
  std::vector<Op> ops_;
  std::vector<std::uint32_t> dep_begin_{0};
  std::vector<OpId> dep_ids_;
  std::vector<Buffer> buffers_;
  std::vector<RankResults> results_;
};

/// Bytes of a buffer of `kind` over `r` (the wire size, in the workload's dtypes).
/// `activations_dtype`: a Dq or Dkv buffer held in the workload's dtype (Buffer::activations_dtype), not fp32.
[[nodiscard]] Bytes region_bytes(const Workload& w, int ranks, int parts, BufKind kind, const Region& r,
                                 bool activations_dtype = false);
/// A buffer's short name, e.g. "q3" or "q[0-7]h2" (region suffix where it is not a whole shard).
[[nodiscard]] std::string buffer_label(const Plan& plan, BufferId b);

/// Short human label of an op, e.g. "fwd Q3*KV2 causal" or "send kv->4 #2".
[[nodiscard]] std::string op_label(const Plan& plan, OpId id);

}  // namespace charm::ir
