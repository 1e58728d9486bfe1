// Exact simulated times on tiny hand-built plans and topologies.
// Every expected value is worked out in the comment next to it.
#include <gtest/gtest.h>

#include <cmath>

#include "sim/explain.hpp"
#include "sim/fair_share_network.hpp"
#include "sim/simulator.hpp"
#include "topologies/topology_json.hpp"

namespace charm::sim {
namespace {

using namespace charm::ir;

constexpr double kTol = 1e-12;

/// A topology from JSON text (the tests' topologies are written out in full).
topo::Topology topo_of(const std::string& text) {
  auto t = topo::parse_topology_text(text, "test");
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message());
  return std::move(t).value();
}

/// 3 GPUs on one switch; GPU links of 10 GB/s (1e10 B/s), `sharing`, no latency unless given.
std::string star(const char* sharing, double latency_us = 0) {
  return std::string(R"({"stack": "none", "gpu": {"tflops": 1}, "gpus": 3, "switches": ["sw"], "links": [)") +
         R"({"a": "gpu0", "b": "sw", "bandwidth_gbps": 10, "sharing": ")" + sharing + R"(", "latency_us": )" +
         std::to_string(latency_us) + "}," + R"({"a": "gpu1", "b": "sw", "bandwidth_gbps": 10, "sharing": ")" +
         sharing + R"("},)" + R"({"a": "gpu2", "b": "sw", "bandwidth_gbps": 10, "sharing": ")" + sharing + R"("}]})";
}

Plan empty_plan(int ranks) {
  Plan p;
  p.algo = "test";
  p.ranks = ranks;
  p.results().assign(std::size_t(ranks), RankResults{});
  return p;
}

/// A send (or receive) on `rank` to (or from) `peer`.
OpId comm(Plan& p, OpKind kind, int rank, int peer, Bytes bytes, Stream s, int tag, std::vector<OpId> deps) {
  Op o;
  o.rank = rank;
  o.stream = s;
  o.kind = kind;
  o.peer = peer;
  o.tag = tag;
  o.bytes = bytes;
  return p.add_op(o, deps);
}
OpId send(Plan& p, int from, int to, Bytes bytes, Stream s = Stream::Kv, int tag = 0, std::vector<OpId> deps = {}) {
  return comm(p, OpKind::Send, from, to, bytes, s, tag, std::move(deps));
}
OpId recv(Plan& p, int at, int from, Bytes bytes, Stream s = Stream::Kv, int tag = 0, std::vector<OpId> deps = {}) {
  return comm(p, OpKind::Recv, at, from, bytes, s, tag, std::move(deps));
}
OpId compute(Plan& p, int rank, Flops flops, std::vector<OpId> deps = {}) {
  Op o;
  o.rank = rank;
  o.stream = Stream::Compute;
  o.kind = OpKind::Compute;
  o.flops = flops;
  return p.add_op(o, deps);
}

/// A transfer of `bytes` from `from` to `to` on stream s: its send, then its receive.
void transfer(Plan& p, int from, int to, Bytes bytes, Stream s = Stream::Kv) {
  send(p, from, to, bytes, s);
  recv(p, to, from, bytes, s);
}

ComputeModel tflops1() {
  ComputeModel m;
  m.peak_flops = 1e12;
  return m;
}

/// The makespan of p on t at 1 TFLOP/s (NaN, with a failure, where the simulation fails).
double makespan(const Plan& p, const charm::topo::Topology& t) {
  auto r = simulate(p, t, tflops1());
  if (!r) {
    ADD_FAILURE() << r.error().message();
    return std::nan("");
  }
  return r->makespan_s;
}

