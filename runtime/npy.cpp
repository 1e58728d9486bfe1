#include "runtime/npy.hpp"

#include <bit>
#include <cstring>

namespace charm::rt {

std::string npy_bytes(std::span<const float> data, const std::vector<std::int64_t>& shape) {
  static_assert(std::endian::native == std::endian::little, "npy writer assumes a little-endian host");
  std::string dims;  // "2, 3", or "2," for one dimension (a Python tuple)
  for (std::size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dims += ",";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Magic (6) + version (2) + header length (2) + header, padded with spaces to a multiple of 64, ending in '\n'.
  const std::size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  const auto len = static_cast<std::uint16_t>(header.size());
  out += static_cast<char>(len & 0xFF);
  out += static_cast<char>(len >> 8);
  out += header;
  const std::size_t at = out.size();
  out.resize(at + data.size_bytes());
  std::memcpy(out.data() + at, data.data(), data.size_bytes());
  return out;
}

}  // namespace charm::rt
