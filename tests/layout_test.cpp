// Deployments: every CP group of a CP x TP x DP layout simulated at once, on the GPUs the layout
// gives it; groups that share a link slow each other, groups that share none do not, and a class
// of whole groups simulated alone gives every figure of the whole cluster.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "scheduler/planners/layout.hpp"
#include "scheduler/planners/planned_run.hpp"
#include "scheduler/planners/planners.hpp"
#include "sim/advise.hpp"
#include "sim/evaluate.hpp"
#include "sim/simulate_request.hpp"
#include "sim/simulator.hpp"
#include "topologies/topology_json.hpp"

namespace charm::sched {
namespace {

/// h100-4x8 as calibrated; with nics_per_node 4, two GPUs (2i, 2i+1) share each NIC.
topo::Topology h100_4x8(int gpus_per_nic) {
  auto j = topo::read_topology_json(std::string(CHARM_SOURCE_DIR) + "/topologies/h100-4x8.json");
  EXPECT_TRUE(j.ok());
  if (gpus_per_nic > 1) {
    (*j)["inter"].erase("nic");
    (*j)["inter"]["gpus_per_nic"] = gpus_per_nic;
  }
  auto t = topo::parse_topology(*j, "h100-4x8.json");
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message());
  return std::move(t).value();
}

ir::Plan group_plan(const std::string& algo, int cp, int domains) {
  ir::Workload w;
  w.batch = 4;
  w.seq = 16384;
  w.heads = 6;  // 12 heads over TP 2
  w.kv_heads = 6;
  w.head_dim = 128;
  auto p = make_plan(sched::normalised({algo, w, cp, domains}), {});
  EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error().message());
  return std::move(p).value();
}

sim::SimResult simulate(const ir::Plan& p, const topo::Topology& t) {
  auto r = sim::simulate(p, t, sim::compute_model_for(t, p.workload));
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message());
  return r.ok() ? std::move(r).value() : sim::SimResult{};
}

TEST(Layout, NumbersGpusInnermostAxisFirst) {
  const Layout tp_inner = *make_layout(32, 16, 2, LayoutOrder::TpInner);
  EXPECT_EQ(tp_inner.dp, 1);
  EXPECT_EQ(layout_gpu(tp_inner, 0, 3), 6);                              // CP rank 3 of TP rank 0
  EXPECT_EQ(layout_gpu(tp_inner, 1, 3), 7);                              // its TP peer next to it
  const Layout cp_inner = *make_layout(32, 8, 2, LayoutOrder::CpInner);  // DP 2
  EXPECT_EQ(layout_gpu(cp_inner, 1, 3), 11);                             // group 1 = TP rank 1 of replica 0: GPUs 8-15
  EXPECT_EQ(layout_gpu(cp_inner, 2, 0), 16);                             // replica 1
  // The rotation each layout is invariant under: none where TP peers interleave the only replica's
  // groups; a group where they are consecutive; a replica (CP x TP) otherwise.
  EXPECT_EQ(layout_block(layout_gpus(tp_inner), 16), 32);
  EXPECT_EQ(layout_block(layout_gpus(*make_layout(32, 16, 2, LayoutOrder::CpInner)), 16), 16);
  EXPECT_EQ(layout_block(layout_gpus(*make_layout(32, 8, 2, LayoutOrder::TpInner)), 8), 16);
}

TEST(Layout, RefusesSizesThatDoNotTileTheGpus) {
  EXPECT_EQ(make_layout(32, 5, 2, LayoutOrder::TpInner).error().message(),
            "--cp: CP 5 x TP 2 = 10 does not divide the topology's 32 GPUs");
  EXPECT_EQ(make_layout(32, 0, 2, LayoutOrder::TpInner).error().message(), "--cp: must be at least 1, got 0");
  EXPECT_FALSE(parse_layout_order("dp-cp").ok());
}

TEST(Layout, GroupsSlowEachOtherOnlyOnLinksTheyShare) {
  // CP 16 x TP 2 on 4 x 8 H100, TP peers adjacent: group 0 on the even GPUs, group 1 on the odd.
  const Layout l = *make_layout(32, 16, 2, LayoutOrder::TpInner);
  const ir::Plan group = group_plan("charm", 16, 4);
  const ir::Plan both = place_groups(group, l, 2);
  ir::Plan alone = group;  // group 0 on the same GPUs, the odd ones idle
  alone.gpus.assign(both.gpus.begin(), both.gpus.begin() + 16);
  for (const int gpus_per_nic : {1, 2}) {
    SCOPED_TRACE(gpus_per_nic);
    const topo::Topology t = h100_4x8(gpus_per_nic);
    const sim::SimResult a = simulate(alone, t), b = simulate(both, t);
    if (gpus_per_nic == 1) {
      // A NIC per GPU and a non-blocking NVSwitch: the groups share no link, and run as fast as one.
      EXPECT_EQ(b.makespan_s, a.makespan_s);
    } else {
      // TP peers share a NIC: each group's cross-node traffic gets half of it while the other's flows.
      EXPECT_GT(b.makespan_s, 1.05 * a.makespan_s);
    }
  }
}

