#include "scheduler/planners/comm_list.hpp"

#include <algorithm>

namespace charm::sched {

bool is_power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

int log2_exact(int n) {
  int l = 0;
  while ((1 << l) < n) ++l;
  return l;
}

std::vector<CommLevel> generate_comm_list(int x, int n) {
  CHARM_ASSERT(is_power_of_two(n) && x >= 0 && x < n, "GenerateCommList needs a power-of-two group");
  std::vector<std::vector<int>> tmp;
  for (int l = 1; l < n; l *= 2) {
    std::vector<int> g;
    for (int i = l; i < 2 * l; ++i) g.push_back(x ^ i);
    std::sort(g.begin(), g.end());
    tmp.push_back(std::move(g));
  }
  std::vector<CommLevel> levels;
  if (tmp.empty()) return levels;
  levels.push_back({tmp[0], {}});
  std::vector<int> block = tmp[0];
  block.push_back(x);
  std::sort(block.begin(), block.end());
  for (std::size_t k = 1; k < tmp.size(); ++k) {
    const auto& g = tmp[k];
    const auto half_g = static_cast<std::ptrdiff_t>(g.size() / 2);
    std::vector<int> first(g.begin(), g.begin() + half_g), second(g.begin() + half_g, g.end());
    const auto index = std::find(block.begin(), block.end(), x) - block.begin();
    const auto half = static_cast<std::ptrdiff_t>(block.size() / 2);
    if (index < half)
      levels.push_back({first, second});
    else
      levels.push_back({second, first});
    block.insert(block.end(), g.begin(), g.end());
    std::sort(block.begin(), block.end());
  }
  return levels;
}

}  // namespace charm::sched
