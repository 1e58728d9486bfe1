#include "runtime/buffer_store.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace charm::rt {

BufferStore::BufferStore(const ir::Plan& plan, ir::RankId rank, FillInput fill)
    : plan_(plan), shape_(ShardShape::of(plan.workload, plan.ranks)), fill_(std::move(fill)) {
  slots_.resize(plan.buffers().size());
  for (std::size_t b = 0; b < plan.buffers().size(); ++b)
    if (plan.buffers()[b].rank == rank) slots_[b] = std::make_unique<Slot>();
  for (const auto& op : plan.ops()) {
    if (op.rank != rank) continue;
    for (int i = 0; i < 4; ++i) {
      const ir::BufferId b = op.buf[i];
      if (b == ir::kNone || std::find(op.buf, op.buf + i, b) != op.buf + i) continue;
      if (auto& s = slots_[std::size_t(b)]) s->uses.fetch_add(1, std::memory_order_relaxed);
    }
  }
  const auto& res = plan.results()[std::size_t(rank)];
  for (ir::BufferId b : {res.out, res.dq, res.dkv})
    if (b != ir::kNone && slots_[std::size_t(b)]) slots_[std::size_t(b)]->keep = true;
}

Status BufferStore::init(ir::BufferId id, Slot& s) {
  const ir::Buffer& b = plan_.buffer(id);
  const auto n = static_cast<std::size_t>(shape_.elems(b.kind));
  try {
    s.data.assign(n, 0.0f);
  } catch (const std::bad_alloc&) {
    return Error{fmt::format("rank {}", b.rank), fmt::format("out of memory allocating buffer {} ({} floats)", id, n)};
  }
  const std::size_t now = live_.fetch_add(n * sizeof(float)) + n * sizeof(float);
  std::size_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {}
  if (b.init == ir::BufInit::Zero && b.kind == ir::BufKind::Out)
    std::fill(s.data.begin() + shape_.q_elems(), s.data.end(), -std::numeric_limits<float>::infinity());
  if (b.init == ir::BufInit::Input) return fill_(b, s.data);
  return {};
}

Expected<std::span<float>> BufferStore::get(ir::BufferId b) {
  if (b < 0 || std::size_t(b) >= slots_.size() || !slots_[std::size_t(b)])
    return Error{"plan", fmt::format("buffer {} does not belong to this rank", b)};
  Slot& s = *slots_[std::size_t(b)];
  std::call_once(s.once, [&] { s.init = init(b, s); });
  if (!s.init) return s.init.error();
  return std::span<float>(s.data);
}

void BufferStore::release(ir::BufferId b) {
  Slot& s = *slots_[std::size_t(b)];
  if (s.uses.fetch_sub(1, std::memory_order_acq_rel) == 1 && !s.keep) {
    live_.fetch_sub(s.data.size() * sizeof(float));
    std::vector<float>().swap(s.data);
  }
}

} // namespace charm::rt