TEST(SimEngine, OneFlow) {
  // 1 GB from gpu0 to gpu1 over gpu0->sw->gpu1, both 10 GB/s: 1e9 / 1e10 = 0.1 s,
  // plus 4 us of latency on gpu0's link: 0.100004 s.
  auto t = topo_of(star("shared", 4));
  Plan p = empty_plan(2);
  transfer(p, 0, 1, 1'000'000'000);
  auto r = simulate(p, t, tflops1());
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_NEAR(r->makespan_s, 0.100004, kTol);
  EXPECT_NEAR(r->ranks[0].exposed_comm_s, 0.100004, kTol);  // compute idle all along while the send is outstanding
}

/// star() with a stack of its own in place of the ideal one.
std::string star_with_stack(const std::string& stack) {
  std::string s = star("shared");
  s.replace(s.find(R"("stack": "none")"), 15, R"("stack": )" + stack);
  return s;
}

TEST(SimEngine, EveryMessagePaysTheStacksMessageCost) {
  // OneFlow's 0.1 s of bytes and no latency, plus message_us 30: 0.10003 s.
  auto t = topo_of(star_with_stack(R"({"preset": "none", "message_us": 30})"));
  Plan p = empty_plan(2);
  transfer(p, 0, 1, 1'000'000'000);
  EXPECT_NEAR(makespan(p, t), 0.10003, kTol);
}

TEST(SimEngine, TheHostThreadIssuesEveryOpInProgramOrder) {
  // host_us 1000: rank 0's host issues its ops at 1, 2 and 3 ms, in the plan's order.
  // Op 0, a 10 ms block (1e10 FLOP at 1 TFLOP/s), is issued at 1 ms and ends at 11 ms.
  // Op 1, a 0.1 s send, is issued at 2 ms on its own stream; rank 1's receive (its host's first op)
  // at 1 ms, so the flow runs from 2 to 102 ms. Op 2, a 1 ms block behind op 0 on the compute
  // stream, is issued by the host at 3 ms but waits for the stream: 11 to 12 ms. The host never
  // waits for the GPU, so nothing later slips: the makespan is the send's 102 ms.
  auto t = topo_of(star_with_stack(R"({"preset": "none", "host_us": 1000})"));
  Plan p = empty_plan(2);
  const OpId c0 = compute(p, 0, 1e10);
  const OpId s = send(p, 0, 1, 1'000'000'000);
  const OpId c1 = compute(p, 0, 1e9);
  recv(p, 1, 0, 1'000'000'000);
  auto r = simulate(p, t, tflops1());
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_NEAR(r->start_s[std::size_t(c0)], 0.001, kTol);
  EXPECT_NEAR(r->end_s[std::size_t(c0)], 0.011, kTol);
  EXPECT_NEAR(r->start_s[std::size_t(s)], 0.002, kTol);
  EXPECT_NEAR(r->end_s[std::size_t(s)], 0.102, kTol);
  EXPECT_NEAR(r->start_s[std::size_t(c1)], 0.011, kTol);
  EXPECT_NEAR(r->end_s[std::size_t(c1)], 0.012, kTol);
  EXPECT_NEAR(r->makespan_s, 0.102, kTol);
  // Where the host is the bottleneck, the GPU waits for it: 40 blocks of 0.1 ms (1e8 FLOP) issued
  // every 1 ms end 0.1 ms after the last is issued, at 40.1 ms instead of 4 ms.
  Plan q = empty_plan(1);
  for (int k = 0; k < 40; ++k) compute(q, 0, 1e8);
  auto h = simulate(q, t, tflops1());
  ASSERT_TRUE(h.ok()) << h.error().message();
  EXPECT_NEAR(h->makespan_s, 0.0401, kTol);
  // Its critical path is every block: 4 ms of compute, and 36.1 ms of waiting for the host (1 ms
  // before the first block, 0.9 ms before each of the other 39).
  const Explanation e = explain(q, *h, t);
  ASSERT_EQ(e.path.size(), 2u);
  EXPECT_EQ(e.path[0].what, "host");
  EXPECT_NEAR(e.path[0].seconds, 0.0361, 1e-9);
  EXPECT_EQ(e.path[1].what, "compute");
  EXPECT_NEAR(e.path[1].seconds, 0.004, 1e-9);
  // The ideal stack has no host cost: 40 x 0.1 ms back to back.
  auto ideal = simulate(q, topo_of(star("shared")), tflops1());
  ASSERT_TRUE(ideal.ok());
  EXPECT_NEAR(ideal->makespan_s, 0.004, kTol);
}

TEST(SimEngine, OverlapSlowsBothSides) {
  // Rank 0 computes 10 ms of work while it sends 50 MB (5 ms at 10 GB/s); compute_slowdown 1 and
  // comm_slowdown 1: while both run, each goes at half its rate. The flow attains 5 GB/s and drains at
  // 10 ms; by then the block has done 5 ms of its work and finishes the other 5 ms alone: 15 ms.
  auto t = topo_of(star_with_stack(R"({"preset": "none", "compute_slowdown": 1, "comm_slowdown": 1})"));
  Plan p = empty_plan(2);
  const OpId c = compute(p, 0, 1e10);
  const OpId s = send(p, 0, 1, 50'000'000);
  recv(p, 1, 0, 50'000'000);
  auto r = simulate(p, t, tflops1());
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_NEAR(r->end_s[std::size_t(s)], 0.010, kTol);
  EXPECT_NEAR(r->end_s[std::size_t(c)], 0.015, kTol);
  // What a profiler shows in that run: rank 0's compute kernel busy 15 ms, its send 10 ms;
  // rank 1's receive is outstanding the same 10 ms and it computes nothing.
  EXPECT_NEAR(r->ranks[0].compute_busy_s, 0.015, kTol);
  EXPECT_NEAR(r->ranks[0].comm_busy_s, 0.010, kTol);
  EXPECT_NEAR(r->ranks[1].comm_busy_s, 0.010, kTol);
  EXPECT_NEAR(r->ranks[1].compute_busy_s, 0.0, kTol);
  // Alone, each takes its own time: the options charge one side only (the paper's T_comp and T_comm).
  auto only_compute = simulate(p, t, tflops1(), {.compute = true, .comm = false});
  ASSERT_TRUE(only_compute.ok());
  EXPECT_NEAR(only_compute->makespan_s, 0.010, kTol);
  auto only_comm = simulate(p, t, tflops1(), {.compute = false, .comm = true});
  ASSERT_TRUE(only_comm.ok());
  EXPECT_NEAR(only_comm->makespan_s, 0.005, kTol);
  // Without the stack's overlap costs the two simply overlap: 10 ms.
  auto free = simulate(p, topo_of(star("shared")), tflops1());
  ASSERT_TRUE(free.ok());
  EXPECT_NEAR(free->makespan_s, 0.010, kTol);
}

TEST(SimEngine, TwoFlowsOnASharedLinkTakeTwiceAsLong) {
  // gpu0 sends 1 GB to gpu1 and 1 GB to gpu2 at once (two streams). Both
  // cross gpu0->sw (shared, 10 GB/s): 5 GB/s each, 1e9 / 5e9 = 0.2 s.
  auto t = topo_of(star("shared"));
  Plan p = empty_plan(3);
  transfer(p, 0, 1, 1'000'000'000, Stream::Kv);
  transfer(p, 0, 2, 1'000'000'000, Stream::Q);
  auto r = simulate(p, t, tflops1());
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_NEAR(r->makespan_s, 0.2, kTol);
  EXPECT_NEAR(r->channels[0].bytes, 2e9, 1);  // channel 0 = gpu0->sw carried both
}

TEST(SimEngine, MaxMinReSharesWhenAFlowEnds) {
  // As above but 0.5 GB to gpu2: both at 5 GB/s until the small one ends at
  // 0.5e9 / 5e9 = 0.1 s; the big one has 0.5 GB left at the full 10 GB/s:
  // 0.05 s more, 0.15 s in all.
  auto t = topo_of(star("shared"));
  Plan p = empty_plan(3);
  const OpId big = send(p, 0, 1, 1'000'000'000, Stream::Kv);
  const OpId small = send(p, 0, 2, 500'000'000, Stream::Q);
  recv(p, 1, 0, 1'000'000'000, Stream::Kv);
  recv(p, 2, 0, 500'000'000, Stream::Q);
  auto r = simulate(p, t, tflops1());
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->end_s[std::size_t(small)], 0.1, kTol);
  EXPECT_NEAR(r->end_s[std::size_t(big)], 0.15, kTol);
}

TEST(SimEngine, TwoFlowsOnDedicatedLinksDoNotSlowEachOther) {
  // The same two flows on dedicated links: each gets 10 GB/s, 0.1 s.
  auto t = topo_of(star("dedicated"));
  Plan p = empty_plan(3);
  transfer(p, 0, 1, 1'000'000'000, Stream::Kv);
  transfer(p, 0, 2, 1'000'000'000, Stream::Q);
  auto r = simulate(p, t, tflops1());
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->makespan_s, 0.1, kTol);
}

/// 3 GPUs on one switch with 10 GB/s links whose lone flows reach only `per_flow` GB/s.
std::string capped_star(const char* sharing, double per_flow) {
  std::string links;
  for (int g = 0; g < 3; ++g)
    links += std::string(g ? "," : "") + R"({"a": "gpu)" + std::to_string(g) +
             R"(", "b": "sw", "bandwidth_gbps": 10, "sharing": ")" + sharing + R"(", "per_flow_gbps": )" +
             std::to_string(per_flow) + "}";
  return std::string(R"({"stack": "none", "gpu": {"tflops": 1}, "gpus": 3, "switches": ["sw"], "links": [)") + links +
         "]}";
}

TEST(SimEngine, PerFlowCapLimitsALoneFlow) {
  // One 1 GB flow on 10 GB/s links that a lone flow drives at 4 GB/s: 1e9 / 4e9 = 0.25 s.
  auto t = topo_of(capped_star("shared", 4));
  Plan p = empty_plan(2);
  transfer(p, 0, 1, 1'000'000'000);
  EXPECT_NEAR(makespan(p, t), 0.25, kTol);
}

TEST(SimEngine, PerFlowCapLeavesRoomForConcurrentFlows) {
  // gpu0 sends 1 GB to gpu1 and 1 GB to gpu2 at once over its shared 10 GB/s
  // link, each flow capped at 4 GB/s: 4 + 4 = 8 <= 10, so neither slows the
  // other: 0.25 s. With a cap of 6 GB/s the link binds first: 5 GB/s each,
  // 1e9 / 5e9 = 0.2 s.
  for (auto [cap, want] : {std::pair{4.0, 0.25}, std::pair{6.0, 0.2}}) {
    auto t = topo_of(capped_star("shared", cap));
    Plan p = empty_plan(3);
    transfer(p, 0, 1, 1'000'000'000, Stream::Kv);
    transfer(p, 0, 2, 1'000'000'000, Stream::Q);
    EXPECT_NEAR(makespan(p, t), want, kTol) << "cap " << cap;
  }
}

TEST(SimEngine, PerFlowCapOnADedicatedLink) {
  // Dedicated links give each flow the full rate up to the cap: two flows of
  // 1 GB from gpu0 at 4 GB/s each, 0.25 s (not 0.1 s as uncapped).
  auto t = topo_of(capped_star("dedicated", 4));
  Plan p = empty_plan(3);
  transfer(p, 0, 1, 1'000'000'000, Stream::Kv);
  transfer(p, 0, 2, 1'000'000'000, Stream::Q);
  EXPECT_NEAR(makespan(p, t), 0.25, kTol);
}

TEST(SimEngine, InjectionLimitIsSharedByAGpusFlows) {
  // Dedicated 10 GB/s links (each flow alone gets 10) with a 6 GB/s injection
  // limit: gpu0's two 1 GB flows share 6 GB/s, 3 each: 1e9 / 3e9 = 1/3 s.
  // A lone flow gets the 6: 1e9 / 6e9 = 1/6 s.
  std::string links;
  for (int g = 0; g < 3; ++g)
    links += std::string(g ? "," : "") + R"({"a": "gpu)" + std::to_string(g) +
             R"(", "b": "sw", "bandwidth_gbps": 10, "sharing": "dedicated", "injection_gbps": 6})";
  auto t = topo_of(std::string(R"({"stack": "none", "gpu": {"tflops": 1}, "gpus": 3, "switches": ["sw"], "links": [)") +
                   links + "]}");
  Plan two = empty_plan(3);
  transfer(two, 0, 1, 1'000'000'000, Stream::Kv);
  transfer(two, 0, 2, 1'000'000'000, Stream::Q);
  EXPECT_NEAR(makespan(two, t), 1.0 / 3.0, kTol);
  Plan one = empty_plan(2);
  transfer(one, 0, 1, 1'000'000'000);
  EXPECT_NEAR(makespan(one, t), 1.0 / 6.0, kTol);
}

TEST(SimEngine, PerFlowCapAboveTheLinkLeavesTheLinkRate) {
  // A cap of 12 GB/s on 10 GB/s links: the link binds, 1e9 / 1e10 = 0.1 s.
  auto t = topo_of(capped_star("shared", 12));
  Plan p = empty_plan(2);
  transfer(p, 0, 1, 1'000'000'000);
  EXPECT_NEAR(makespan(p, t), 0.1, kTol);
}

TEST(SimEngine, RouteOverTwoHopsTakesTheNarrowestLinkAndBothLatencies) {
  // gpu0 -(20 GB/s, 1 us)- swA -(8 GB/s, 2 us)- gpu1: a lone flow runs at
  // min(20, 8) = 8 GB/s: 0.8 GB / 8e9 = 0.1 s, plus 1 + 2 us = 0.100003 s.
  auto t = topo_of(R"({"stack": "none", "gpu": {"tflops": 1}, "gpus": 2, "switches": ["swA"], "links": [
      {"a": "gpu0", "b": "swA", "bandwidth_gbps": 20, "latency_us": 1, "sharing": "shared"},
      {"a": "swA", "b": "gpu1", "bandwidth_gbps": 8, "latency_us": 2, "sharing": "shared"}]})");
  ASSERT_EQ(t.route(0, 1).size(), 2u);
  Plan p = empty_plan(2);
  transfer(p, 0, 1, 800'000'000);
  auto r = simulate(p, t, tflops1());
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->makespan_s, 0.100003, kTol);
}

TEST(SimEngine, ComputeAndCommunicationOverlapOnDifferentStreams) {
  // Rank 0 computes 0.3 TFLOP (0.3 s at 1 TFLOP/s) while it sends 1 GB to
  // rank 1 (0.1 s); rank 1 then computes 0.2 TFLOP on what it received
  // (0.1 + 0.2 = 0.3 s). Makespan max(0.3, 0.3) = 0.3 s, nothing exposed on
  // rank 0; on rank 1 the 0.1 s wait for the receive is exposed.
  auto t = topo_of(star("shared"));
  Plan p = empty_plan(2);
  compute(p, 0, 0.3e12);
  send(p, 0, 1, 1'000'000'000);
  const OpId rv = recv(p, 1, 0, 1'000'000'000);
  compute(p, 1, 0.2e12, {rv});
  auto r = simulate(p, t, tflops1());
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->makespan_s, 0.3, kTol);
  EXPECT_NEAR(r->ranks[0].exposed_comm_s, 0.0, kTol);
  EXPECT_NEAR(r->ranks[1].exposed_comm_s, 0.1, kTol);
  EXPECT_NEAR(r->ranks[0].compute_busy_s, 0.3, kTol);
  EXPECT_NEAR(r->ranks[1].idle_s, 0.1, kTol);
}

/// 2 nodes x 4 GPUs, NVSwitch inside; each NIC (50 GB/s port) serves two GPUs over PCIe.
std::string shared_nics(double pcie_gbps) {
  return R"({"stack": "none", "gpu": {"tflops": 1}, "nodes": 2, "gpus_per_node": 4, "intra": {"bandwidth_gbps": 300, "sharing": "dedicated"},
            "inter": {"bandwidth_gbps": 50, "sharing": "shared", "gpus_per_nic": 2, "pcie_gbps": )" +
         std::to_string(pcie_gbps) + "}}";
}

TEST(SimEngine, TwoGpusOfOneNicShareItsPort) {
  // gpu0 and gpu1 share n0.nic0: two 1 GB flows to the other node split its 50 GB/s port,
  // 1e9 / 25e9 = 0.04 s. gpu0 and gpu2 use different NICs: 1e9 / 50e9 = 0.02 s.
  auto t = topo_of(shared_nics(64));
  for (auto [other, expect] : {std::pair{1, 0.04}, std::pair{2, 0.02}}) {
    Plan p = empty_plan(8);
    send(p, 0, 4, 1'000'000'000, Stream::Kv);
    send(p, other, 4 + other, 1'000'000'000, Stream::Kv);
    recv(p, 4, 0, 1'000'000'000, Stream::Kv);
    recv(p, 4 + other, other, 1'000'000'000, Stream::Kv);
    EXPECT_NEAR(makespan(p, t), expect, kTol) << "gpu0 and gpu" << other;
  }
}

TEST(SimEngine, ThePcieHopToTheNicCanBeTheNarrowest) {
  // PCIe at 20 GB/s below the 50 GB/s port: a lone 1 GB flow takes 1e9 / 20e9 = 0.05 s.
  auto t = topo_of(shared_nics(20));
  Plan p = empty_plan(8);
  transfer(p, 0, 4, 1'000'000'000);
  EXPECT_NEAR(makespan(p, t), 0.05, kTol);
}

TEST(SimEngine, RendezvousWaitsForTheLaterSide) {
  // The receive is issued only after rank 1 computes 0.5 s (stream order on
  // a shared stream is not involved: the recv depends on the compute). The
  // flow starts at 0.5 s and ends at 0.6 s; the send waited, so its issue
  // time is 0 and its transfer starts at 0.5 s.
  auto t = topo_of(star("shared"));
  Plan p = empty_plan(2);
  const OpId s = send(p, 0, 1, 1'000'000'000);
  const OpId c = compute(p, 1, 0.5e12);
  recv(p, 1, 0, 1'000'000'000, Stream::Kv, 0, {c});
  auto r = simulate(p, t, tflops1());
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->makespan_s, 0.6, kTol);
  EXPECT_NEAR(r->start_s[std::size_t(s)], 0.0, kTol);
  EXPECT_NEAR(flow_start_times(p, *r)[std::size_t(s)], 0.5, kTol);
  // Critical path: the compute, then the receive (the send waited on it).
  ASSERT_GE(r->critical_path.size(), 2u);
  EXPECT_EQ(r->critical_path.front(), c);
}

TEST(SimEngine, GroupedOpsIssueTogetherAndTheStreamWaitsForAll) {
  // Rank 0 posts, as one group on its kv stream, a 1 GB send to rank 1 and a
  // 0.5 GB receive from rank 2 (dedicated links, 10 GB/s): 0.1 s and 0.05 s,
  // concurrently. Its next kv op (a 0.2 GB send to rank 2) starts once both
  // are done, at 0.1 s, and ends 0.02 s later: 0.12 s.
  auto t = topo_of(star("dedicated"));
  Plan p = empty_plan(3);
  Op a;
  a.rank = 0;
  a.stream = Stream::Kv;
  a.kind = OpKind::Send;
  a.peer = 1;
  a.tag = 0;
  a.group = 7;
  a.bytes = 1'000'000'000;
  p.add_op(a, {});
  Op b = a;
  b.kind = OpKind::Recv;
  b.peer = 2;
  b.bytes = 500'000'000;
  p.add_op(b, {});
  recv(p, 1, 0, 1'000'000'000);
  send(p, 2, 0, 500'000'000);
  const OpId last = send(p, 0, 2, 200'000'000, Stream::Kv, 0);
  recv(p, 2, 0, 200'000'000, Stream::Kv, 0);
  auto r = simulate(p, t, tflops1());
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_NEAR(r->start_s[std::size_t(last)], 0.1, kTol);
  EXPECT_NEAR(r->makespan_s, 0.12, kTol);
}

TEST(SimEngine, DeadlockIsReportedNotHung) {
  // Both ranks receive first on the same stream, then send: neither send is
  // ever issued.
  auto t = topo_of(star("shared"));
  Plan p = empty_plan(2);
  recv(p, 0, 1, 100);
  transfer(p, 0, 1, 100);
  send(p, 1, 0, 100);
  auto r = simulate(p, t, tflops1());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("deadlock"), std::string::npos);
}

TEST(FairShareNetwork, ThreeFlowsMaxMin) {
  // Channels: A (shared, 10), B (shared, 4). Flows: f1 on A, f2 on A+B, f3 on B.
  // B splits 2/2 between f2 and f3; f1 takes the rest of A: 10 - 2 = 8.
  FairShareNetwork net({{10, true}, {4, true}});
  const std::int32_t a[] = {0}, ab[] = {0, 1}, b[] = {1};
  const topo::Route rA(a), rAB(ab), rB(b);
  const int f1 = net.add_flow(rA, 100, 0), f2 = net.add_flow(rAB, 100, 0), f3 = net.add_flow(rB, 100, 0);
  net.resolve(0, [](int) {});
  EXPECT_DOUBLE_EQ(net.rate(f1), 8);
  EXPECT_DOUBLE_EQ(net.rate(f2), 2);
  EXPECT_DOUBLE_EQ(net.rate(f3), 2);
}

TEST(FairShareNetwork, SolveEndsWhateverTheCapacities) {
  // Progressive filling must freeze a flow every round. An infinite capacity (what
  // 1e300 GB/s becomes in bytes/s), or capacities so far apart that the level rises
  // by less than one ulp, once left every flow short of its test and the loop spun.
  const double inf = FairShareNetwork::kInf;
  FairShareNetwork net({{inf, true}, {1e300, true}, {1e-300, true}, {inf, false}});
  const std::int32_t c0[] = {0}, c1[] = {1}, c12[] = {1, 2}, c3[] = {3};
  const topo::Route r0(c0), r1(c1), r12(c12), r3(c3);
  const int a = net.add_flow(r0, 100, 0), b = net.add_flow(r1, 100, 0), c = net.add_flow(r12, 100, 0),
            d = net.add_flow(r3, 100, 0);
  net.resolve(0, [](int) {});
  for (int f : {a, b, c, d}) EXPECT_FALSE(std::isnan(net.rate(f))) << f;
  EXPECT_DOUBLE_EQ(net.rate(c), 1e-300);  // the narrow channel still binds its flow
}

TEST(SimEngine, SeveralSimulationsInOneProcess) {
  // No global state: two engines with different topologies interleave freely.
  auto t1 = topo_of(star("shared")), t2 = topo_of(star("dedicated"));
  Plan p = empty_plan(3);
  transfer(p, 0, 1, 1'000'000'000, Stream::Kv);
  transfer(p, 0, 2, 1'000'000'000, Stream::Q);
  auto a = simulate(p, t1, tflops1());
  auto b = simulate(p, t2, tflops1());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NEAR(a->makespan_s, 0.2, kTol);
  EXPECT_NEAR(b->makespan_s, 0.1, kTol);
}

}  // namespace
}  // namespace charm::sim
