// charm::calib's fit: the bounds registry, the normal equations, and a calibration made from
// the simulator itself: measurements simulated on a topology scaled by factors the fit is not
// told, fitted from the unscaled base, must predict held-out workloads and algorithms within 3%.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "calibrate/calibration.hpp"
#include "calibrate/normal_equations.hpp"
#include "calibration_test_support.hpp"
#include "sim/compute_model.hpp"
#include "sim/evaluate.hpp"
#include "topologies/topology_json.hpp"

namespace charm::calib {
namespace {

using nlohmann::json;
using test_support::kHeader;
using test_support::load_json;

// ---------------------------------------------------------------- parameters

TEST(Parameters, PathsAndValues) {
  const json h100 = load_json("topologies/nominal/h100-2x8.json");
  EXPECT_DOUBLE_EQ(*parameter_value(h100, "inter.bandwidth_gbps", "h"), 42.5);
  // The H100 runs its kernel library's table; the L20, which has none published, a flat attainment.
  const json l20 = load_json("topologies/nominal/l20-4.json");
  EXPECT_DOUBLE_EQ(*parameter_value(l20, "gpu.efficiency.bwd", "l"), 0.4);
  EXPECT_DOUBLE_EQ(*parameter_value(h100, "gpu.tflops.bf16", "h"), 989.0);
  json explicit_doc = {{"links", {{{"a", "x"}, {"latency_us", 2}}, {{"a", "y"}, {"latency_us", 3}}}}};
  EXPECT_DOUBLE_EQ(*parameter_value(explicit_doc, "links[1].latency_us", "e"), 3);
  json d = h100;
  set_parameter(d, "gpu.efficiency.fwd", 0.25);
  EXPECT_DOUBLE_EQ(d["gpu"]["efficiency"]["fwd"].get<double>(), 0.25);
  auto msg = [&](const std::string& path) {
    auto v = parameter_value(h100, path, "h100.json");
    return v ? std::string("ok") : v.error().message();
  };
  EXPECT_EQ(msg("numa.bandwidth_gbps"), "numa.bandwidth_gbps: no such field in h100.json");
  auto v = parameter_value(l20, "gpu.efficiency", "l20.json");
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().message(),
            "gpu.efficiency: is an object in l20.json; fit its numbers (gpu.efficiency.bwd, gpu.efficiency.fwd)");
  EXPECT_EQ(msg("inter.sharing"), "inter.sharing: is not a number in h100.json (it is \"shared\")");
  EXPECT_EQ(msg("nodes"), "nodes: shapes the cluster (a count), it is not a hardware parameter to fit");
  EXPECT_EQ(msg("inter..latency_us"), "inter..latency_us: not a parameter path (expected a field name at character 7); "
                                      "write it like inter.bandwidth_gbps or links[3].latency_us");
  EXPECT_EQ(msg("links[x].latency_us"), "links[x].latency_us: not a parameter path (expected [index] at character 6); "
                                        "write it like inter.bandwidth_gbps or links[3].latency_us");
}

TEST(Parameters, BoundsRegistry) {
  auto b = bounds_for("inter.bandwidth_gbps", 42.5);
  ASSERT_TRUE(b);
  EXPECT_DOUBLE_EQ(b->lo, 42.5 / 20);
  EXPECT_DOUBLE_EQ(b->hi, 42.5);  // never above the base file's value
  EXPECT_EQ(b->scale, Scale::Log);
  EXPECT_TRUE(b->known);
  EXPECT_DOUBLE_EQ(bounds_for("links[4].bandwidth_gbps", 10)->hi, 10);
  EXPECT_DOUBLE_EQ(bounds_for("gpu.hbm_gbps", 3350)->lo, 3350.0 / 20);
  for (const char* e : {"gpu.efficiency.fwd", "gpu.efficiency.bwd", "gpu.efficiency"}) {
    auto eb = bounds_for(e, 0.5);
    ASSERT_TRUE(eb);
    EXPECT_GT(eb->lo, 0) << e;
    EXPECT_DOUBLE_EQ(eb->hi, 1) << e;
    EXPECT_EQ(eb->scale, Scale::Log) << e;
  }
  for (const char* l : {"intra.latency_us", "inter.latency_us", "links[0].latency_us", "gpu.launch_us"}) {
    auto lb = bounds_for(l, 3);
    ASSERT_TRUE(lb);
    EXPECT_DOUBLE_EQ(lb->lo, 0) << l;
    EXPECT_DOUBLE_EQ(lb->hi, 1000) << l;
    EXPECT_EQ(lb->scale, Scale::Linear) << l;
  }
  auto h = bounds_for("gpu.half_tokens", 128);
  EXPECT_DOUBLE_EQ(h->lo, 0);
  EXPECT_DOUBLE_EQ(h->hi, 4096);
  // Not in the registry: a decade either way, flagged.
  auto u = bounds_for("gpu.tflops.bf16", 989);
  ASSERT_TRUE(u);
  EXPECT_FALSE(u->known);
  EXPECT_DOUBLE_EQ(u->lo, 98.9);
  EXPECT_DOUBLE_EQ(u->hi, 9890);
  auto z = bounds_for("gpu.something_new", 0);
  ASSERT_FALSE(z);
  EXPECT_EQ(z.error().message(), "gpu.something_new: base value 0 gives no range: fields outside the bounds registry "
                                 "are fitted in [base/10, base*10]");
  // The default list is the one place the lead edits: every entry must be a known field.
  for (const auto& p : default_fit_parameters()) EXPECT_TRUE(bounds_for(p, 1.0)->known) << p;
}

// ---------------------------------------------------------------- the fit, against the simulator itself

struct SimRun {
  std::string algo;
  ir::PassKind pass;
  std::int64_t batch, seq;
};

/// Measurements simulated on `truth`, as CSV text.
std::string simulate_csv(const json& truth, const std::vector<SimRun>& runs, int ranks, int domains) {
  auto t = topo::parse_topology(truth, "truth");
  EXPECT_TRUE(t) << t.error().message();
  std::ostringstream csv;
  csv << "# simulated on a scaled topology (calibration_test)\n"
      << "algo,pass,batch,seq,heads,kv_heads,head_dim,dtype,causal,layout,time_ms,ranks,domains\n";
  for (const auto& r : runs) {
    ir::Workload w;
    w.batch = r.batch;
    w.seq = r.seq;
    w.heads = 8;
    w.kv_heads = 8;
    w.head_dim = 128;
    w.pass = r.pass;
    auto e = sim::evaluate({r.algo, w, ranks, domains}, *t);
    EXPECT_TRUE(e) << e.error().message();
    csv << fmt::format("{},{},{},{},8,8,128,bf16,0,contiguous,{:.9g},{},{}\n", r.algo, to_string(r.pass), r.batch,
                       r.seq, e->summary.time_s * 1e3, ranks, domains);
  }
  return csv.str();
}

// A stack field is one line of topologies/stack_fields.def: for every line, a topology file's "stack" object
// sets it (and refuses a value outside its quantity's range), the completed document writes it back,
// calibrate's --set path reaches it, the bounds registry knows it by its quantity, and docs/topology.md's
// field table has the line's default and meaning.
TEST(StackFields, EveryLineIsReadWrittenAndFitted) {
  const json base = load_json("topologies/nominal/h100-2x8.json");
  std::ifstream doc_in(test_support::source_path("docs/topology.md"));
  const std::string topology_doc((std::istreambuf_iterator<char>(doc_in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(topology_doc.empty());
  for (const topo::StackField& f : topo::kStackFields) {
    const std::string name(f.name), path = "stack." + name;
    // A value inside every quantity's range and not its default: 0.5 passes, us, GB/s or a slowdown.
    json doc = base;
    doc["stack"] = {{"preset", "none"}, {name, 0.5}};
    auto t = topo::parse_topology(doc, "stack-field.json");
    ASSERT_TRUE(t) << name << ": " << t.error().message();
    EXPECT_DOUBLE_EQ(t->stack.*f.member, 0.5) << name;
    // Out of range: every quantity refuses a negative value, naming the field.
    doc["stack"][name] = -1;
    auto bad = topo::parse_topology(doc, "stack-field.json");
    ASSERT_FALSE(bad) << name;
    EXPECT_NE(bad.error().message().find("stack." + name), std::string::npos) << bad.error().message();
    // Written back whole, so --set and --fit find it at its path.
    json full = base;
    ASSERT_TRUE(topo::complete_document(full, "stack-field.json"));
    auto v = parameter_value(full, path, "stack-field.json");
    ASSERT_TRUE(v) << path << ": " << v.error().message();
    set_parameter(full, path, 0.75);
    auto t2 = topo::parse_topology(full, "stack-field.json");
    ASSERT_TRUE(t2) << path << ": " << t2.error().message();
    EXPECT_DOUBLE_EQ(t2->stack.*f.member, 0.75) << path;
    auto b = bounds_for(path, 0.75);
    ASSERT_TRUE(b) << path;
    EXPECT_TRUE(b->known) << path << ": the bounds registry has no rule for its quantity";
  }
  // The users' table of stack fields is the .def's lines, as they read now.
  std::string rows;
  for (const topo::StackField& f : topo::kStackFields)
    rows += fmt::format("| `{}` | {:g} | {} |\n", f.name, f.default_value, f.meaning);
  EXPECT_NE(topology_doc.find(rows), std::string::npos)
      << "docs/topology.md's stack field table (after its `preset` row) should read, from stack_fields.def:\n"
      << rows;
}

TEST(Calibrate, RecoversScaledParametersAndPredictsHeldOutRows) {
  // A small cluster: 2 nodes x 4 H100 (the preset's numbers), so the test runs in seconds.
  json base = load_json("topologies/nominal/h100-2x8.json");
  base["gpus_per_node"] = 4;
  base["gpu"]["efficiency"] = {{"fwd", 0.5}, {"bwd", 0.4}};  // the hypothesis the fit starts from
  json truth = base;
  truth["inter"]["bandwidth_gbps"] = 42.5 * 0.6;
  truth["gpu"]["efficiency"]["fwd"] = 0.5 * 0.7;
  truth["gpu"]["efficiency"]["bwd"] = 0.4 * 0.8;
  using P = ir::PassKind;
  // Training: ring both passes and charm forward, over sequence lengths from comm- to compute-bound.
  // (Ring at 8k is bound by the inter-node link, at 128k by compute.)
  const std::vector<SimRun> train{{"ring", P::Fwd, 1, 8192},  {"ring", P::Fwd, 1, 131072},
                                  {"ring", P::Bwd, 1, 8192},  {"ring", P::Bwd, 1, 131072},
                                  {"charm", P::Fwd, 1, 8192}, {"charm", P::Fwd, 2, 32768}};
  // Held out: other workloads, and algorithms / passes the fit never saw.
  const std::vector<SimRun> held{
      {"ring", P::Fwd, 2, 32768}, {"charm", P::Bwd, 1, 32768}, {"rm+", P::Fwd, 1, 32768}, {"merge", P::Bwd, 2, 16384}};
  auto data = parse_measurements(simulate_csv(truth, train, 8, 2), "train.csv");
  ASSERT_TRUE(data) << data.error().message();
  CalibrationOptions opt;
  opt.fit = {"inter.bandwidth_gbps", "gpu.efficiency.fwd", "gpu.efficiency.bwd"};
  opt.jobs = 2;
  opt.restarts = 1;
  auto c = calibrate(base, "h100-2x4", *data, {}, opt);
  ASSERT_TRUE(c) << c.error().message();
  ASSERT_EQ(c->parameters.size(), 3u);
  EXPECT_LT(c->objective, 1e-6) << "the truth is in the model: the fit must reach it";
  EXPECT_GT(c->base_objective, 100 * c->objective);
  const double expect[] = {42.5 * 0.6, 0.35, 0.32};
  for (std::size_t k = 0; k < 3; ++k) {
    EXPECT_NEAR(c->parameters[k].value / expect[k], 1.0, 0.03) << c->parameters[k].path;
    EXPECT_DOUBLE_EQ(c->parameters[k].base, k == 0 ? 42.5 : k == 1 ? 0.5 : 0.4);
    EXPECT_GT(c->parameters[k].bounds.hi, expect[k]);
  }
  EXPECT_LT(c->time.in_sample, 0.5);
  EXPECT_LT(c->time.loo, 3.0);
  EXPECT_GT(c->time.base, 10.0);
  ASSERT_EQ(c->pairs.size(), 1u);  // ring and charm forward at 8k
  EXPECT_LT(c->speedup.in_sample, 0.5);
  EXPECT_LT(c->speedup.loo, 3.0);
  // The calibrated document is a topology every command accepts, and predicts the held-out rows.
  auto fitted = topo::parse_topology(c->document, "fitted");
  ASSERT_TRUE(fitted) << fitted.error().message();
  auto truth_t = topo::parse_topology(truth, "truth");
  ASSERT_TRUE(truth_t);
  for (const auto& r : held) {
    ir::Workload w;
    w.batch = r.batch;
    w.seq = r.seq;
    w.pass = r.pass;
    auto want = sim::evaluate({r.algo, w, 8, 2}, *truth_t);
    auto got = sim::evaluate({r.algo, w, 8, 2}, *fitted);
    ASSERT_TRUE(want && got);
    EXPECT_NEAR(got->summary.time_s / want->summary.time_s, 1.0, 0.03)
        << r.algo << " " << to_string(r.pass) << " S=" << r.seq;
  }
  const json& cal = c->document["calibration"];
  EXPECT_EQ(cal["measurements"]["rows"], 6);
  EXPECT_EQ(cal["fitted"].size(), 3u);
  EXPECT_EQ(c->document["name"], "h100-2x8-calibrated");
  for (const auto& p : cal["fitted"]) EXPECT_TRUE(p["relative_sigma"].is_number()) << p.dump();
  // One-step leave-one-out (the default): the rows it moves most are refitted exactly beside it.
  EXPECT_EQ(c->loo, LeaveOneOut::OneStep);
  ASSERT_EQ(c->loo_checks.size(), 3u);
  for (const auto& k : c->loo_checks) EXPECT_NEAR(k.one_step_ms / k.exact_ms, 1.0, 0.01) << "row " << k.row;

  // The job count moves threads, not figures: one thread gives the same report bit for bit.
  opt.jobs = 1;
  auto one = calibrate(base, "h100-2x4", *data, {}, opt);
  ASSERT_TRUE(one) << one.error().message();
  EXPECT_EQ(one->document, c->document);
  auto without_seconds = [&](const Calibration& x) {
    json j = report_json(x, *data);
    j.erase("seconds");
    return j.dump();
  };
  EXPECT_EQ(without_seconds(*one), without_seconds(*c));
}

TEST(Calibrate, CommOffsetBelongsToTheMeasurementNotTheCluster) {
  // Ring's T_comm as a profiler reports it: the run's communication time plus 1.5 ms the run does not have.
  // The fit reads the offset apart from the NIC's rate, and writes only the rate into the topology.
  json base = load_json("topologies/nominal/h100-2x8.json");
  base["gpus_per_node"] = 4;
  json truth = base;
  truth["inter"]["bandwidth_gbps"] = 42.5 * 0.6;
  auto t = topo::parse_topology(truth, "truth");
  ASSERT_TRUE(t) << t.error().message();
  std::string csv = "algo,pass,batch,seq,heads,kv_heads,head_dim,dtype,causal,layout,time_ms,ranks,domains,metric\n";
  for (const std::int64_t seq : {8192, 32768, 131072}) {
    ir::Workload w;
    w.seq = seq;
    auto e = sim::evaluate({"ring", w, 8, 2}, *t);
    ASSERT_TRUE(e) << e.error().message();
    csv += fmt::format("ring,fwd,1,{},8,8,128,bf16,0,contiguous,{:.9g},8,2,time\n", seq, e->summary.time_s * 1e3);
    csv += fmt::format("ring,fwd,1,{},8,8,128,bf16,0,contiguous,{:.9g},8,2,comm\n", seq,
                       e->summary.comm_busy_mean_s * 1e3 + 1.5);
  }
  auto data = parse_measurements(csv, "comm.csv");
  ASSERT_TRUE(data) << data.error().message();
  CalibrationOptions opt;
  opt.fit = {"inter.bandwidth_gbps", kCommOffsetParameter};
  opt.jobs = 2;
  opt.restarts = 1;
  opt.leave_one_out = LeaveOneOut::Off;
  auto c = calibrate(base, "h100-2x4", *data, {}, opt);
  ASSERT_TRUE(c) << c.error().message();
  ASSERT_EQ(c->parameters.size(), 2u);
  EXPECT_NEAR(c->parameters[0].value / (42.5 * 0.6), 1.0, 0.01);
  EXPECT_NEAR(c->parameters[1].value, 1.5, 0.02);
  EXPECT_LT(c->component.in_sample, 0.1);
  EXPECT_FALSE(c->document.contains("measurement"));
  EXPECT_NEAR(c->document["inter"]["bandwidth_gbps"].get<double>() / (42.5 * 0.6), 1.0, 0.01);
  EXPECT_EQ(c->document["calibration"]["fitted"][1]["path"], "measurement.comm_offset_ms");
  // Without the offset the same rows bend the rate: the comm rows ask for a slower NIC than the times.
  opt.fit = {"inter.bandwidth_gbps"};
  auto bent = calibrate(base, "h100-2x4", *data, {}, opt);
  ASSERT_TRUE(bent) << bent.error().message();
  EXPECT_LT(bent->parameters[0].value, 0.99 * c->parameters[0].value);
}

TEST(Calibrate, KernelTimesPinTheGpuApartFromTheLinks) {
  // Ring forward at 8k on 2 x 4 H100 is bound by the NIC: its time says little about the GPU.
  // Single-GPU kernel times of the truth's GPU (0.7x the attainment of the base's kernel table) pin the
  // kernel, and the run pins the NIC: both come back.
  json base = load_json("topologies/nominal/h100-2x8.json");
  base["gpus_per_node"] = 4;
  json truth = base;
  truth["inter"]["bandwidth_gbps"] = 42.5 * 0.6;
  truth["gpu"]["kernel_scale"] = {{"fwd", 0.7}, {"bwd", 1}};
  auto data = parse_measurements(simulate_csv(truth, {{"ring", ir::PassKind::Fwd, 1, 8192}}, 8, 2), "train.csv");
  ASSERT_TRUE(data) << data.error().message();
  auto truth_t = topo::parse_topology(truth, "truth");
  ASSERT_TRUE(truth_t);
  const auto model = sim::ComputeModel::from_topology(*truth_t, ir::DType::BF16);
  std::string csv = kernel_times_header() + "\n";
  for (const std::int64_t t : {1024, 4096, 16384})
    for (const bool causal : {false, true}) {
      KernelTime k;
      k.workload.batch = 1;
      k.workload.heads = 8;
      k.workload.kv_heads = 8;
      k.workload.head_dim = 128;
      k.q_tokens = k.kv_tokens = t;
      k.causal = causal;
      k.time_ms = model.kernel_seconds({double(t), double(t), causal}, ir::Phase::Fwd, k.workload) * 1e3;
      csv += kernel_time_row(k) + "\n";
    }
  CalibrationOptions opt;
  opt.fit = {"inter.bandwidth_gbps", "gpu.kernel_scale.fwd"};
  opt.jobs = 2;
  opt.restarts = 1;
  opt.leave_one_out = LeaveOneOut::Off;
  auto kernels = parse_kernel_times(csv, "kernels.csv");
  ASSERT_TRUE(kernels) << kernels.error().message();
  opt.kernels = *kernels;
  auto c = calibrate(base, "h100-2x4", *data, {}, opt);
  ASSERT_TRUE(c) << c.error().message();
  ASSERT_EQ(c->kernel_rows.size(), 6u);
  EXPECT_NEAR(c->parameters[0].value / (42.5 * 0.6), 1.0, 0.01);
  EXPECT_NEAR(c->parameters[1].value / 0.7, 1.0, 0.01);
  EXPECT_LT(c->kernels.in_sample, 0.5);
  EXPECT_GT(c->kernels.base, 20.0);  // the base's GPU is 1/0.7 as fast
  EXPECT_EQ(report_json(*c, *data)["kernels"].size(), 6u);
}

TEST(Calibrate, RowsBeyondTheBaseRegenerateItAndSpeedupsPair) {
  // 16-GPU rows on a 2 x 4 base: re-generated with 4 nodes; ring and charm share workloads.
  json base = load_json("topologies/nominal/h100-2x8.json");
  base["gpus_per_node"] = 4;
  json truth = base;
  truth["inter"]["bandwidth_gbps"] = 30;
  truth["nodes"] = 4;
  using P = ir::PassKind;
  const std::vector<SimRun> runs{
      {"ring", P::Fwd, 1, 16384}, {"charm", P::Fwd, 1, 16384}, {"ring", P::Fwd, 1, 65536}, {"charm", P::Fwd, 1, 65536}};
  auto data = parse_measurements(simulate_csv(truth, runs, 16, 4), "big.csv");
  ASSERT_TRUE(data);
  CalibrationOptions opt;
  opt.fit = {"inter.bandwidth_gbps", "gpu.launch_us"};
  opt.restarts = 0;
  opt.jobs = 2;
  auto c = calibrate(base, "h100-2x4", *data, {}, opt);
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_NEAR(c->parameters[0].value, 30, 0.3);
  EXPECT_NEAR(c->parameters[1].value, 10, 0.5);
  EXPECT_EQ(c->rows[0].ranks, 16);
  EXPECT_EQ(c->rows[0].domains, 4);
  ASSERT_EQ(c->pairs.size(), 2u);
  EXPECT_EQ(c->pairs[0].ring, 0u);
  EXPECT_EQ(c->pairs[0].other, 1u);
  EXPECT_LT(c->speedup.in_sample, 0.5);
  EXPECT_EQ(c->document["nodes"], 2);  // the base's shape, with the fitted values
  ASSERT_FALSE(c->notes.empty());
  EXPECT_EQ(c->notes[0], "rows with 16 GPUs: h100-2x4 re-generated with nodes = 4");
}

TEST(Calibrate, SpeedupsEnterTheObjectiveWithTheirWeight) {
  // The truth differs in what is not fitted (the kernel's attainment), so no fit reaches zero and the
  // objective is the rows' sum of log(predicted / measured)^2 plus the weight times the pairs' sum of
  // log(predicted speedup / measured speedup)^2, recomputed here from the reported rows.
  json base = load_json("topologies/nominal/h100-2x8.json");
  base["gpus_per_node"] = 4;
  json truth = base;
  truth["inter"]["bandwidth_gbps"] = 30;
  truth["gpu"]["efficiency"]["fwd"] = 0.2;
  using P = ir::PassKind;
  const std::vector<SimRun> runs{
      {"ring", P::Fwd, 1, 16384}, {"charm", P::Fwd, 1, 16384}, {"ring", P::Fwd, 1, 65536}, {"charm", P::Fwd, 1, 65536}};
  auto data = parse_measurements(simulate_csv(truth, runs, 8, 2), "runs.csv");
  ASSERT_TRUE(data);
  for (double weight : {0.0, 2.0}) {
    CalibrationOptions opt;
    opt.fit = {"inter.bandwidth_gbps"};
    opt.restarts = 0;
    opt.jobs = 2;
    opt.leave_one_out = LeaveOneOut::Off;
    opt.speedup_weight = weight;
    auto c = calibrate(base, "h100-2x4", *data, {}, opt);
    ASSERT_TRUE(c) << c.error().message();
    ASSERT_EQ(c->pairs.size(), 2u);
    double rows = 0, pairs = 0;
    for (std::size_t i = 0; i < c->rows.size(); ++i)
      rows += std::pow(std::log(c->rows[i].predicted_ms / data->rows[i].time_ms), 2);
    for (const auto& pr : c->pairs) {
      const double predicted = c->rows[pr.ring].predicted_ms / c->rows[pr.other].predicted_ms;
      const double measured = data->rows[pr.ring].time_ms / data->rows[pr.other].time_ms;
      pairs += std::pow(std::log(predicted / measured), 2);
    }
    EXPECT_GT(pairs, 1e-4) << "the speedups are off: the term is not zero";
    EXPECT_NEAR(c->objective, rows + weight * pairs, 1e-12 * (1 + c->objective)) << "weight " << weight;
    const std::string text = c->document["calibration"]["objective"];
    EXPECT_EQ(text.find("speedup") != std::string::npos, weight > 0) << text;
  }
}

TEST(Calibrate, DefaultsSkipWhatNoRowMoves) {
  // Forward rows on the first 4 GPUs (one NUMA node) of the dual-NUMA L20: no row
  // crosses the host bridge, so its bandwidth is dropped from the defaults with a
  // note; the shared PCIe links' rate is fitted.
  const json base = load_json("topologies/nominal/l20-8-2numa.json");
  auto data = parse_measurements(
      "algo,pass,batch,seq,heads,kv_heads,head_dim,dtype,causal,layout,time_ms,ranks\n"
      "ring,fwd,1,8192,8,8,128,bf16,0,contiguous,5,4\nring,fwd,1,32768,8,8,128,bf16,0,contiguous,40,4\n",
      "l.csv");
  ASSERT_TRUE(data) << data.error().message();
  CalibrationOptions opt;
  opt.restarts = 0;
  opt.leave_one_out = LeaveOneOut::Off;
  auto c = calibrate(base, "l20-8-2numa", *data, {}, opt);
  ASSERT_TRUE(c) << c.error().message();
  std::vector<std::string> paths;
  for (const auto& p : c->parameters) paths.push_back(p.path);
  // The shared PCIe links' rate is fitted; what no row moves (backward efficiency, the stack's merges:
  // a ring has none) is dropped, each with a note.
  EXPECT_NE(std::find(paths.begin(), paths.end(), "intra.bandwidth_gbps"), paths.end());
  for (const char* dropped : {"numa.bandwidth_gbps", "gpu.efficiency.bwd", "stack.merge_traffic"})
    EXPECT_EQ(std::find(paths.begin(), paths.end(), dropped), paths.end()) << dropped;
  EXPECT_NE(std::find(c->notes.begin(), c->notes.end(), "numa.bandwidth_gbps: not fitted, no row depends on it"),
            c->notes.end());
}

TEST(Calibrate, QuotientRowsPredictWhatTheFullPlanSimulates) {
  // Causal zigzag rows on 2 nodes x 4: the fit simulates one class of ranks; every prediction must be the
  // full plan's on the fitted document, whatever values the fit moved (the update passes change how
  // zigzag halves are priced).
  json base = load_json("topologies/nominal/h100-2x8.json");
  base["gpus_per_node"] = 4;
  base["gpu"]["efficiency"] = {{"fwd", 0.5}, {"bwd", 0.4}};  // no kernel table: halves priced alike at the base
  auto data = parse_measurements(std::string(kHeader) + "ulysses,fwd,1,16384,8,8,128,bf16,1,zigzag,1.5\n"
                                                        "charm,fwd,1,16384,8,8,128,bf16,1,zigzag,1.1\n"
                                                        "ulysses,bwd,1,32768,8,8,128,bf16,1,zigzag,9\n"
                                                        "charm,bwd,1,32768,8,8,128,bf16,1,zigzag,7\n",
                                 "causal.csv");
  ASSERT_TRUE(data) << data.error().message();
  CalibrationOptions opt;
  opt.fit = {"inter.bandwidth_gbps", "stack.update_passes", "gpu.efficiency.bwd"};
  opt.restarts = 0;
  opt.jobs = 2;
  auto c = calibrate(base, "h100-2x4", *data, {}, opt);
  ASSERT_TRUE(c) << c.error().message();
  auto fitted = topo::parse_topology(c->document, "fitted");
  ASSERT_TRUE(fitted) << fitted.error().message();
  for (std::size_t i = 0; i < data->rows.size(); ++i) {
    const auto& m = data->rows[i];
    auto full = sim::evaluate({m.algo, m.workload, 8, 2}, *fitted, /*by_symmetry=*/false);
    ASSERT_TRUE(full) << full.error().message();
    EXPECT_NEAR(c->rows[i].predicted_ms / (full->summary.time_s * 1e3), 1.0, 1e-12) << "line " << m.line;
  }
}

TEST(NormalEquations, SolvesDropsAndNamesCorrelatedPairs) {
  // J = [[1, 0], [0, 2], [1, 1]], r = [1, 2, 3]: J^T J = [[2, 1], [1, 5]], J^T r = [4, 7].
  const Matrix J{{1, 0}, {0, 2}, {1, 1}};
  const std::vector<double> r{1, 2, 3};
  Matrix jtj;
  std::vector<double> jtr;
  normal_equations(J, r, {}, {}, jtj, jtr);
  EXPECT_EQ(jtj, (Matrix{{2, 1}, {1, 5}}));
  EXPECT_EQ(jtr, (std::vector<double>{4, 7}));
  const auto x = solve_spd(jtj, jtr);  // (2 1; 1 5) x = (4, 7): x = (13/9, 10/9)
  EXPECT_NEAR(x[0], 13.0 / 9, 1e-9);
  EXPECT_NEAR(x[1], 10.0 / 9, 1e-9);
  // Without the third residual, and with the second column held: J^T J = [[1, 0], [0, 0]].
  normal_equations(J, r, {1, 1, 0}, {1, 0}, jtj, jtr);
  EXPECT_EQ(jtj, (Matrix{{1, 0}, {0, 0}}));
  EXPECT_EQ(jtr, (std::vector<double>{1, 0}));
  // Correlations of a covariance: 0.95 and -0.5 against a threshold of 0.9; a zero variance is left out.
  const Matrix cov{{1, 0.95 * 2, -0.5, 0}, {0.95 * 2, 4, 0, 0}, {-0.5, 0, 1, 0}, {0, 0, 0, 0}};
  const auto pairs = correlated_pairs(cov, 0.9);
  ASSERT_EQ(pairs.size(), 1u);
  EXPECT_EQ(pairs[0].a, 0u);
  EXPECT_EQ(pairs[0].b, 1u);
  EXPECT_NEAR(pairs[0].r, 0.95, 1e-12);
}

TEST(Calibrate, FitListErrors) {
  const json base = load_json("topologies/nominal/h100-2x8.json");
  auto data = parse_measurements(std::string(kHeader) + "ring,fwd,1,8192,8,8,128,bf16,0,contiguous,5\n", "r.csv");
  ASSERT_TRUE(data);
  auto err = [&](std::vector<std::string> fit, std::vector<FixedParameter> fixed = {}) {
    CalibrationOptions opt;
    opt.fit = std::move(fit);
    opt.restarts = 0;
    opt.leave_one_out = LeaveOneOut::Off;
    opt.max_evaluations = 5;
    auto c = calibrate(base, "h100.json", *data, fixed, opt);
    return c ? std::string("ok") : c.error().message();
  };
  EXPECT_EQ(err({"inter.bandwith_gbps"}), "--fit: inter.bandwith_gbps: no such field in h100.json");
  EXPECT_EQ(err({"gpu.launch_us", "gpu.launch_us"}), "--fit: gpu.launch_us is listed twice");
  EXPECT_EQ(err({"inter.latency_us"}, {{"inter.latency_us", 4, 8, "log.txt", {}}}),
            "--fit: inter.latency_us is set from --nccl-tests, not fitted");
  EXPECT_EQ(err({"gpu.launch_us"}), "ok");
}

}  // namespace
}  // namespace charm::calib
