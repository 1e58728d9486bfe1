#pragma once
// PlanBuilder: planners describe, rank by rank and in stream order, what each
// rank does; the builder allocates buffers, numbers tags per (stream, src, dst),
// and infers the dependencies from buffer accesses (read-after-write,
// write-after-write, write-after-read), the way a sequential task flow does.
// Explicit extra dependencies express synchronisation a schedule wants on top
// (for example the level barriers of the merge schedules).
//
// Quotient mode (a symmetry, ir/symmetry.hpp): the builder emits the plan of the
// representatives, ranks [0, block), only, while the planner still describes
// every rank. Ranks from the block on are *phantoms*: their buffers exist for the
// planner to look at (PhantomBuffers) but not in the plan, their ops are not
// emitted (the call returns kNone), and of a transfer between a representative
// and a phantom only the representative's side is emitted, with the tag it has
// in the full plan. Under a symmetry the plan holds, the result is the full
// plan's quotient (ir::quotient_of), op for op.

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "scheduler/ir/plan.hpp"
#include "scheduler/ir/shard_documents.hpp"
#include "scheduler/planners/plan_symmetry.hpp"

namespace charm::sched {

using ir::BufferId;
using ir::OpId;
using ir::RankId;

/// At most `depth` live buffers of one purpose per rank: the buffer drawn
/// `depth` draws after another takes over its storage (double buffering at 2).
/// The planner must be done with a buffer before the draw that recycles it.
class BufferRing {
 public:
  BufferRing(int ranks, int depth)
      : depth_(depth), drawn_(static_cast<std::size_t>(ranks), 0),
        last_(static_cast<std::size_t>(ranks) * static_cast<std::size_t>(depth), ir::kNone) {
    CHARM_ASSERT(depth >= 1, "a buffer ring holds at least one buffer per rank");
  }
  /// The storage the next buffer of `rank` should take over (kNone while fewer than depth are live).
  [[nodiscard]] BufferId recyclable(RankId rank) const {
    const std::uint64_t n = drawn_[static_cast<std::size_t>(rank)];
    return n < static_cast<std::uint64_t>(depth_) ? ir::kNone : last_[slot(rank, n)];
  }
  void push(RankId rank, BufferId b) { last_[slot(rank, drawn_[static_cast<std::size_t>(rank)]++)] = b; }
  [[nodiscard]] int depth() const { return depth_; }

 private:
  /// Where the n-th draw of `rank` is kept: the last `depth` draws only, in a circle
  /// (the (n - depth)-th, which the n-th takes over, sits where the n-th goes).
  [[nodiscard]] std::size_t slot(RankId rank, std::uint64_t n) const {
    return static_cast<std::size_t>(rank) * static_cast<std::size_t>(depth_) +
           static_cast<std::size_t>(n % static_cast<std::uint64_t>(depth_));
  }
  int depth_;
  std::vector<std::uint64_t> drawn_;  // per rank: buffers drawn so far
  std::vector<BufferId> last_;        // per rank: its last `depth` draws
};

/// Bytes of one owner's whole shard per buffer kind at a part count: region_bytes without its
/// integer divisions for every buffer (most buffers are whole shards).
class ShardBytes {
 public:
  ShardBytes() = default;
  ShardBytes(const ir::Workload& w, int ranks) : w_(w), ranks_(ranks) {}
  [[nodiscard]] ir::Bytes operator()(ir::BufKind kind, int parts) const;

 private:
  ir::Workload w_;
  int ranks_ = 0;
  mutable int parts_ = -1;  // the part count bytes_ holds, -1 before the first
  mutable ir::Bytes bytes_[ir::kNumBufKinds] = {};
};

/// The buffers of phantom ranks (PlanBuilder's quotient mode): created and looked up like
/// any other, never in the plan. Ids are <= -2 (kNone is -1), so they never collide with the
/// plan's. A whole shard of one owner is encoded in its id while the id range allows, up to
/// about 7,000 ranks (no storage at all: ring on 4,096 ranks makes 16.7M of them); any other
/// buffer is a 16-byte record, and one cut finer than whole shards (heads, parts, a view) adds
/// a whole Buffer.
/// Bytes are not stored: they follow from the kind and the region, as for the plan's buffers.
class PhantomBuffers {
 public:
  PhantomBuffers() = default;
  /// Phantoms of ranks [first, ranks) of a plan of `w`.
  PhantomBuffers(const ir::Workload& w, int ranks, RankId first);
  /// Whether whole shards of one owner fit in the ids (they take no record) for these ranks.
  [[nodiscard]] static bool encodes_shards(int ranks, RankId first);
  /// Stores b (which has no reuse); `parts` is the plan's (Plan::parts).
  BufferId add(const ir::Buffer& b, int parts);
  [[nodiscard]] ir::Buffer get(BufferId id, int parts) const;
  /// Phantom buffers created so far.
  [[nodiscard]] std::size_t count() const { return count_; }
  /// Bytes of heap memory the store holds.
  [[nodiscard]] std::size_t memory_bytes() const;

