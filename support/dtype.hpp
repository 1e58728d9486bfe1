#pragma once
// Element types: what a tensor's elements are and how many bytes each takes. Below every layer: the
// hardware's peak rate depends on it (topologies/), and so does every byte a plan moves (scheduler/ir/).

#include <cstdint>
#include <string_view>

#include "support/enum_names.hpp"
#include "support/expected.hpp"

namespace charm {

enum class DType : std::uint8_t { BF16, FP16, FP32 };
inline constexpr EnumName<DType> kDTypeNames[] = {{"bf16", DType::BF16}, {"fp16", DType::FP16}, {"fp32", DType::FP32}};

[[nodiscard]] constexpr std::string_view to_string(DType t) { return enum_name(t, kDTypeNames); }
[[nodiscard]] Expected<DType> parse_dtype(std::string_view s);
/// Bytes per element.
[[nodiscard]] constexpr std::uint64_t dtype_size(DType t) { return t == DType::FP32 ? 4 : 2; }

}  // namespace charm