TEST(Layout, AClassOfWholeGroupsStandsForTheCluster) {
  // CP 8 x TP 2 x DP 2: each replica (16 GPUs, 2 nodes) is a copy of the other.
  const Layout l = *make_layout(32, 8, 2, LayoutOrder::TpInner);
  const ir::Plan group = group_plan("charm", 8, 2);
  const topo::Topology t = h100_4x8(2);
  const ir::Plan full = place_groups(group, l, 4), quotient = place_groups(group, l, 2);
  ASSERT_TRUE(quotient.symmetry.active());
  EXPECT_EQ(quotient.size() * 2, full.size());
  const sim::SimResult f = simulate(full, t), q = simulate(quotient, t);
  EXPECT_EQ(q.makespan_s, f.makespan_s);
  ASSERT_EQ(q.ranks.size(), f.ranks.size());
  for (std::size_t r = 0; r < f.ranks.size(); ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(q.ranks[r].end_s, f.ranks[r].end_s);
    EXPECT_EQ(q.ranks[r].exposed_comm_s, f.ranks[r].exposed_comm_s);
    EXPECT_EQ(q.ranks[r].comm_busy_s, f.ranks[r].comm_busy_s);
    EXPECT_EQ(q.ranks[r].peak_mem_bytes, f.ranks[r].peak_mem_bytes);
  }
  for (std::size_t c = 0; c < f.channels.size(); ++c) {
    SCOPED_TRACE(c);
    EXPECT_EQ(q.channels[c].bytes, f.channels[c].bytes);
    EXPECT_EQ(q.channels[c].busy_s, f.channels[c].busy_s);
  }
}

TEST(Layout, TheSimulatorRefusesAGpuNamedTwice) {
  const topo::Topology t = h100_4x8(1);
  ir::Plan p = group_plan("ring", 4, 1);
  p.gpus = {0, 2, 2, 6};
  auto r = sim::simulate(p, t, sim::compute_model_for(t, p.workload));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message(), "plan: ranks 1 and 2 are both placed on GPU 2");
  p.gpus = {0, 2, 4, 32};
  EXPECT_EQ(sim::simulate(p, t, sim::compute_model_for(t, p.workload)).error().message(),
            "--topology: the plan places rank 3 on GPU 32, but topology 'h100-4x8' has 32 GPUs");
}

TEST(Layout, TheOneEntryLowersADeploymentBeforeItSimulates) {
  // CP 8 x TP 2 x DP 2 on 4 x 8 H100 as `charm simulate --cp 8 --tp 2` asks for it: the whole model's 12 heads.
  const topo::Topology t = h100_4x8(2);
  sim::SimulationRequest r;
  r.plan = {"charm", group_plan("charm", 8, 2).workload, 0, 2};
  r.plan.workload.heads = r.plan.workload.kv_heads = 12;
  r.layout = *make_layout(32, 8, 2, LayoutOrder::TpInner);
  r.attention_block = true;
  r.symmetry = sched::SymmetryUse::On;
  const auto e = sim::simulate_request(r, t);
  ASSERT_TRUE(e.ok()) << e.error().message();
  // One replica of two groups stands for the other: the lowered plan is that class, placed by the layout.
  EXPECT_EQ(e->plan.groups, 4);
  EXPECT_EQ(e->plan.symmetry.block, 16);
  EXPECT_EQ(e->plan.gpus, layout_gpus(*r.layout));
  ASSERT_TRUE(e->tp_block.has_value());
  EXPECT_EQ(e->tp_block->tp, 2);
  const auto group = CheckedRequest::check({"charm", group_plan("charm", 8, 2).workload, 8, 2});
  ASSERT_TRUE(group.ok());
  const auto plan = make_plan(*group);
  ASSERT_TRUE(plan.ok());
  const auto run = sim::lower_deployment(*plan, *r.layout, 2, t, &r.plan.workload);
  ASSERT_TRUE(run.ok());
  const auto lowered = sim::evaluate_lowered(*run, t);
  ASSERT_TRUE(lowered.ok());
  EXPECT_EQ(e->summary.time_s, lowered->summary.time_s);
  EXPECT_EQ(e->summary.time_s, lowered->result.makespan_s + e->tp_block->total_s());

  // Refusals are the request's, each of its own field: a rotation the layout lacks, TP heads, a balanced layout.
  r.layout = *make_layout(16, 8, 2, LayoutOrder::TpInner);  // TP peers interleave the only replica's groups
  auto refused = sim::simulate_request(r, t);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().field, Field::Symmetry);
  EXPECT_EQ(refused.error().kind, ErrorKind::Input);
  r.plan.workload.heads = r.plan.workload.kv_heads = 13;
  EXPECT_EQ(sim::simulate_request(r, t).error().field, Field::Tp);
  r.plan.workload.layout = ir::Layout::Balanced;
  EXPECT_EQ(sim::simulate_request(r, t).error().field, Field::Layout);
}

