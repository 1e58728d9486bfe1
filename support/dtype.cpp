#include "support/dtype.hpp"

#include <fmt/format.h>

namespace charm {

Expected<DType> parse_dtype(std::string_view s) {
  if (auto t = parse_enum(s, kDTypeNames)) return *t;
  return Error{"", fmt::format("unknown dtype '{}' (expected {})", s, enum_names_text(kDTypeNames))};
}

}  // namespace charm