 private:
  struct Record {
    RankId rank;
    RankId owner;
    std::int32_t more;  // >= 1: owners of whole shards; < 0: the buffer is full_[-more - 1]
    ir::BufKind kind;
    ir::BufInit init;
  };
  static_assert(sizeof(Record) == 16);
  ShardBytes whole_bytes_;
  int ranks_ = 0;
  RankId first_ = 0;
  std::int64_t encoded_ = 0;  // codes [0, encoded_) are whole shards encoded in the id; records follow
  // Records in chunks of kChunk: no copy as they grow (a vector's would need 1.5x its memory at peak).
  static constexpr std::size_t kChunk = std::size_t{1} << 16;
  std::vector<std::unique_ptr<Record[]>> chunks_;
  std::size_t records_ = 0;
  std::vector<ir::Buffer> full_;
  std::size_t count_ = 0;
};

class PlanBuilder {
 public:
  /// With an active `quotient` (checked against the request's plan by Quotient::of), builds its quotient plan
  /// (quotient mode, above); the planner must describe a plan that is invariant under it.
  PlanBuilder(std::string algo, const ir::Workload& w, int ranks, int domains, const Quotient& quotient = {});

  [[nodiscard]] const ir::Workload& workload() const { return plan_.workload; }
  [[nodiscard]] int ranks() const { return plan_.ranks; }
  [[nodiscard]] ir::Phase phase() const { return phase_; }
  /// Ops created from now on belong to this pass.
  void set_phase(ir::Phase p) { phase_ = p; }

  /// Whether ops of rank r are left out of the plan (quotient mode: r is past the block).
  [[nodiscard]] bool phantom(RankId r) const { return r >= first_phantom_; }
  /// The quotient being built (inactive: the full plan).
  [[nodiscard]] const ir::RankSymmetry& quotient() const { return plan_.symmetry; }
  [[nodiscard]] const PhantomBuffers& phantoms() const { return phantoms_; }

  /// A new buffer; its size follows from its kind and the workload.
  BufferId buffer(RankId rank, ir::BufKind kind, RankId owner, ir::BufInit init);
  /// A buffer of the plan, or of a phantom rank (by value: phantoms are stored compactly).
  /// Always inlined, so that reading one field of a plan's buffer copies nothing.
  [[nodiscard, gnu::always_inline]] ir::Buffer buf(BufferId b) const {
    return b >= 0 ? plan_.buffer(b) : phantom_buf(b);
  }
  /// Buffers of the plan created so far (the next one's id).
  [[nodiscard]] std::size_t num_buffers() const { return plan_.buffers().size(); }
  [[nodiscard]] ir::Region region(BufferId b) const { return b >= 0 ? plan_.region(b) : plan_.region(phantom_buf(b)); }
  /// A buffer over a region (region.hpp); the plan's parts must be set first (set_parts).
  /// With `reuse`, it takes over that dead buffer's storage: its first access waits for
  /// every access of `reuse`, which may not be touched again (bounded in-flight buffers).
  /// `activations_dtype`: a gradient partial held in the workload's dtype (ir::Buffer::activations_dtype).
  BufferId buffer(RankId rank, ir::BufKind kind, const ir::Region& r, ir::BufInit init, BufferId reuse = ir::kNone,
                  bool activations_dtype = false);
  /// A view of owners [owner, owner + owners) of `parent` (same heads and parts): a receive
  /// into it lands in the parent's storage. Accesses count as accesses of the parent.
  /// A view of a phantom is a phantom.
  BufferId view(BufferId parent, RankId owner, int owners = 1);
  /// A new buffer of `rank` drawn from `ring`: it reuses the storage of the buffer drawn
  /// ring.depth() draws before (when that storage is no smaller), else it is fresh. A
  /// phantom rank draws phantoms, which the ring does not keep (no reuse).
  BufferId buffer(BufferRing& ring, RankId rank, ir::BufKind kind, const ir::Region& r, ir::BufInit init,
                  bool activations_dtype = false);
  BufferId buffer(BufferRing& ring, RankId rank, ir::BufKind kind, RankId owner, ir::BufInit init);
  /// Token parts per shard that regions count in (TASP); before any buffer with parts.
  void set_parts(int parts) { plan_.parts = parts; }
  /// Room for about this many ops (Plan::reserve, with the dependencies and buffers planners make per op).
  void reserve(std::size_t ops);
  /// Calls `f` with the ops built so far after every kProgressOps-th op.
  void on_progress(std::function<void(std::size_t ops)> f) { progress_ = std::move(f); }
  static constexpr std::size_t kProgressOps = std::size_t(1) << 16;
  [[nodiscard]] int parts() const { return plan_.parts; }
  /// Copies the overlap of src's and dst's regions (one must contain the other): slicing
  /// heads or parts out of a shard, or placing a slice into a whole shard.
  OpId copy(ir::Stream stream, BufferId src, BufferId dst, std::span<const OpId> extra = {});

