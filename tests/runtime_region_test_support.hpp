// Helpers shared by the region tests of the CPU executor: the shape of a small workload.
#pragma once

#include "scheduler/ir/workload.hpp"

namespace charm::rt::test_support {

struct Shape {
  int ranks = 4;
  bool causal = true;
  ir::Layout layout = ir::Layout::Zigzag;
  bool gqa = true;
  ir::PassKind pass = ir::PassKind::Both;
};

inline ir::Workload workload_of(const Shape& s) {
  ir::Workload w;
  w.batch = 2;
  w.seq = 128;
  w.heads = s.gqa ? 8 : 4;
  w.kv_heads = 4;
  w.head_dim = 16;
  w.dtype = ir::DType::FP32;
  w.causal = s.causal;
  w.layout = s.layout;
  w.pass = s.pass;
  return w;
}

}  // namespace charm::rt::test_support
