// The trace layer: Chrome traces from a timeline, and a measured trace beside a predicted one.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "scheduler/trace/diff.hpp"
#include "scheduler/trace/summary.hpp"
#include "scheduler/trace/trace.hpp"

namespace {

using nlohmann::json;
using namespace charm::trace;
namespace ir = charm::ir;

/// A trace of three ops with the given durations (microseconds).
json three_ops(double send_us, double recv_us, double compute_us, const char* compute_name = "fwd Q0*KV0 full") {
  auto x = [](int op, const char* name, const char* cat, int pid, double dur) {
    return json{{"ph", "X"}, {"name", name}, {"cat", cat}, {"pid", pid},
                {"tid", 0},  {"ts", 0},      {"dur", dur}, {"args", {{"op", op}}}};
  };
  return {{"traceEvents",
           {x(0, "send kv0 -> 1 #0", "send", 0, send_us), x(1, "recv kv0 <- 0 #0", "recv", 1, recv_us),
            x(2, compute_name, "compute", 1, compute_us), json{{"ph", "M"}, {"name", "process_name"}}}},
          {"otherData", {{"makespan_ms", (std::max(send_us, recv_us) + compute_us) / 1e3}}}};
}

TEST(RunSummary, UnionLength) {
  // [0,2) u [1,3) u [5,6) = [0,3) u [5,6): 3 + 1 = 4; empty and reversed intervals count 0.
  EXPECT_DOUBLE_EQ(union_length({{1, 3}, {0, 2}, {5, 6}, {7, 7}, {9, 8}}), 4.0);
  EXPECT_DOUBLE_EQ(union_length({}), 0.0);
}

TEST(RunSummary, ExposedCommIsCommOutsideCompute) {
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
  Timeline t = Timeline::zeros(p);
  t.start_s = {0, 1, 1, 4};
  t.end_s = {2, 4, 4, 5};
  const auto s = summarize(p, t);
  // Makespan 5. Rank 0: busy 2, comm [1,4) outside [0,2) = 2, idle 3.
  // Rank 1 (finishes last): busy 1, comm [1,4) fully exposed = 3, idle 4. Comm busy 3 on each.
  EXPECT_DOUBLE_EQ(s.time_s, 5.0);
  EXPECT_EQ(s.last_rank, 1);
  EXPECT_DOUBLE_EQ(s.exposed_comm_s, 3.0);
  EXPECT_DOUBLE_EQ(s.exposed_comm_mean_s, 2.5);
  EXPECT_DOUBLE_EQ(s.exposed_comm_max_s, 3.0);
  EXPECT_DOUBLE_EQ(s.compute_busy_mean_s, 1.5);
  EXPECT_DOUBLE_EQ(s.comm_busy_mean_s, 3.0);
  EXPECT_DOUBLE_EQ(s.idle_mean_s, 3.5);
  EXPECT_DOUBLE_EQ(s.idle_max_s, 4.0);
  EXPECT_DOUBLE_EQ(s.stream_busy_mean_s[int(ir::Stream::Kv)], 3.0);
  const auto j = summary_json(s);
  EXPECT_DOUBLE_EQ(j["exposed_comm_ms"].get<double>(), 3000.0);
  EXPECT_DOUBLE_EQ(j["idle_ms"]["max"].get<double>(), 4000.0);
  EXPECT_DOUBLE_EQ(j["stream_busy_ms"]["kv"].get<double>(), 3000.0);
}

TEST(RunSummary, UnmeasuredOpsAreIgnored) {
  ir::Plan p;
  p.ranks = 1;
  ir::Op op;
  (void)p.add_op(op, {});
  (void)p.add_op(op, {});
  Timeline t = Timeline::zeros(p);
  t.start_s = {0.0, std::nan("")};
  t.end_s = {1.0, std::nan("")};
  const auto s = summarize(p, t);
  EXPECT_DOUBLE_EQ(s.time_s, 1.0);
  EXPECT_DOUBLE_EQ(s.compute_busy_mean_s, 1.0);
}

TEST(TraceDiff, AlignsOpsAndSumsByKind) {
  // Predicted: transfer 1 ms, compute 2 ms. Measured: transfer 3 ms (3x), compute 2.5 ms.
  const auto d = charm::trace::diff_traces(three_ops(1000, 1000, 2000), three_ops(3000, 3000, 2500), "p", "m");
  ASSERT_TRUE(d) << d.error().message();
  EXPECT_DOUBLE_EQ(d->predicted_makespan_ms, 3.0);
  EXPECT_DOUBLE_EQ(d->measured_makespan_ms, 5.5);
  ASSERT_EQ(d->ops.size(), 3u);
  // Furthest from the prediction first: the transfer's two sides (2 ms off), then the compute (0.5 ms).
  EXPECT_EQ(d->ops[2].kind, "compute");
  EXPECT_DOUBLE_EQ(d->ops[2].measured_ms - d->ops[2].predicted_ms, 0.5);
  ASSERT_EQ(d->kinds.size(), 3u);
  EXPECT_EQ(d->kinds.back().kind, "compute");
  EXPECT_DOUBLE_EQ(d->kinds.front().measured_ms, 3.0);
}

TEST(TraceDiff, TracesOfDifferentPlansAreRefused) {
  auto d = charm::trace::diff_traces(three_ops(1, 1, 1), three_ops(1, 1, 1, "fwd Q1*KV0 full"), "p", "m");
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().message().find("op 2 is 'fwd Q1*KV0 full' here and 'fwd Q0*KV0 full' in p"), std::string::npos)
      << d.error().message();
  d = charm::trace::diff_traces(three_ops(1, 1, 1), json{{"ops", json::array()}}, "p", "plan.json");
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().where, "plan.json");
}

TEST(TraceDiff, AFieldOfTheWrongTypeNamesTheFileAndThePath) {
  // Every field diff_traces reads, given a type it cannot be: one error naming the file and
  // the JSON path, never nlohmann's type_error.
  struct Case {
    const char* pointer;
    json value;
    const char* path;
  };
  const std::vector<Case> cases{{"/traceEvents/1/ph", 1, "traceEvents[1].ph"},
                                {"/traceEvents/1/name", 5, "traceEvents[1].name"},
                                {"/traceEvents/1/cat", true, "traceEvents[1].cat"},
                                {"/traceEvents/1/pid", "x", "traceEvents[1].pid"},
                                {"/traceEvents/1/dur", json::array(), "traceEvents[1].dur"},
                                {"/traceEvents/1/args/op", 1.5, "traceEvents[1].args.op"},
                                {"/traceEvents/1/args/op", -1, "traceEvents[1].args.op"},
                                {"/otherData/makespan_ms", "x", "otherData.makespan_ms"}};
  for (const auto& c : cases) {
    json bad = three_ops(1, 1, 1);
    bad[json::json_pointer(c.pointer)] = c.value;
    const auto d = charm::trace::diff_traces(three_ops(1, 1, 1), bad, "p.json", "m.json");
    ASSERT_FALSE(d) << c.pointer;
    EXPECT_EQ(d.error().where, "m.json") << c.pointer;
    EXPECT_EQ(d.error().what.rfind(std::string(c.path) + ": must be", 0), 0u) << d.error().what;
  }
  json no_makespan = three_ops(1, 1, 1);
  no_makespan.erase("otherData");
  no_makespan["traceEvents"][0]["ts"] = "0";
  const auto d = charm::trace::diff_traces(three_ops(1, 1, 1), no_makespan, "p.json", "m.json");
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().message(), "m.json: traceEvents[0].ts: must be a number, got string");
}

}  // namespace