  /// attention(Q of q_buf's owner, KV of kv_buf's owner) accumulated into acc (fwd).
  /// Over regions: every (q owner, kv owner) pair of the two buffers, on their shared heads.
  OpId compute_fwd(BufferId q, BufferId kv, BufferId out_acc, std::span<const OpId> extra = {});
  /// Backward block: reads the bundle and KV, accumulates into dq_acc and dkv_acc.
  OpId compute_bwd(BufferId qbundle, BufferId kv, BufferId dq_acc, BufferId dkv_acc, std::span<const OpId> extra = {});
  [[nodiscard]] bool visible(RankId q_owner, RankId kv_owner) const;
  /// Whether any query of q's region sees any key of kv's region.
  [[nodiscard]] bool any_visible(BufferId q, BufferId kv) const;

  struct Transfer {
    OpId send;
    OpId recv;
    BufferId dst;
  };
  /// Sends `src` to `dst_rank` on `stream` into a new buffer there (or into `into`).
  /// Quotient mode: the ids of ops left out are kNone; `dst` is always the receiving buffer.
  Transfer transfer(ir::Stream stream, BufferId src, RankId dst_rank, int src_group = ir::kNone,
                    int dst_group = ir::kNone, std::span<const OpId> extra_src = {},
                    std::span<const OpId> extra_dst = {}, BufferId into = ir::kNone);
  /// Both directions between a and b as one ncclGroup on each side.
  std::pair<Transfer, Transfer> exchange(ir::Stream stream, BufferId a_src, BufferId b_src,
                                         std::span<const OpId> extra_a = {}, std::span<const OpId> extra_b = {});

  /// Ops that wrote parts of `buf` beside its last writer, e.g. the receives of one ncclGroup into
  /// views of it: every later access of its storage waits for each of them, not for the last alone
  /// (the simulator releases an op's dependents as that op completes, not as its group does).
  void also_written_by(BufferId buf, std::span<const OpId> ops);

  OpId merge(ir::Stream stream, BufferId partial, BufferId acc, std::span<const OpId> extra = {});
  OpId accumulate(ir::Stream stream, BufferId partial, BufferId acc, std::span<const OpId> extra = {});
  /// Builds the backward bundle of a rank from its Q, dO and final (O, LSE).
  OpId pack(BufferId q, BufferId dout, BufferId out, BufferId qbundle);

  int new_group() { return next_group_++; }
  /// A new ncclGroup for every rank, in rank order (one step's exchanges: a group per rank).
  std::vector<int> new_group_per_rank() {
    std::vector<int> group(static_cast<std::size_t>(ranks()));
    for (auto& g : group) g = new_group();
    return group;
  }
  /// The op that last wrote b (kNone if none, and for a phantom).
  [[nodiscard]] OpId last_writer(BufferId b) const {
    return b < 0 ? ir::kNone : access_[static_cast<std::size_t>(b)].writer;
  }

  /// A rank's results; a phantom's may be set but are kNone in the finished plan.
  ir::RankResults& results(RankId r) { return plan_.results()[static_cast<std::size_t>(r)]; }
  [[nodiscard]] ir::Plan finish() &&;