TEST(Layout, PlanRunReadsItsMachineAsData) {
  // The planner plans a simulated run from what the simulator says of its machine, with no topology: a ring's
  // rotation coarsened to the machine's blocks, or refused where its routes do not repeat with them.
  RunRequest r;
  r.plan = {"ring", group_plan("ring", 16, 1).workload, 16, 1};
  r.symmetry = SymmetryUse::On;
  RunTarget target;
  target.blocks = {"blocks of 4", 4, true, false, true};
  const auto plan = plan_run(r, target);
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  EXPECT_EQ(plan->symmetry.kind, ir::RankSymmetry::Kind::Rotate);
  EXPECT_EQ(plan->symmetry.block, 4);
  r.symmetry = SymmetryUse::Auto;  // a plan this small keeps every rank
  EXPECT_FALSE(plan_run(r, target)->symmetry.active());

  r.symmetry = SymmetryUse::On;
  target.blocks.routes_by_block = false;
  const auto refused = plan_run(r, target);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().field, Field::Symmetry);
  EXPECT_NE(refused.error().message().find("its routes are a GPU-by-GPU table"), std::string::npos)
      << refused.error().message();

  // The plan the simulator runs is the planner's for the target it reads off its topology.
  const topo::Topology t = h100_4x8(1);
  sim::SimulationRequest sr;
  static_cast<RunRequest&>(sr) = r;
  const auto e = sim::simulate_request(sr, t);
  ASSERT_TRUE(e.ok()) << e.error().message();
  const auto planned = plan_run(r, sim::run_target(t, r.plan.workload.dtype));
  ASSERT_TRUE(planned.ok());
  EXPECT_EQ(e->plan.symmetry, planned->symmetry);
  EXPECT_EQ(e->plan.symmetry.block, t.blocks.gpus);
  EXPECT_EQ(e->plan.size(), planned->size());
}

}  // namespace
}  // namespace charm::sched

namespace charm::sim {
namespace {

TEST(LayoutAdvise, RanksEachLayoutAsADeploymentRunsIt) {
  auto t = topo::load_topology(std::string(CHARM_SOURCE_DIR) + "/topologies/h100-2x8.json");
  ASSERT_TRUE(t.ok());
  ir::Workload w;
  w.seq = 32768;
  w.heads = 8;
  w.kv_heads = 8;
  w.head_dim = 128;
  w.pass = ir::PassKind::Fwd;
  AdviseOptions opt;
  opt.algos = {"ring"};
  opt.tp = {1, 2, 3};  // 3 divides neither 16 GPUs nor 8 heads: refused, named
  auto adv = advise(w, *t, opt);
  ASSERT_TRUE(adv.ok()) << adv.error().message();
  ASSERT_EQ(adv->candidates.size(), 2u);
  ASSERT_EQ(adv->refused.size(), 1u);
  EXPECT_EQ(adv->refused[0].label, "tp=3");
  for (const Candidate& c : adv->candidates) {
    SCOPED_TRACE(c.label());
    const sched::Layout l = *sched::make_layout(16, 16 / c.tp, c.tp, sched::LayoutOrder::TpInner);
    const auto req = sched::CheckedRequest::check({"ring", *sched::group_workload(w, l), l.cp, 1});
    ASSERT_TRUE(req.ok()) << req.error().message();
    auto e = evaluate_deployment(*req, l, l.groups(), *t, &w);  // a layout search's times are attention blocks'
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(c.fwd->time_ms, e->summary.time_s * 1e3);
    ASSERT_TRUE(e->tp_block.has_value());
    EXPECT_EQ(e->tp_block->tp, c.tp);
    EXPECT_EQ(c.label(), fmt::format("cp{}xtp{} ring [contiguous]", l.cp, l.tp));
  }
}

}  // namespace
}  // namespace charm::sim
