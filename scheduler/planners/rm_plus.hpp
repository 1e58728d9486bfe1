#pragma once
// One RM+ run, as CHARM+ drives it in each domain: its slot counts, slot rings, ranks and the RmPlus engine.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "scheduler/planners/schedules.hpp"

namespace charm::sched::detail {

using ir::kNone;
using ir::Phase;
using ir::Stream;

/// The bounded buffers of one RM+ pass and where its KV items go on the compute stream.
struct RmSchedule {
  int kv_slots = 1;           // received KV
  int q_slots = 1;            // received query sets (Q or bundles), shared by every query set
  int partial_slots = 1;      // partials (O or dQ) computed on received queries, until sent home
  int arrival_slots = 1;      // partials of our queries that came home, until folded
  int dkv_partial_slots = 1;  // backward: dK/dV partials computed on received KV, until sent home
  int dkv_arrival_slots = 1;  // backward: dK/dV partials of our KV that came home, until folded
  // Backward: dQ and dK/dV partials that come home share one slot (they arrive
  // one after the other on the out stream). Its storage is that of the first
  // arrival, so the KV item of round 0 is computed before any query item (kv_lag
  // <= 0) and its dK/dV partial comes home first. (A dK/dV partial travels in the
  // dtype, as the backward kernel writes it: as large as an fp32 dQ partial without
  // GQA; with GQA a dQ arrival is larger and starts a chain of its own. A rank that a
  // mask leaves without a dK/dV partial has a dQ arrival first.)
  bool shared_arrivals = false;
  // The KV item of round r is computed just before query item r * sets + kv_lag
  // (query items count over rounds 1, 2, ...; 0: after the round's own query
  // items; negative: among them; positive: after some of the next round's).
  int kv_lag = 0;
};

/// Bounded in-flight buffers of the RM+ runs of one pass (one ring per purpose
/// and rank, shared by every query set; the runs of a pass share them too).
struct RmSlots {
  RmSlots(int ranks, const RmSchedule& s)
      : kv(ranks, s.kv_slots), q(ranks, s.q_slots), partial(ranks, s.partial_slots), arrival(ranks, s.arrival_slots),
        dkv_partial(ranks, s.dkv_partial_slots), dkv_arrival_own(ranks, s.dkv_arrival_slots),
        shared(s.shared_arrivals) {}
  BufferRing kv, q, partial, arrival, dkv_partial, dkv_arrival_own;
  bool shared;
  BufferRing& dkv_arrival() { return shared ? arrival : dkv_arrival_own; }
};

/// One rank's part of an RM+ run.
struct RmRank {
  RankId rank = 0;
  BufferId kv = kNone;            // the rank's own KV
  std::vector<BufferId> queries;  // Q (fwd) or QBundle (bwd) buffers, one per query set (own first)
  std::vector<BufferId> acc;      // fwd: Out acc; bwd: Dq acc, per query set
  BufferId dkv = kNone;           // bwd: own dK/dV acc
};

class RmPlus {
 public:
  RmPlus(PlanBuilder& b, std::vector<RmRank>& g, RmSlots& slots, const RmSchedule& schedule)
      : b_(b), g_(g), slots_(slots), sched_(schedule), first_buffer_(b.num_buffers()) {}

  void run() {
    plan_units();
    emit_all();
  }

 private:
  enum class Kind : std::uint8_t {
    KvExchange,
    QExchange,
    Local,
    KvCompute,
    QCompute,
    KvReturn,
    QReturn,
    KvFold,
    QFold
  };
  struct Unit {
    Kind kind;
    int round = 0;   // KV round r (every round r >= 1 also exchanges query sets)
    int set = 0;     // query set (QExchange .. QFold); Local: -1 all sets, 0 own, 1 crossed
    int after = -1;  // the unit whose output this one reads
    bool done = false;
  };

