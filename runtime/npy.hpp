#pragma once
// Writing float32 little-endian .npy files (NumPy format 1.0).

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace charm::rt {

/// The bytes of a .npy file holding `data` with `shape` (C order, '<f4').
[[nodiscard]] std::string npy_bytes(std::span<const float> data, const std::vector<std::int64_t>& shape);

}  // namespace charm::rt
