#pragma once
// One field of a CSV file as RFC 4180 writes it: as it is, unless it holds a comma, a double
// quote or a line break, which would shift or split the row's columns; then in double quotes,
// with each quote inside written twice. calibrate/csv_records.hpp reads it back.

#include <string>
#include <string_view>

namespace charm {

[[nodiscard]] std::string csv_field(std::string_view s);

}  // namespace charm
