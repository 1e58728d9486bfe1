#pragma once
// GenerateCommList (paper Algorithm 1): per merge level, the peers a rank pulls
// KV from and the peers it exchanges Q with.

#include <vector>

#include "support/expected.hpp"

namespace charm::sched {

struct CommLevel {
  std::vector<int> kv;  // sorted, as Algorithm 1 lists them
  std::vector<int> q;   // empty at level 1
};

/// Algorithm 1 for rank x of n; n must be a power of two (n = 1 gives no levels).
[[nodiscard]] std::vector<CommLevel> generate_comm_list(int x, int n);

[[nodiscard]] bool is_power_of_two(int n);
/// log2(n) for a power of two.
[[nodiscard]] int log2_exact(int n);

}  // namespace charm::sched
