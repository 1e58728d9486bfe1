// The peak-memory accounting of a simulated plan: each rank's high-water mark of live buffers.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "scheduler/ir/op_args.hpp"

#include "sim/engine.hpp"

namespace charm::sim {

using namespace charm::ir;

namespace detail {

void Engine::peak_memory() {
  const auto& bufs = plan_.buffers();
  const std::size_t B = bufs.size();
  std::vector<double> first(B, -1), last(B, -1);
  // Plan::storage(b) for every buffer, in one pass: parents and reused buffers come
  // before the buffers that name them, so each answer extends an earlier one
  // (walking a reuse chain per access costs its length, which grows with the ranks).
  std::vector<BufferId> storage(B);
  {
    std::vector<BufferId> chain_end(B), root(B);  // end of b's reuse chain; b's root
    for (std::size_t k = 0; k < B; ++k) {
      const Buffer& b = bufs[k];
      chain_end[k] = b.reuse == kNone ? BufferId(k) : chain_end[std::size_t(b.reuse)];
      root[k] = b.parent == kNone ? BufferId(k) : root[std::size_t(b.parent)];
      storage[k] = chain_end[std::size_t(root[k])];
    }
  }
  for (std::size_t i = 0; i < plan_.size(); ++i) {
    for_each_access(plan_.op(OpId(i)), [&](BufferId b, int, bool) {
      if (b == kNone) return;  // hand-built plans (tests) may leave slots empty
      const auto k =
          std::size_t(storage[std::size_t(b)]);  // a view lives in its root's storage, a reuse in its chain's
      if (first[k] < 0 || res_.start_s[i] < first[k]) first[k] = res_.start_s[i];
      last[k] = std::max(last[k], res_.end_s[i]);
    });
  }
  for (const auto& rr : plan_.results())
    for (BufferId b : {rr.out, rr.dq, rr.dkv})
      if (b != kNone) last[std::size_t(b)] = res_.makespan_s;
  // Sweep per rank: allocations at first access (Input buffers at 0), frees after the last one.
  // The events of all ranks in one array, rank by rank (two passes: count, then place).
  const auto R = std::size_t(plan_.ranks);
  auto lives = [&](std::size_t k) {
    const Buffer& b = bufs[k];
    return b.parent == kNone && b.reuse == kNone && (first[k] >= 0 || b.init == BufInit::Input);
  };
  std::vector<std::size_t> at(R + 1, 0);
  for (std::size_t k = 0; k < B; ++k)
    if (lives(k)) at[std::size_t(bufs[k].rank) + 1] += 2;
  for (std::size_t r = 0; r < R; ++r) at[r + 1] += at[r];
  std::vector<std::pair<double, std::int64_t>> ev(at[R]);
  std::vector<std::size_t> fill(at.begin(), at.end() - 1);
  for (std::size_t k = 0; k < B; ++k) {
    if (!lives(k)) continue;
    const Buffer& b = bufs[k];
    const double from = b.init == BufInit::Input ? 0.0 : first[k];
    const double to = std::max(from, last[k] < 0 ? res_.makespan_s : last[k]);
    auto& f = fill[std::size_t(b.rank)];
    ev[f++] = {from, std::int64_t(b.bytes)};
    ev[f++] = {to, -std::int64_t(b.bytes)};
  }
  for (std::size_t r = 0; r < R; ++r) {
    const auto e = ev.begin() + std::ptrdiff_t(at[r]), end = ev.begin() + std::ptrdiff_t(at[r + 1]);
    // At equal times, allocate before freeing (a buffer read by the op that fills the next is still live).
    std::sort(e, end, [](const auto& a, const auto& b) {
      return a.first < b.first || (a.first == b.first && a.second > b.second);
    });
    std::int64_t cur = 0, peak = 0;
    for (auto it = e; it != end; ++it) {
      cur += it->second;
      peak = std::max(peak, cur);
    }
    res_.ranks[r].peak_mem_bytes = Bytes(peak);
  }
}

}  // namespace detail

}  // namespace charm::sim
