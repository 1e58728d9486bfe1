#include "runtime/buffer_store.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "scheduler/ir/buffer_rules.hpp"
#include "scheduler/ir/op_args.hpp"

namespace charm::rt {

namespace {
/// The buffer whose storage `b` is: its parent on the same rank (a view), else itself.
ir::BufferId storage_root(const ir::Plan& plan, ir::BufferId b) {
  const ir::Buffer& buf = plan.buffer(b);
  const bool view = buf.parent >= 0 && buf.parent < b && plan.buffer(buf.parent).rank == buf.rank;
  return view ? buf.parent : b;
}

/// The distinct storages (roots) of `rank` that `op` touches, by `root_of` (kNone: not this rank's).
template <class RootOf>
int distinct_roots(const ir::Op& op, RootOf&& root_of, ir::BufferId (&out)[4]) {
  int n = 0;
  ir::for_each_access(op, [&](ir::BufferId b, int, bool) {
    const ir::BufferId r = root_of(b);
    if (r != ir::kNone && std::find(out, out + n, r) == out + n) out[n++] = r;
  });
  return n;
}
}  // namespace

std::size_t op_order_peak_bytes(const ir::Plan& plan) {
  const std::size_t nbuf = plan.buffers().size();
  const auto root_of = [&](ir::BufferId b) {
    return b < 0 || std::size_t(b) >= nbuf ? ir::kNone : storage_root(plan, b);
  };
  std::vector<int> uses(nbuf, 0);
  std::vector<char> seen(nbuf, 0), keep(nbuf, 0);
  ir::BufferId roots[4];
  for (const auto& op : plan.ops())
    for (int i = 0, n = distinct_roots(op, root_of, roots); i < n; ++i) ++uses[std::size_t(roots[i])];
  for (const ir::RankResults& res : plan.results())
    for (ir::BufferId b : {res.out, res.dq, res.dkv})
      if (const ir::BufferId r = root_of(b); r != ir::kNone) keep[std::size_t(r)] = 1;
  std::vector<std::size_t> live(std::size_t(std::max(plan.ranks, 0)), 0);
  std::size_t peak = 0;
  for (const auto& op : plan.ops()) {
    if (op.rank < 0 || std::size_t(op.rank) >= live.size()) continue;
    std::size_t& now = live[std::size_t(op.rank)];
    const int n = distinct_roots(op, root_of, roots);
    for (int i = 0; i < n; ++i) {
      const auto r = std::size_t(roots[i]);
      if (!seen[r]) now += std::size_t(plan.buffer(roots[i]).bytes);
      seen[r] = 1;
    }
    peak = std::max(peak, now);
    for (int i = 0; i < n; ++i) {
      const auto r = std::size_t(roots[i]);
      if (--uses[r] == 0 && !keep[r]) now -= std::size_t(plan.buffer(roots[i]).bytes);
    }
  }
  return peak;
}

BufferStore::BufferStore(const ir::Plan& plan, ir::RankId rank, FillInput fill)
    : plan_(plan), rank_(rank), fill_(std::move(fill)) {
  slots_.resize(plan.buffers().size());
  for (ir::BufferId b = 0; b < static_cast<ir::BufferId>(plan.buffers().size()); ++b) {
    const ir::Buffer& buf = plan.buffer(b);
    if (buf.rank != rank) continue;
    auto s = std::make_unique<Slot>();
    s->root = b;
    s->valid = ir::check_buffer(plan, b);
    if (s->valid) {
      s->layout = region_layout(plan, b);
      s->count = s->layout.elems();
      if (const ir::BufferId root = storage_root(plan, b); root != b) {  // a view: its parent's storage
        const Slot& parent = *slots_[std::size_t(root)];
        s->root = root;
        s->offset = std::int64_t(buf.owner - parent.layout.region.owner_begin) * parent.layout.block_elems;
      }
    }
    slots_[std::size_t(b)] = std::move(s);
  }
  for (const auto& op : plan.ops()) {
    if (op.rank != rank) continue;
    ir::BufferId roots[4];
    const int n = roots_of(op, roots);
    for (int i = 0; i < n; ++i) slots_[std::size_t(roots[i])]->uses.fetch_add(1, std::memory_order_relaxed);
  }
  const auto& res = plan.results()[std::size_t(rank)];
  for (ir::BufferId b : {res.out, res.dq, res.dkv})
    if (b >= 0 && std::size_t(b) < slots_.size() && slots_[std::size_t(b)])
      slots_[std::size_t(slots_[std::size_t(b)]->root)]->keep = true;
}

Status check_compute_blocks(const ir::Plan& plan, ir::OpId id, ir::BufferId q, const ir::Region& rq, ir::BufferId kv,
                            const ir::Region& rk) {
  const ir::Op& op = plan.op(id);
  const std::string where = fmt::format("rank {} op {} ({})", op.rank, id, ir::op_label(plan, id));
  if (rq.owner_begin != op.q_owner || rk.owner_begin != op.kv_owner)
    return Error{where, fmt::format("op names Q{}*KV{} but its buffers hold Q{}, KV{}", op.q_owner, op.kv_owner,
                                    rq.owner_begin, rk.owner_begin)};
  if (rq.head_begin != rk.head_begin || rq.head_end != rk.head_end)
    return Error{
        where, fmt::format("{} and {} hold different kv heads", ir::buffer_label(plan, q), ir::buffer_label(plan, kv))};
  return {};
}

int BufferStore::roots_of(const ir::Op& op, ir::BufferId (&out)[4]) const {
  return distinct_roots(
      op,
      [&](ir::BufferId b) {
        return b < 0 || std::size_t(b) >= slots_.size() || !slots_[std::size_t(b)] ? ir::kNone
                                                                                   : slots_[std::size_t(b)]->root;
      },
      out);
}

Status BufferStore::init(ir::BufferId id, Slot& s) {
  const ir::Buffer& b = plan_.buffer(id);
  const auto n = static_cast<std::size_t>(s.layout.elems());
  try {
    s.data.assign(n, 0.0f);
  } catch (const std::bad_alloc&) {
    return Error{fmt::format("rank {}", b.rank), fmt::format("out of memory allocating buffer {} ({} floats)", id, n)};
  }
  // The peak counts what the plan says the buffer holds (Buffer::bytes, in the workload's
  // dtypes: what a GPU would allocate), not this host's fp32 copy of it.
  s.counted = std::size_t(b.bytes);
  const std::size_t now = live_.fetch_add(s.counted) + s.counted;
  std::size_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {}
  if (b.init == ir::BufInit::Zero && b.kind == ir::BufKind::Out) {
    // Every owner's block: O stays zero, LSE = -inf.
    const std::int64_t block = s.layout.block_elems, q = s.layout.block.q_elems();
    for (std::int64_t k = 0; k < s.layout.region.owners(); ++k)
      std::fill(s.data.begin() + k * block + q, s.data.begin() + (k + 1) * block,
                -std::numeric_limits<float>::infinity());
  }
  if (b.init == ir::BufInit::Input) return fill_(b, s.data);
  return {};
}

Expected<std::span<float>> BufferStore::get(ir::BufferId b) {
  if (b < 0 || std::size_t(b) >= slots_.size() || !slots_[std::size_t(b)])
    return Error{"plan", fmt::format("buffer {} does not belong to this rank", b)};
  const Slot& s = *slots_[std::size_t(b)];
  if (!s.valid) return s.valid.error();
  Slot& r = *slots_[std::size_t(s.root)];
  std::call_once(r.once, [&] { r.init = init(s.root, r); });
  if (!r.init) return r.init.error();
  return std::span<float>(r.data).subspan(std::size_t(s.offset), std::size_t(s.count));
}

void BufferStore::release(const ir::Op& op) {
  ir::BufferId roots[4];
  const int n = roots_of(op, roots);
  for (int i = 0; i < n; ++i) {
    Slot& s = *slots_[std::size_t(roots[i])];
    if (s.uses.fetch_sub(1, std::memory_order_acq_rel) == 1 && !s.keep) {
      live_.fetch_sub(s.counted);
      std::vector<float>().swap(s.data);
    }
  }
}

}  // namespace charm::rt
