#pragma once
// The fields of a request that an error can be about (Error::field), one table: the command line and the
// Python module name a field by its flag ("--kv-heads"), calibrate by its CSV column (kv_heads). The
// libraries say which field is wrong and never spell a flag; no code reads a field back from text.

#include <cstdint>
#include <string_view>

#include "support/enum_names.hpp"

namespace charm {

enum class Field : std::uint8_t {
  None,
  Algo,
  Algos,
  Ranks,
  Domains,
  Batch,
  Seq,
  Heads,
  KvHeads,
  HeadDim,
  Mask,
  Layout,
  Pass,
  Cp,
  Tp,
  Order,
  Symmetry,
  Topology,
  AssumeGpu,
  Device,
  Fit,
  Measurements,
  NcclTests,
  Chakra,
  MaxMemory,
};

inline constexpr EnumName<Field> kFieldFlags[] = {
    {"--algo", Field::Algo},
    {"--algos", Field::Algos},
    {"--ranks", Field::Ranks},
    {"--domains", Field::Domains},
    {"--batch", Field::Batch},
    {"--seq", Field::Seq},
    {"--heads", Field::Heads},
    {"--kv-heads", Field::KvHeads},
    {"--head-dim", Field::HeadDim},
    {"--mask", Field::Mask},
    {"--layout", Field::Layout},
    {"--pass", Field::Pass},
    {"--cp", Field::Cp},
    {"--tp", Field::Tp},
    {"--order", Field::Order},
    {"--symmetry", Field::Symmetry},
    {"--topology", Field::Topology},
    {"--assume-gpu", Field::AssumeGpu},
    {"--device", Field::Device},
    {"--fit", Field::Fit},
    {"--measurements", Field::Measurements},
    {"--nccl-tests", Field::NcclTests},
    {"--chakra", Field::Chakra},
    {"--max-memory", Field::MaxMemory},
};

/// The flag that sets `f` ("--kv-heads"); empty for Field::None.
[[nodiscard]] constexpr std::string_view flag_name(Field f) {
  return f == Field::None ? std::string_view() : enum_name(f, kFieldFlags);
}

}  // namespace charm
