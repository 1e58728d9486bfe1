// Host-side pieces of the GPU executor that need no device: the device buffer
// layout against the plan's byte counts, the timeline summary on hand-made
// intervals (arithmetic in the comments), and the refusal of region plans.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/cuda/cublas_loader.hpp"
#include "runtime/cuda/cuda_executor.hpp"
#include "runtime/cuda/device_layout.hpp"
#include "runtime/cuda/timeline.hpp"
#ifdef CHARM_RT_HAVE_NCCL
#include "runtime/cuda/nccl_backend.hpp"
#endif

namespace charm::rt::cuda {
namespace {

ir::Workload small() {
  ir::Workload w;
  w.batch = 2;
  w.seq = 512;
  w.heads = 8;
  w.kv_heads = 2;
  w.head_dim = 64;
  w.dtype = ir::DType::BF16;
  return w;
}

TEST(DeviceLayout, MatchesPlanBytesExceptFp32Output) {
  const auto w = small();
  const int n = 4;
  const auto ss = ShardShape::of(w, n);
  auto bytes = [&](ir::BufKind k) { return DeviceLayout::of(k, ss, w.dtype).bytes; };
  // Every section here is a multiple of 256 bytes, so no padding.
  EXPECT_EQ(bytes(ir::BufKind::Q), w.q_bytes(n));
  EXPECT_EQ(bytes(ir::BufKind::Kv), w.kv_bytes(n));
  EXPECT_EQ(bytes(ir::BufKind::Dout), w.do_bytes(n));
  EXPECT_EQ(bytes(ir::BufKind::QBundle), w.qbundle_bytes(n));
  EXPECT_EQ(bytes(ir::BufKind::Dq), w.dq_bytes(n));
  EXPECT_EQ(bytes(ir::BufKind::Dkv), w.dkv_bytes(n));
  // Out keeps O in fp32: 2 bytes more per element of O than the plan's bf16 O.
  EXPECT_EQ(bytes(ir::BufKind::Out), w.out_bytes(n) + w.q_bytes(n));
}

TEST(DeviceLayout, SectionsAreAlignedAndInCpuOrder) {
  ir::Workload w = small();
  w.seq = 12;  // 3 tokens per rank: sections of odd sizes
  w.head_dim = 3;
  w.dtype = ir::DType::FP16;
  const auto ss = ShardShape::of(w, 4);
  const auto l = DeviceLayout::of(ir::BufKind::QBundle, ss, w.dtype);
  ASSERT_EQ(l.sections.size(), 4u);
  EXPECT_EQ(l.host_elems(), ss.elems(ir::BufKind::QBundle));
  for (const auto& s : l.sections) EXPECT_EQ(s.offset % DeviceLayout::kAlign, 0u);
  EXPECT_FALSE(l.sections[0].f32);
  EXPECT_FALSE(l.sections[1].f32);
  EXPECT_TRUE(l.sections[2].f32);
  EXPECT_TRUE(l.sections[3].f32);
  EXPECT_GE(l.bytes, l.sections[3].offset + std::size_t(l.sections[3].elems) * 4);
}

TEST(Timeline, UnionLength) {
  // [0,2) u [1,3) u [5,6) = [0,3) u [5,6): 3 + 1 = 4; empty and reversed intervals count 0.
  EXPECT_DOUBLE_EQ(union_length({{1, 3}, {0, 2}, {5, 6}, {7, 7}, {9, 8}}), 4.0);
  EXPECT_DOUBLE_EQ(union_length({}), 0.0);
}

TEST(Timeline, ExposedCommIsCommOutsideCompute) {
  ir::Plan p;
  p.ranks = 2;
  auto add = [&](ir::RankId r, ir::Stream s, ir::OpKind k) {
    ir::Op op;
    op.rank = r;
    op.stream = s;
    op.kind = k;
    return p.add_op(op, {});
  };
  add(0, ir::Stream::Compute, ir::OpKind::Compute);  // 0: [0, 2)
  add(0, ir::Stream::Kv, ir::OpKind::Send);          // 1: [1, 4)
  add(1, ir::Stream::Kv, ir::OpKind::Recv);          // 2: [1, 4)
  add(1, ir::Stream::Compute, ir::OpKind::Compute);  // 3: [4, 5)
  const std::vector<double> start{0, 1, 1, 4}, end{2, 4, 4, 5};
  const auto s = summarize_timeline(p, start, end);
  // Makespan 5. Rank 0: busy 2, comm [1,4) outside [0,2) = 2, idle 3.
  // Rank 1 (finishes last): busy 1, comm [1,4) fully exposed = 3, idle 4.
  EXPECT_DOUBLE_EQ(s.time_ms, 5.0);
  EXPECT_EQ(s.last_rank, 1);
  EXPECT_DOUBLE_EQ(s.exposed_comm_ms, 3.0);
  EXPECT_DOUBLE_EQ(s.exposed_comm_mean_ms, 2.5);
  EXPECT_DOUBLE_EQ(s.exposed_comm_max_ms, 3.0);
  EXPECT_DOUBLE_EQ(s.compute_busy_mean_ms, 1.5);
  EXPECT_DOUBLE_EQ(s.idle_mean_ms, 3.5);
  EXPECT_DOUBLE_EQ(s.idle_max_ms, 4.0);
  EXPECT_DOUBLE_EQ(s.stream_busy_mean_ms[int(ir::Stream::Kv)], 3.0);
}

TEST(Timeline, UnmeasuredOpsAreIgnored) {
  ir::Plan p;
  p.ranks = 1;
  ir::Op op;
  (void)p.add_op(op, {});
  (void)p.add_op(op, {});
  const auto s = summarize_timeline(p, {0.0, std::nan("")}, {1.0, std::nan("")});
  EXPECT_DOUBLE_EQ(s.time_ms, 1.0);
  EXPECT_DOUBLE_EQ(s.compute_busy_mean_ms, 1.0);
}

// Region plans (Ulysses, USP, TASP) are refused up front, before any device or
// MPI call, with a message that names the backends that run them.
TEST(Supports, RegionPlansAreRefusedByBothBackends) {
  ir::Plan plan;
  plan.algo = "tasp";
  plan.workload = small();
  plan.ranks = 4;
  plan.results().assign(4, {});
  EXPECT_TRUE(supports(plan).ok());
  plan.parts = 2;
  ASSERT_TRUE(plan.has_regions());
  auto expect_refusal = [](const std::string& msg) {
    EXPECT_NE(msg.find("do not run region plans"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--backend threads or mpi"), std::string::npos) << msg;
  };
  const auto s = supports(plan);
  ASSERT_FALSE(s.ok());
  expect_refusal(s.error().message());
  const auto local = run_cuda_local(plan, {}, {});
  ASSERT_FALSE(local.ok());
  expect_refusal(local.error().message());
#ifdef CHARM_RT_HAVE_NCCL
  const auto nccl = run_cuda_nccl(plan, {}, {});
  ASSERT_FALSE(nccl.ok());
  expect_refusal(nccl.error().message());
#endif
}

}  // namespace
}  // namespace charm::rt::cuda

// cuBLAS is opened on first use, not linked (its start-up cost would fall on every command):
// the toolkit this build found is where the loader finds it, and no GPU is needed to load it.
TEST(CublasLoader, OpensTheToolkitsLibraryWithoutAGpu) {
  const auto st = charm::rt::cuda::blas::load();
  ASSERT_TRUE(st) << st.error().message();
  const std::string text =
      charm::rt::cuda::blas::status_string(CUBLAS_STATUS_NOT_SUPPORTED);  // the library's own words
  EXPECT_FALSE(text.empty());
  EXPECT_NE(text, "cuBLAS not loaded");
}