  [[nodiscard]] bool fwd() const { return b_.phase() == Phase::Fwd; }
  [[nodiscard]] int size() const { return static_cast<int>(g_.size()); }
  [[nodiscard]] RmRank& at(int x) { return g_[std::size_t(x)]; }
  [[nodiscard]] const RmRank& at(int x) const { return g_[std::size_t(x)]; }
  [[nodiscard]] RankId owner(BufferId b) const { return b_.buf(b).owner; }
  [[nodiscard]] RankId kv_owner(int x) const { return owner(at(x).kv); }
  /// 2^(i-2) for a round r >= 1 of level i.
  static int level_base(int r) { return int(std::bit_floor(unsigned(r))); }
  static int kv_xor(int r) { return r == 0 ? 1 : r + level_base(r); }  // 2^(i-1) + t
  static int q_xor(int r) { return r + 2 * level_base(r); }            // 2^(i-1) + 2^(i-2) + t
  /// Index of query set j of round r >= 1 among all query items.
  [[nodiscard]] std::size_t item(int r, int j) const { return std::size_t((r - 1) * sets_ + j); }
  /// The k-th query set a round exchanges (and a KV item computes): the crossed
  /// sets first, in the order they arrived and go home, so that their results are
  /// complete early and can go home while the own set finishes.
  [[nodiscard]] int set_at(int k) const { return (k + 1) % sets_; }

  // ---- the units and the order of each stream
  void plan_units();

  // ---- emission
  void emit_all();

  /// The unit that last reads buffer b (-1: none known).
  [[nodiscard]] int consumer(BufferId b) const;
  void set_consumer(BufferId b, int unit);
  /// Whether `rank` may draw from `ring` now: the storage it would take over is done with.
  [[nodiscard]] bool can_draw(const BufferRing& ring, RankId rank) const;

  bool try_emit(Unit& u);

  /// What `from` sends `to` in a KV exchange: its KV if some query of `to` can see it.
  [[nodiscard]] bool kv_payload(int from, int to) const;
  /// Whether `from` sends its query set j to `to` (the KV of `to` can serve it).
  [[nodiscard]] bool q_payload(int from, int to, int j) const;

  [[nodiscard]] bool can_draw_all(const Unit& u);

  [[nodiscard]] BufferId kv_in(int x, int r) const { return kv_in_[std::size_t(x)][std::size_t(r)]; }
  [[nodiscard]] BufferId q_in(int x, int r, int j) const { return q_in_[std::size_t(x)][item(r, j)]; }

  /// Sends `src` to g_[to] into a buffer drawn from `ring` there.
  BufferId ship(Stream stream, BufferRing& ring, BufferId src, int to, int gsrc, int gdst);

  /// Both directions between x and x ^ mask as one ncclGroup on each side; one(from, to, gsrc, gdst) sends one way.
  template <class One>
  void pairs(int mask, One one);

  void compute(BufferId q, BufferId kv, BufferId acc, BufferId dkv);

  void emit(const Unit& u);
  void emit_kv_exchange(const Unit& u);
  void emit_q_exchange(const Unit& u);
  void emit_local(const Unit& u);
  void emit_kv_compute(const Unit& u);
  void emit_q_compute(const Unit& u);
  void emit_return(const Unit& u);
  void emit_fold(const Unit& u);

  PlanBuilder& b_;
  std::vector<RmRank>& g_;
  RmSlots& slots_;
  RmSchedule sched_;
  int rounds_ = 0, sets_ = 0;
  std::vector<Unit> units_;
  std::vector<int> kv_stream_, q_stream_, compute_stream_, out_stream_;
  std::size_t first_buffer_;   // buffers created before this run have no consumer here
  std::vector<int> consumer_;  // by BufferId - first_buffer_: the unit that last reads it
  // Unit ids by KV round and by query item.
  std::vector<int> kv_compute_, kv_return_, kv_fold_, q_compute_, q_return_, q_fold_;
  // Per local rank, by KV round or query item: what arrived, the partial computed on it, what came home.
  std::vector<std::vector<BufferId>> kv_in_, kv_part_, kv_home_, q_in_, q_part_, q_home_;
};

}  // namespace charm::sched::detail
