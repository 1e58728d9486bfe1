// Backend cuda-local end to end: every planner on one GPU, forward, backward
// and both, checked against the fp64 reference at the dtype's tolerance (bf16:
// relative error of every tensor <= 1e-2); op times measured for every op; a
// plan that cannot run reports the stuck op. Skips without a device.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>

#include "runtime/check.hpp"
#include "runtime/cuda/cuda_executor.hpp"
#include "runtime/reference.hpp"
#include "scheduler/planners/planners.hpp"
#include "scheduler/validate/validator.hpp"

namespace charm::rt::cuda {
namespace {

struct Case {
  std::string algo;
  int ranks = 4, domains = 1;
  ir::PassKind pass = ir::PassKind::Both;
  bool causal = true;
  ir::Layout layout = ir::Layout::Contiguous;
  ir::DType dtype = ir::DType::BF16;
  std::int64_t kv_heads = 4;
};

std::string name_of(const testing::TestParamInfo<Case>& i) {
  const auto& c = i.param;
  std::string s = c.algo + "_n" + std::to_string(c.ranks) + "d" + std::to_string(c.domains) + "_" +
                  std::string(ir::to_string(c.pass)) + (c.causal ? "_causal_" : "_full_") +
                  std::string(ir::to_string(c.layout)) + "_" + std::string(ir::to_string(c.dtype)) + "_kv" +
                  std::to_string(c.kv_heads);
  for (auto& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

class CudaLocal : public testing::TestWithParam<Case> {};

TEST_P(CudaLocal, MatchesReference) {
  if (auto n = device_count(); !n) GTEST_SKIP() << n.error().message();
  const Case c = GetParam();
  sched::PlanRequest req;
  req.algo = c.algo;
  req.ranks = c.ranks;
  req.domains = c.domains;
  req.workload.batch = 2;
  req.workload.seq = 512;
  req.workload.heads = 4;
  req.workload.kv_heads = c.kv_heads;
  req.workload.head_dim = 64;
  req.workload.dtype = c.dtype;
  req.workload.causal = c.causal;
  req.workload.layout = c.layout;
  req.workload.pass = c.pass;
  auto made = sched::make_plan(req);
  ASSERT_TRUE(bool(made)) << made.error().message();
  const auto valid = sched::validated(std::move(*made));
  ASSERT_TRUE(bool(valid)) << valid.error().message();
  const ir::Plan* plan = &**valid;
  const auto in = plan_inputs(plan->workload, 3);
  CudaRunOptions opt;
  opt.timeout_s = 60;
  auto res = run_cuda_local(*valid, in, opt);
  ASSERT_TRUE(bool(res)) << res.error().message();
  const auto ref = reference_attention(plan->workload, in, c.pass != ir::PassKind::Fwd);
  const auto rep = check_against(res->run.out, ref, c.dtype);
  EXPECT_TRUE(rep.ok()) << "worst: " << rep.worst();
  if (rep.out) {
    EXPECT_LE(rep.out->max_rel, 1e-2);
  }
  EXPECT_GT(res->run.time_ms, 0.0);
  for (std::size_t i = 0; i < plan->size(); ++i) {
    EXPECT_TRUE(std::isfinite(res->start_ms[i]) && std::isfinite(res->end_ms[i])) << "op " << i;
    EXPECT_LE(res->start_ms[i], res->end_ms[i]) << "op " << i;
    EXPECT_LE(res->end_ms[i], res->run.time_ms + 1e-9) << "op " << i;
  }
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (const std::string a : {"ring", "merge", "rm+", "charm", "allgather-kv"})
    for (auto p : {ir::PassKind::Fwd, ir::PassKind::Bwd, ir::PassKind::Both}) v.push_back({a, 4, 1, p});
  for (auto p : {ir::PassKind::Fwd, ir::PassKind::Bwd, ir::PassKind::Both})
    v.push_back({"ring-zigzag", 4, 1, p, true, ir::Layout::Zigzag});
  // Zigzag CHARM across domains, 8 ranks, GQA; a non-causal ring; fp16 and fp32.
  v.push_back({"charm", 8, 2, ir::PassKind::Both, true, ir::Layout::Zigzag, ir::DType::BF16, 2});
  v.push_back({"ring", 2, 1, ir::PassKind::Both, false});
  v.push_back({"rm+", 4, 1, ir::PassKind::Both, true, ir::Layout::Contiguous, ir::DType::FP16});
  v.push_back({"charm", 4, 1, ir::PassKind::Both, true, ir::Layout::Zigzag, ir::DType::FP32});
  // Region plans: views, ranged computes, region copies; O on the wire in the dtype.
  for (auto p : {ir::PassKind::Fwd, ir::PassKind::Both}) {
    v.push_back({"ulysses", 4, 1, p, true, ir::Layout::Zigzag, ir::DType::BF16, 4});
    v.push_back({"usp", 4, 2, p, true, ir::Layout::Zigzag, ir::DType::BF16, 4});
  }
  v.push_back({"ulysses", 2, 1, ir::PassKind::Bwd, false, ir::Layout::Contiguous, ir::DType::FP16, 2});
  v.push_back({"tasp", 4, 1, ir::PassKind::Fwd});
  v.push_back({"tasp-zigzag", 4, 1, ir::PassKind::Fwd, true, ir::Layout::Zigzag, ir::DType::FP16, 4});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Algorithms, CudaLocal, testing::ValuesIn(cases()), name_of);

TEST(CudaLocalStall, MissingSendIsReportedNotHung) {
  if (auto n = device_count(); !n) GTEST_SKIP() << n.error().message();
  sched::PlanRequest req;
  req.algo = "ring";
  req.ranks = 4;
  req.workload.batch = 1;
  req.workload.seq = 256;
  req.workload.heads = 2;
  req.workload.kv_heads = 2;
  req.workload.head_dim = 32;
  auto plan = sched::make_plan(req);
  ASSERT_TRUE(bool(plan)) << plan.error().message();
  const auto valid = sched::validated(std::move(*plan));
  ASSERT_TRUE(bool(valid)) << valid.error().message();
  CudaRunOptions opt;
  opt.timeout_s = 5;
  opt.faults.drop_first_send = true;
  auto res = run_cuda_local(*valid, plan_inputs((*valid)->workload, 1), opt);
  ASSERT_FALSE(bool(res));
  EXPECT_NE(res.error().message().find("stall"), std::string::npos) << res.error().message();
  EXPECT_NE(res.error().message().find("no matching peer op"), std::string::npos) << res.error().message();
}

}  // namespace
}  // namespace charm::rt::cuda
