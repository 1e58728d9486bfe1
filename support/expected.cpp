#include "support/expected.hpp"

#include <cstdio>
#include <cstdlib>

namespace charm {

void invariant_failed(const char* expr, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "charm: internal error: %s:%d: %s (%s)\n", file, line, msg.c_str(), expr);
  std::abort();
}

}  // namespace charm
