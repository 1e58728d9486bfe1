#pragma once
// DeviceLayout: how a plan buffer of each kind is laid out in device memory.
//
// A buffer is the CPU layout's sections (runtime/shard_shape.hpp, same order)
// stored at 256-byte aligned offsets, each either in the workload dtype or in
// fp32. What travels between ranks is the whole buffer.
//   Q, Dout          [data]                 Kv        [K data, V data]
//   Out              [O f32, LSE f32]       QBundle   [Q data, dO data, LSE f32, D f32]
//   Dq               [f32]                  Dkv       [dK f32, dV f32]
// Out keeps O in fp32 in memory: partial outputs are merged up to 2n times, and
// a bf16 O rounded at every merge would spend most of the bf16 error budget.
// On the wire O is in the dtype, as the plan counts it (Workload::out_bytes,
// ir::region_bytes) and as the CPU executor sends it: the `wire` form of Out
// ([O data, LSE f32]) is what a Send converts to and a Recv converts from.
// Everything else matches the plan's bytes up to the alignment padding, in
// memory and on the wire.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/shard_shape.hpp"

namespace charm::rt::cuda {

struct Section {
  std::int64_t elems = 0;
  bool f32 = false;        // else the workload dtype
  std::size_t offset = 0;  // bytes from the buffer's start
};

struct DeviceLayout {
  std::vector<Section> sections;
  std::size_t bytes = 0;

  static constexpr std::size_t kAlign = 256;

  /// The layout of one shard-shaped block; `wire`: as it travels (O in the dtype).
  [[nodiscard]] static DeviceLayout of(ir::BufKind kind, const ShardShape& s, ir::DType dtype, bool wire = false) {
    const std::size_t data_size = ir::dtype_size(dtype);
    DeviceLayout l;
    auto add = [&](std::int64_t elems, bool f32) {
      l.sections.push_back({elems, f32, l.bytes});
      const std::size_t n = std::size_t(elems) * (f32 ? 4 : data_size);
      l.bytes += (n + kAlign - 1) / kAlign * kAlign;
    };
    switch (kind) {
    case ir::BufKind::Q:
    case ir::BufKind::Dout:
      add(s.q_elems(), false);
      break;
    case ir::BufKind::Kv:
      add(s.kv_elems(), false);
      add(s.kv_elems(), false);
      break;
    case ir::BufKind::Out:
      add(s.q_elems(), !wire || dtype == ir::DType::FP32);
      add(s.lse_elems(), true);
      break;
    case ir::BufKind::QBundle:
      add(s.q_elems(), false);
      add(s.q_elems(), false);
      add(s.lse_elems(), true);
      add(s.lse_elems(), true);
      break;
    case ir::BufKind::Dq:
      add(s.q_elems(), true);
      break;
    case ir::BufKind::Dkv:
      add(s.kv_elems(), true);
      add(s.kv_elems(), true);
      break;
    }
    return l;
  }
  /// Elements of the CPU (all fp32, sections back to back) form.
  [[nodiscard]] std::int64_t host_elems() const {
    std::int64_t n = 0;
    for (const auto& s : sections) n += s.elems;
    return n;
  }
};

}  // namespace charm::rt::cuda
