#include "scheduler/planners/plan_builder.hpp"

#include <algorithm>

namespace charm::sched {

using namespace charm::ir;

namespace {
constexpr int kNumBufInits = 3;
/// Codes of whole shards encoded in phantom ids stay below this, leaving as many for records.
constexpr std::int64_t kMaxEncoded = std::int64_t{1} << 30;
/// Phantom ids are -2 - code, codes [0, kMaxCode]: they never meet kNone or a plan's id.
constexpr std::int64_t kMaxCode = (std::int64_t{1} << 31) - 2;
}  // namespace

Bytes ShardBytes::operator()(BufKind kind, int parts) const {
  if (parts != parts_) {
    for (int k = 0; k < kNumBufKinds; ++k)
      bytes_[k] = region_bytes(w_, ranks_, parts, BufKind(k), shard_region(0, w_, parts));
    parts_ = parts;
  }
  return bytes_[int(kind)];
}

PhantomBuffers::PhantomBuffers(const Workload& w, int ranks, RankId first)
    : whole_bytes_(w, ranks), ranks_(ranks), first_(first) {
  encoded_ = encodes_shards(ranks, first) ? std::int64_t(ranks - first) * ranks * kNumBufKinds * kNumBufInits : 0;
}

bool PhantomBuffers::encodes_shards(int ranks, RankId first) {
  return std::int64_t(ranks - first) * ranks * kNumBufKinds * kNumBufInits <= kMaxEncoded;
}

BufferId PhantomBuffers::add(const Buffer& b, int parts) {
  CHARM_ASSERT(b.rank >= first_ && b.rank < ranks_ && b.reuse == kNone, "a phantom buffer is one of a phantom rank");
  ++count_;
  const bool shards =
      b.heads == 0 && b.parts == 0 && b.parent == kNone && b.bytes == whole_bytes_(b.kind, parts) * Bytes(b.owners);
  if (shards && b.owners == 1 && encoded_ > 0) {
    const std::int64_t code =
        ((std::int64_t(b.rank - first_) * ranks_ + b.owner) * kNumBufKinds + std::int64_t(b.kind)) * kNumBufInits +
        std::int64_t(b.init);
    return BufferId(-2 - code);
  }
  const std::int64_t code = encoded_ + std::int64_t(records_);
  CHARM_ASSERT(code <= kMaxCode, "more phantom buffers than phantom ids");
  std::int32_t more = b.owners;
  if (!shards) {
    full_.push_back(b);
    more = -std::int32_t(full_.size());
  }
  if (records_ % kChunk == 0) chunks_.push_back(std::make_unique_for_overwrite<Record[]>(kChunk));
  chunks_.back()[records_++ % kChunk] = {b.rank, b.owner, more, b.kind, b.init};
  return BufferId(-2 - code);
}

Buffer PhantomBuffers::get(BufferId id, int parts) const {
  std::int64_t code = -2 - std::int64_t(id);
  CHARM_ASSERT(id <= -2 && code < encoded_ + std::int64_t(records_), "not a phantom buffer");
  if (code < encoded_) {
    const auto init = BufInit(code % kNumBufInits);
    code /= kNumBufInits;
    const auto kind = BufKind(code % kNumBufKinds);
    code /= kNumBufKinds;
    return Buffer{.rank = RankId(code / ranks_) + first_,
                  .kind = kind,
                  .init = init,
                  .owner = RankId(code % ranks_),
                  .bytes = whole_bytes_(kind, parts)};
  }
  const auto k = std::size_t(code - encoded_);
  const Record& r = chunks_[k / kChunk][k % kChunk];
  if (r.more < 0) return full_[std::size_t(-r.more - 1)];
  Buffer b{.rank = r.rank,
           .kind = r.kind,
           .init = r.init,
           .owner = r.owner,
           .bytes = whole_bytes_(r.kind, parts) * Bytes(r.more)};
  b.owners = r.more;
  return b;
}

std::size_t PhantomBuffers::memory_bytes() const {
  return chunks_.size() * kChunk * sizeof(Record) + chunks_.capacity() * sizeof(chunks_[0]) +
         full_.capacity() * sizeof(Buffer);
}

PlanBuilder::PlanBuilder(std::string algo, const Workload& w, int ranks, int domains, const Quotient& quotient)
    : shard_bytes_(w, ranks), first_phantom_(ranks) {
  plan_.algo = std::move(algo);
  plan_.workload = w;
  plan_.ranks = ranks;
  plan_.domains = domains;
  plan_.results().assign(static_cast<std::size_t>(ranks), RankResults{});
  next_tag_.resize(static_cast<std::size_t>(ranks) * kNumStreams);
  if (quotient.active()) {  // well formed for `ranks`: Quotient::of checked it
    plan_.symmetry = quotient.symmetry();
    first_phantom_ = quotient.symmetry().block;
    phantoms_ = PhantomBuffers(w, ranks, quotient.symmetry().block);
  }
}

Buffer PlanBuilder::phantom_buf(BufferId b) const { return phantoms_.get(b, plan_.parts); }

void PlanBuilder::reserve(std::size_t ops) {
  // Measured at 64 ranks: 0.6 to 1.2 dependencies and 0.35 to 0.5 buffers an op.
  plan_.reserve(ops, ops + ops / 4, ops / 2);
  access_.reserve(ops / 2);
  op_stream_.reserve(ops);
}

int& PlanBuilder::next_tag(Stream stream, RankId src, RankId dst) {
  // Sorted by peer: charm's cross stream meets every other domain (hundreds of peers at cluster scale), a
  // new one each round, so a scan would walk the whole list for each of them.
  auto& list = next_tag_[static_cast<std::size_t>(src) * kNumStreams + static_cast<std::size_t>(stream)];
  const auto at = std::lower_bound(list.begin(), list.end(), dst,
                                   [](const std::pair<RankId, int>& e, RankId peer) { return e.first < peer; });
  if (at != list.end() && at->first == dst) return at->second;
  return list.insert(at, {dst, 0})->second;
}

BufferId PlanBuilder::buffer(RankId rank, BufKind kind, RankId owner, BufInit init) {
  return buffer(rank, kind, shard_region(owner, plan_.workload, plan_.parts), init);
}

Bytes PlanBuilder::bytes_of(BufKind kind, const Region& r, bool activations_dtype) const {
  const auto& w = plan_.workload;
  const bool shard = r.owners() == 1 && r.head_begin == 0 && r.head_end == w.kv_heads && r.part_begin == 0 &&
                     r.part_end == plan_.parts;
  return shard && !activations_dtype ? shard_bytes_(kind, plan_.parts)
                                     : region_bytes(w, plan_.ranks, plan_.parts, kind, r, activations_dtype);
}

BufferId PlanBuilder::buffer(RankId rank, BufKind kind, const Region& r, BufInit init, BufferId reuse,
                             bool activations_dtype) {
  const auto& w = plan_.workload;
  CHARM_ASSERT(!r.empty() && r.owner_begin >= 0 && r.owner_end <= plan_.ranks && r.head_begin >= 0 &&
                   r.head_end <= w.kv_heads && r.part_begin >= 0 && r.part_end <= plan_.parts,
               "a buffer region must lie inside the workload");
  Buffer b{.rank = rank,
           .kind = kind,
           .init = init,
           .activations_dtype = activations_dtype,
           .owner = r.owner_begin,
           .bytes = bytes_of(kind, r, activations_dtype)};
  b.owners = r.owners();
  if (r.head_begin != 0 || r.head_end != w.kv_heads) {
    b.head_begin = r.head_begin;
    b.heads = r.heads();
  }
  if (r.part_begin != 0 || r.part_end != plan_.parts) {
    b.part_begin = r.part_begin;
    b.parts = r.parts();
  }
  if (phantom(rank)) return phantoms_.add(b, plan_.parts);  // no storage, so no reuse
  if (reuse != kNone) {
    const Buffer& old = plan_.buffer(reuse);
    CHARM_ASSERT(old.rank == rank && old.parent == kNone && old.init != BufInit::Input &&
                     access_[std::size_t(reuse)].storage_bytes >= b.bytes && !access_[std::size_t(reuse)].taken_over,
                 "a buffer takes over, once, the storage of a working buffer of its rank that is no smaller");
    access_[std::size_t(reuse)].taken_over = true;
    b.reuse = reuse;
  }
  const Bytes storage = reuse != kNone ? access_[std::size_t(reuse)].storage_bytes : b.bytes;
  access_.emplace_back().storage_bytes = storage;
  return plan_.add_buffer(b);
}

BufferId PlanBuilder::buffer(BufferRing& ring, RankId rank, BufKind kind, const Region& r, BufInit init,
                             bool activations_dtype) {
  if (phantom(rank)) return buffer(rank, kind, r, init, kNone, activations_dtype);
  BufferId old = ring.recyclable(rank);
  if (old != kNone && access_[std::size_t(old)].storage_bytes < bytes_of(kind, r, activations_dtype)) old = kNone;
  const BufferId b = buffer(rank, kind, r, init, old, activations_dtype);
  ring.push(rank, b);
  return b;
}

BufferId PlanBuilder::buffer(BufferRing& ring, RankId rank, BufKind kind, RankId owner, BufInit init) {
  return buffer(ring, rank, kind, shard_region(owner, plan_.workload, plan_.parts), init);
}

void PlanBuilder::claim_storage(BufferId b, std::vector<OpId>& deps) {
  auto& a = access_[std::size_t(b)];
  if (a.claimed) return;
  a.claimed = true;
  const BufferId old = plan_.buffer(b).reuse;
  if (old == kNone) return;
  const auto& prev = access_[std::size_t(old)];
  if (prev.writer != kNone) deps.push_back(prev.writer);
  add_nodes(prev.readers, deps);
  add_nodes(prev.co_writers, deps);
}

BufferId PlanBuilder::view(BufferId parent, RankId owner, int owners) {
  const Buffer p = buf(parent);
  CHARM_ASSERT(p.init == BufInit::None || p.init == BufInit::Zero, "views alias working buffers, not inputs");
  CHARM_ASSERT(owner >= p.owner && owner + owners <= p.owner + p.owners, "a view lies inside its parent");
  Buffer v = p;
  v.owner = owner;
  v.owners = owners;
  v.init = BufInit::None;
  v.bytes = p.bytes / Bytes(p.owners) * Bytes(owners);
  v.parent = parent;
  v.reuse = kNone;
  if (parent < 0) return phantoms_.add(v, plan_.parts);
  access_.emplace_back().storage_bytes = v.bytes;
  return plan_.add_buffer(v);
}

OpId PlanBuilder::copy(Stream stream, BufferId src, BufferId dst, std::span<const OpId> extra) {
  if (src < 0) return kNone;  // a phantom's (its buffers are all phantoms)
  const Region a = plan_.region(src), d = plan_.region(dst);
  CHARM_ASSERT(plan_.buffer(src).kind == plan_.buffer(dst).kind, "a copy keeps the buffer kind");
  CHARM_ASSERT(a.contains(d) || d.contains(a), "a copy slices a region or places a slice into one");
  Op op;
  op.rank = plan_.buffer(src).rank;
  op.stream = stream;
  op.kind = OpKind::Copy;
  op.buf[0] = src;
  op.buf[1] = dst;
  op.bytes = 2 * std::min(plan_.buffer(src).bytes, plan_.buffer(dst).bytes);  // read the overlap, write it
  return emit(op, {src}, {dst}, extra);
}

OpId PlanBuilder::emit(Op op, std::initializer_list<BufferId> reads, std::initializer_list<BufferId> writes,
                       std::span<const OpId> extra) {
  const auto id = static_cast<OpId>(plan_.size());
  auto& d = deps_scratch_;
  d.clear();
  // A view's accesses are its root's: dependencies are inferred per storage.
  BufferId rd[4], wr[4];
  std::size_t nr = 0, nw = 0;
  for (BufferId b : reads) rd[nr++] = plan_.root(b);
  for (BufferId b : writes) wr[nw++] = plan_.root(b);
  const std::span<const BufferId> reads_root(rd, nr), writes_root(wr, nw);
  for (BufferId b : reads_root) claim_storage(b, d);
  for (BufferId b : writes_root) claim_storage(b, d);
  for (BufferId b : reads_root) {
    CHARM_ASSERT(!access_[static_cast<std::size_t>(b)].taken_over,
                 "a buffer is touched after a later one took its storage over");
    CHARM_ASSERT(plan_.buffer(b).rank == op.rank, "an op may only touch buffers of its own rank");
    if (auto w = access_[static_cast<std::size_t>(b)].writer; w != kNone) d.push_back(w);
    add_nodes(access_[static_cast<std::size_t>(b)].co_writers, d);
  }
  for (BufferId b : writes_root) {
    CHARM_ASSERT(!access_[static_cast<std::size_t>(b)].taken_over,
                 "a buffer is touched after a later one took its storage over");
    CHARM_ASSERT(plan_.buffer(b).rank == op.rank, "an op may only touch buffers of its own rank");
    const auto& a = access_[static_cast<std::size_t>(b)];
    if (a.writer != kNone) d.push_back(a.writer);
    add_nodes(a.readers, d);
    add_nodes(a.co_writers, d);
  }
  // Buffer accesses are of the op's rank (asserted above, and when each was emitted); extras are checked.
  for (OpId x : extra) CHARM_ASSERT(plan_.op(x).rank == op.rank, "dependencies must stay on one rank");
  d.insert(d.end(), extra.begin(), extra.end());
  // Drop duplicates, self-references and what stream order already implies. The streams come from the
  // builder's byte per op: the ops themselves lie far back, a cache miss each.
  std::sort(d.begin(), d.end());
  d.erase(std::unique(d.begin(), d.end()), d.end());
  d.erase(
      std::remove_if(d.begin(), d.end(), [&](OpId x) { return x == id || op_stream_[std::size_t(x)] == op.stream; }),
      d.end());
  op.phase = phase_;
  plan_.add_op(op, d);
  op_stream_.push_back(op.stream);
  if (progress_ && plan_.size() % kProgressOps == 0) progress_(plan_.size());
  for (std::size_t i = 0; i < nr; ++i) {
    const BufferId b = rd[i];
    auto& a = access_[static_cast<std::size_t>(b)];
    bool skip = false;  // written here, or a second view of a root already read
    for (BufferId wb : writes_root) skip |= (wb == b);
    for (std::size_t k = 0; k < i; ++k) skip |= (rd[k] == b);
    if (!skip) add_reader(a, id);
  }
  for (BufferId b : writes_root) {
    auto& a = access_[static_cast<std::size_t>(b)];
    a.writer = id;
    clear_readers(a);
    free_nodes(a.co_writers);
  }
  return id;
}

void PlanBuilder::push_node(std::int32_t& head, OpId id) {
  std::int32_t k = free_reader_;
  if (k != kNone)
    free_reader_ = reader_nodes_[std::size_t(k)].next;
  else {
    k = static_cast<std::int32_t>(reader_nodes_.size());
    reader_nodes_.emplace_back();
  }
  reader_nodes_[std::size_t(k)] = {id, head};
  head = k;
}

void PlanBuilder::free_nodes(std::int32_t& head) {
  if (head == kNone) return;
  std::int32_t tail = head;
  while (reader_nodes_[std::size_t(tail)].next != kNone) tail = reader_nodes_[std::size_t(tail)].next;
  reader_nodes_[std::size_t(tail)].next = free_reader_;
  free_reader_ = head;
  head = kNone;
}

void PlanBuilder::add_nodes(std::int32_t head, std::vector<OpId>& deps) const {
  for (auto k = head; k != kNone; k = reader_nodes_[std::size_t(k)].next)
    deps.push_back(reader_nodes_[std::size_t(k)].op);
}

void PlanBuilder::also_written_by(BufferId buf, std::span<const OpId> ops) {
  if (buf < 0) return;  // a phantom's
  auto& a = access_[std::size_t(plan_.root(buf))];
  for (const OpId op : ops)
    if (op != kNone) push_node(a.co_writers, op);
}

double PlanBuilder::shard_pairs(RankId q_owner, RankId kv_owner) const {
  const auto [it, added] = shard_pairs_.try_emplace(std::int64_t(q_owner) * plan_.ranks + kv_owner, 0.0);
  if (added) {
    if (!shard_documents_) shard_documents_.emplace(plan_.workload, plan_.ranks);
    it->second = shard_documents_->pairs(q_owner, kv_owner);
  }
  return it->second;
}

double PlanBuilder::owner_pairs(RankId x, const Region& rq, RankId y, const Region& rk) const {
  const auto& w = plan_.workload;
  const bool whole =
      rq.part_begin == 0 && rq.part_end == plan_.parts && rk.part_begin == 0 && rk.part_end == plan_.parts;
  if (whole && w.position_mask()) return shard_pairs(x, y);
  return visible_pairs(w, plan_.ranks, plan_.parts, x, rq.part_begin, rq.part_end, y, rk.part_begin, rk.part_end);
}

bool PlanBuilder::visible(RankId q_owner, RankId kv_owner) const {
  if (plan_.workload.position_mask()) return shard_pairs(q_owner, kv_owner) > 0;
  return plan_.workload.mask(q_owner, kv_owner, plan_.ranks) != MaskPiece::Empty;
}

// Inlined into both calls below: a call per computation would cost the full plans measurably.
[[gnu::always_inline]] inline bool PlanBuilder::any_visible(const Buffer& bq, const Buffer& bk) const {
  if (bq.owners == 1 && bk.owners == 1 && bq.parts == 0 && bk.parts == 0) return visible(bq.owner, bk.owner);
  const Region rq = plan_.region(bq), rk = plan_.region(bk);
  for (RankId x = rq.owner_begin; x < rq.owner_end; ++x)
    for (RankId y = rk.owner_begin; y < rk.owner_end; ++y)
      if (owner_pairs(x, rq, y, rk) > 0) return true;
  return false;
}

bool PlanBuilder::any_visible(BufferId q, BufferId kv) const {
  if (q < 0 || kv < 0) return any_visible(buf(q), buf(kv));
  return any_visible(plan_.buffer(q), plan_.buffer(kv));  // read in place
}

Op PlanBuilder::block_op(Phase phase, BufferId q, BufferId kv) const {
  CHARM_ASSERT(phase_ == phase, "a compute of one pass emitted in the other");
  const Buffer& bq = plan_.buffer(q);
  const Buffer& bk = plan_.buffer(kv);
  Op op;
  op.rank = bq.rank;
  op.stream = Stream::Compute;
  op.kind = OpKind::Compute;
  op.q_owner = bq.owner;
  op.kv_owner = bk.owner;
  const auto& w = plan_.workload;
  const bool whole_shards =
      bq.owners == 1 && bk.owners == 1 && bq.heads == 0 && bk.heads == 0 && bq.parts == 0 && bk.parts == 0;
  if (whole_shards && w.position_mask()) {  // Workload::mask and block_flops, from pairs counted once
    const double pairs = shard_pairs(bq.owner, bk.owner);
    op.mask = pairs > 0 ? MaskPiece::Positions : MaskPiece::Empty;
    op.flops = ir::attention_flops(double(w.batch), double(w.heads), double(w.head_dim), pairs, phase);
  } else if (whole_shards) {
    op.mask = w.mask(bq.owner, bk.owner, plan_.ranks);
    op.flops = w.block_flops(phase, bq.owner, bk.owner, plan_.ranks);
  } else {
    const Region rq = plan_.region(q), rk = plan_.region(kv);
    CHARM_ASSERT(rq.head_begin == rk.head_begin && rq.head_end == rk.head_end,
                 "q and kv of one compute share their heads");
    op.mask = rq.owners() == 1 && rk.owners() == 1 ? w.mask(bq.owner, bk.owner, plan_.ranks) : MaskPiece::Mixed;
    double pairs = 0;
    for (RankId x = rq.owner_begin; x < rq.owner_end; ++x)
      for (RankId y = rk.owner_begin; y < rk.owner_end; ++y) pairs += owner_pairs(x, rq, y, rk);
    const double heads = double(w.heads / w.kv_heads) * double(rq.heads());
    op.flops = ir::attention_flops(double(w.batch), heads, double(w.head_dim), pairs, phase);
  }
  op.buf[0] = q;
  op.buf[1] = kv;
  return op;
}

OpId PlanBuilder::compute_fwd(BufferId q, BufferId kv, BufferId out_acc, std::span<const OpId> extra) {
  if (q < 0) return kNone;
  Op op = block_op(Phase::Fwd, q, kv);
  op.buf[2] = out_acc;
  return emit(op, {q, kv, out_acc}, {out_acc}, extra);
}

OpId PlanBuilder::compute_bwd(BufferId qbundle, BufferId kv, BufferId dq_acc, BufferId dkv_acc,
                              std::span<const OpId> extra) {
  if (qbundle < 0) return kNone;
  Op op = block_op(Phase::Bwd, qbundle, kv);
  op.buf[2] = dq_acc;
  op.buf[3] = dkv_acc;
  return emit(op, {qbundle, kv, dq_acc, dkv_acc}, {dq_acc, dkv_acc}, extra);
}

PlanBuilder::Transfer PlanBuilder::transfer(Stream stream, BufferId src, RankId dst_rank, int src_group, int dst_group,
                                            std::span<const OpId> extra_src, std::span<const OpId> extra_dst,
                                            BufferId into) {
  if (src < 0 || phantom(dst_rank))
    return phantom_transfer(stream, src, dst_rank, src_group, dst_group, extra_src, extra_dst, into);
  const Buffer sb = plan_.buffer(src);
  CHARM_ASSERT(sb.rank != dst_rank, "a transfer needs two ranks");
  const BufferId dst =
      into != kNone ? into : buffer(dst_rank, sb.kind, plan_.region(src), BufInit::None, kNone, sb.activations_dtype);
  int& tag = next_tag(stream, sb.rank, dst_rank);
  Op s;
  s.rank = sb.rank;
  s.stream = stream;
  s.kind = OpKind::Send;
  s.peer = dst_rank;
  s.tag = tag;
  s.group = src_group;
  s.bytes = sb.bytes;
  s.buf[0] = src;
  Op r = s;
  r.rank = dst_rank;
  r.kind = OpKind::Recv;
  r.peer = sb.rank;
  r.group = dst_group;
  r.buf[0] = dst;
  ++tag;
  const OpId sid = emit(s, {src}, {}, extra_src);
  const OpId rid = emit(r, {}, {dst}, extra_dst);
  return {sid, rid, dst};
}

PlanBuilder::Transfer PlanBuilder::phantom_transfer(Stream stream, BufferId src, RankId dst_rank, int src_group,
                                                    int dst_group, std::span<const OpId> extra_src,
                                                    std::span<const OpId> extra_dst, BufferId into) {
  const Buffer sb = buf(src);
  CHARM_ASSERT(sb.rank != dst_rank, "a transfer needs two ranks");
  const BufferId dst =
      into != kNone ? into : buffer(dst_rank, sb.kind, plan_.region(sb), BufInit::None, kNone, sb.activations_dtype);
  if (src < 0 && phantom(dst_rank)) return {kNone, kNone, dst};  // between phantoms: no tag of the quotient counts it
  Op op;  // the side of the representative, as transfer() makes it
  op.stream = stream;
  op.tag = next_tag(stream, sb.rank, dst_rank)++;
  op.bytes = sb.bytes;
  if (src >= 0) {
    op.rank = sb.rank;
    op.kind = OpKind::Send;
    op.peer = dst_rank;
    op.group = src_group;
    op.buf[0] = src;
    return {emit(op, {src}, {}, extra_src), kNone, dst};
  }
  op.rank = dst_rank;
  op.kind = OpKind::Recv;
  op.peer = sb.rank;
  op.group = dst_group;
  op.buf[0] = dst;
  return {kNone, emit(op, {}, {dst}, extra_dst), dst};
}

std::pair<PlanBuilder::Transfer, PlanBuilder::Transfer> PlanBuilder::exchange(Stream stream, BufferId a_src,
                                                                              BufferId b_src,
                                                                              std::span<const OpId> extra_a,
                                                                              std::span<const OpId> extra_b) {
  const RankId a = buf(a_src).rank, b = buf(b_src).rank;
  const int ga = new_group(), gb = new_group();
  // Rank a issues [send, recv], rank b issues [recv, send]: both pairs are one group.
  auto ab = transfer(stream, a_src, b, ga, gb, extra_a, extra_b);
  auto ba = transfer(stream, b_src, a, gb, ga, extra_b, extra_a);
  return {ab, ba};
}

OpId PlanBuilder::merge(Stream stream, BufferId partial, BufferId acc, std::span<const OpId> extra) {
  return fold_into(OpKind::Merge, stream, partial, acc, extra);
}

OpId PlanBuilder::accumulate(Stream stream, BufferId partial, BufferId acc, std::span<const OpId> extra) {
  return fold_into(OpKind::Accumulate, stream, partial, acc, extra);
}

OpId PlanBuilder::fold_into(OpKind kind, Stream stream, BufferId partial, BufferId acc, std::span<const OpId> extra) {
  if (partial < 0) return kNone;
  const Buffer& p = plan_.buffer(partial);
  Op op;
  op.rank = p.rank;
  op.stream = stream;
  op.kind = kind;
  op.buf[0] = partial;
  op.buf[1] = acc;
  op.bytes = 3 * p.bytes;  // read both, write one
  return emit(op, {partial, acc}, {acc}, extra);
}

OpId PlanBuilder::pack(BufferId q, BufferId dout, BufferId out, BufferId qbundle) {
  if (q < 0) return kNone;
  Op op;
  op.rank = plan_.buffer(q).rank;
  op.stream = Stream::Compute;
  op.kind = OpKind::Copy;
  op.buf[0] = q;
  op.buf[1] = dout;
  op.buf[2] = out;
  op.buf[3] = qbundle;
  op.bytes = plan_.buffer(q).bytes + plan_.buffer(dout).bytes + plan_.buffer(out).bytes + plan_.buffer(qbundle).bytes;
  return emit(op, {q, dout, out}, {qbundle}, {});
}

Plan PlanBuilder::finish() && {
  for (std::size_t r = std::size_t(first_phantom_); r < plan_.results().size(); ++r) plan_.results()[r] = {};
  return std::move(plan_);
}

}  // namespace charm::sched
