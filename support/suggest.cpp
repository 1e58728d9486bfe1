#include "support/suggest.hpp"

#include <algorithm>
#include <cctype>
#include <vector>

namespace charm {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  auto low = [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); };
  const std::size_t n = a.size(), m = b.size();
  // Optimal string alignment: Levenshtein plus a swap of two adjacent characters ("chram").
  std::vector<std::vector<std::size_t>> d(n + 1, std::vector<std::size_t>(m + 1));
  for (std::size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= n; ++i)
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = low(a[i - 1]) == low(b[j - 1]) ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && low(a[i - 1]) == low(b[j - 2]) && low(a[i - 2]) == low(b[j - 1]))
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

std::optional<std::string> closest_name(std::string_view typed, std::span<const std::string> candidates) {
  std::optional<std::string> best;
  std::size_t best_d = 0;
  for (const auto& c : candidates) {
    const std::size_t d = edit_distance(typed, c);
    if (!best || d < best_d) {
      best = c;
      best_d = d;
    }
  }
  const std::size_t limit = std::min<std::size_t>(3, std::max<std::size_t>(1, typed.size() / 3));
  if (!best || best_d > limit) return std::nullopt;
  return best;
}

std::string did_you_mean(std::string_view typed, std::span<const std::string> candidates) {
  const auto c = closest_name(typed, candidates);
  return c ? " (did you mean '" + *c + "'?)" : "";
}

}  // namespace charm