 private:
  // Readers since the last write live in one pool of list nodes shared by all
  // buffers (freed nodes are reused): no allocation per buffer, and the pool
  // only holds the reads still pending a write.
  struct Access {
    OpId writer = ir::kNone;
    std::int32_t readers = ir::kNone;     // head of its list in reader_nodes_
    std::int32_t co_writers = ir::kNone;  // also_written_by's ops, a list in reader_nodes_
    bool taken_over = false;              // a later buffer holds this storage now: no access may follow
    bool claimed = false;                 // reuse: the wait for the previous holder is in place
    ir::Bytes storage_bytes = 0;          // the size of its storage (its reuse chain's first buffer)
  };
  struct ReaderNode {
    OpId op;
    std::int32_t next;
  };
  void add_reader(Access& a, OpId id) { push_node(a.readers, id); }
  void push_node(std::int32_t& head, OpId id);
  void free_nodes(std::int32_t& head);
  void add_nodes(std::int32_t head, std::vector<OpId>& deps) const;
  /// A merge or accumulate of `partial` into `acc`: reads both, writes acc.
  OpId fold_into(ir::OpKind kind, ir::Stream stream, BufferId partial, BufferId acc, std::span<const OpId> extra);
  void clear_readers(Access& a) { free_nodes(a.readers); }
  int& next_tag(ir::Stream stream, RankId src, RankId dst);
  /// The fields a forward or backward block computation shares.
  [[nodiscard]] ir::Op block_op(ir::Phase phase, BufferId q, BufferId kv) const;
  OpId emit(ir::Op op, std::initializer_list<BufferId> reads, std::initializer_list<BufferId> writes,
            std::span<const OpId> extra);

  /// Dependencies of the first access of a buffer that reuses storage: every access of the previous holder.
  void claim_storage(BufferId b, std::vector<OpId>& deps);
  // Phantoms' paths stay out of line, so that the plan's buffers' stay small where they are inlined.
  [[nodiscard, gnu::noinline]] ir::Buffer phantom_buf(BufferId b) const;
  [[nodiscard]] bool any_visible(const ir::Buffer& q, const ir::Buffer& kv) const;
  /// transfer() where a side is a phantom rank's: emits the representative's side only.
  [[gnu::noinline]] Transfer phantom_transfer(ir::Stream stream, BufferId src, RankId dst_rank, int src_group,
                                              int dst_group, std::span<const OpId> extra_src,
                                              std::span<const OpId> extra_dst, BufferId into);

  /// The visible pairs of the whole-shard block (q_owner, kv_owner) under a position mask, each block's counted
  /// once per plan: a ring's planner asks for a block's up to four times, and each count bisects the documents.
  [[nodiscard]] double shard_pairs(RankId q_owner, RankId kv_owner) const;
  /// ir::visible_pairs of owner x of region rq against owner y of rk, on the regions' parts: whole shards'
  /// through shard_pairs (Ulysses' and USP's all-to-all regions span every owner).
  [[nodiscard]] double owner_pairs(RankId x, const ir::Region& rq, RankId y, const ir::Region& rk) const;
  /// region_bytes, with whole shards of one owner (most buffers) looked up per kind.
  [[nodiscard]] ir::Bytes bytes_of(ir::BufKind kind, const ir::Region& r, bool activations_dtype = false) const;

  ir::Plan plan_;
  ShardBytes shard_bytes_;
  RankId first_phantom_;  // the block in quotient mode, else ranks (no phantom)
  PhantomBuffers phantoms_;
  mutable std::unordered_map<std::int64_t, double> shard_pairs_;  // shard_pairs, by q_owner x ranks + kv_owner
  mutable std::optional<ir::ShardDocuments> shard_documents_;     // the shards cut by document, for shard_pairs
  ir::Phase phase_ = ir::Phase::Fwd;
  std::vector<Access> access_;
  std::vector<ReaderNode> reader_nodes_;
  std::int32_t free_reader_ = ir::kNone;
  // Next tag per (stream, src, dst): per (src, stream) a list of (dst, tag) sorted by dst.
  std::vector<std::vector<std::pair<RankId, int>>> next_tag_;
  int next_group_ = 0;
  std::vector<OpId> deps_scratch_;
  std::vector<ir::Stream> op_stream_;          // per op emitted: its stream (emit's dependency filter)
  std::function<void(std::size_t)> progress_;  // on_progress
};

}  // namespace charm::sched
