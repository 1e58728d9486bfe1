// The simulator's command line: JSON shapes, the Chrome trace's structure, exit codes.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace {

charm::test::CmdResult run(const std::string& args) { return charm::test::run_charm(args); }

std::string topo(const char* name) { return std::string(CHARM_SOURCE_DIR) + "/topologies/" + name; }

TEST(SimCli, CompareAcceptance3) {
  auto o = run("compare --topology " + topo("h100-2x8.json") +
               " --batch 16 --seq 26880 --heads 12 --head-dim 192 --dtype bf16 --pass both --json");
  ASSERT_EQ(o.code, 0) << o.out;
  auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["schema"], 1);
  std::set<std::string> seen;
  std::map<std::string, double> ring_ms, speedup;  // by pass; by "algo/pass"
  for (const auto& r : j["results"])
    if (r["algo"] == "ring" && r.contains("time_ms")) ring_ms[r["pass"]] = r["time_ms"].get<double>();
  ASSERT_EQ(ring_ms.size(), 2u) << o.out;
  for (const auto& r : j["results"]) {
    // 12 heads do not split over Ulysses' 16 or USP's 8 ranks, and TASP has no backward:
    // those rows say why instead of a time.
    const std::string algo = r["algo"];
    if ((algo == "ulysses" || algo == "usp" || (algo.starts_with("tasp") && r["pass"] == "bwd")) &&
        r.contains("error")) {
      EXPECT_FALSE(r["error"].get<std::string>().empty());
      continue;
    }
    ASSERT_TRUE(r.contains("time_ms")) << r.dump();
    const std::string key = algo + "/" + r["pass"].get<std::string>();
    seen.insert(key);
    // The column is ring's time over this row's time, same pass.
    speedup[key] = r["speedup_vs_ring"].get<double>();
    EXPECT_NEAR(speedup[key], ring_ms[r["pass"]] / r["time_ms"].get<double>(), 1e-9 * speedup[key]) << key;
    if (r["algo"] == "ring") {
      EXPECT_DOUBLE_EQ(r["speedup_vs_ring"].get<double>(), 1.0);
    }
  }
  for (const char* a : {"ring", "ring-zigzag", "merge", "rm+", "charm", "allgather-kv"})
    for (const char* p : {"fwd", "bwd"}) EXPECT_TRUE(seen.count(std::string(a) + "/" + p)) << a << " " << p;
  EXPECT_TRUE(seen.count("tasp/fwd") && seen.count("tasp-zigzag/fwd"));

  // Without a causal mask every (query, key) block costs the same, so the zigzag layout only
  // relabels tokens: same blocks per rank, same traffic, same time.
  EXPECT_NEAR(speedup["ring-zigzag/fwd"], 1.0, 1e-9);
  EXPECT_NEAR(speedup["ring-zigzag/bwd"], 1.0, 1e-9);
  EXPECT_NEAR(speedup["tasp-zigzag/fwd"], speedup["tasp/fwd"], 1e-9);
  // Ring is bound by the node link (25.7 GB/s attained in the calibrated preset): each of its
  // 15 steps moves a 248 MB K+V shard (16 x 1680 tokens x 12 heads x 192 x bf16, twice) across
  // it in 9.6 ms, against 1.3 ms of compute per step, so ring ~ 15 x 9.6 = 146 ms fwd. CHARM+
  // alone keeps K/V inside a node (docs/algorithms.md): it crosses the link once with its queries
  // and once with their results and hides most of the intra-node traffic behind compute. The
  // paper measured 2.35x fwd and 3.18x bwd here; the calibrated preset predicts 2.26x and 2.77x,
  // the best row of each pass (next: tasp 1.70x fwd, rm+ 1.66x bwd). The bounds leave about 15%.
  EXPECT_GE(speedup["charm/fwd"], 2.0);
  EXPECT_GE(speedup["charm/bwd"], 2.7);
  for (const auto& [key, x] : speedup) {
    const std::string pass = key.substr(key.find('/') + 1);
    EXPECT_GE(speedup["charm/" + pass], x) << key << " beats charm";
  }
}

TEST(SimCli, SimulateJsonHasTheIssueFields) {
  auto o = run("simulate --algo rm+ --uniform --ranks 8 --bw-gbps 50 --tflops 100 --seq 16k --json");
  ASSERT_EQ(o.code, 0) << o.out;
  auto j = nlohmann::json::parse(o.out);
  for (const char* k : {"schema", "algo", "pass", "time_ms", "exposed_comm_ms", "idle_ms", "ccr", "peak_mem_bytes",
                        "critical_path", "formula", "formula_paper"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_TRUE(j["idle_ms"].contains("mean") && j["idle_ms"].contains("max"));
  EXPECT_NEAR(j["time_ms"].get<double>(), j["formula"]["time_ms"].get<double>(), 0.01 * j["time_ms"].get<double>());
}

TEST(SimCli, SimulateExplainsItselfAndGivesAMemoryVerdict) {
  auto o = run("simulate --algo ring --topology " + topo("h100-2x8.json") +
               " --batch 4 --seq 32k --heads 16 --head-dim 128 --pass bwd --json");
  ASSERT_EQ(o.code, 0) << o.out;
  auto j = nlohmann::json::parse(o.out);
  // Ring backward on two nodes waits for dK/dV shards on the node's network link.
  EXPECT_EQ(j["bottleneck"]["class"], "nic") << j["bottleneck"].dump();
  EXPECT_TRUE(j["bottleneck"]["saturated"].get<bool>());
  EXPECT_EQ(j["bottleneck"]["traffic"][0]["kind"], "dkv");
  double path_ms = 0;
  for (const auto& p : j["critical_path_shares"]) path_ms += p["ms"].get<double>();
  EXPECT_NEAR(path_ms, j["time_ms"].get<double>(), 1e-6 * j["time_ms"].get<double>());
  EXPECT_TRUE(j["memory"]["known"].get<bool>());
  EXPECT_TRUE(j["memory"]["fits"].get<bool>());
  EXPECT_DOUBLE_EQ(j["memory"]["gpu_memory_gb"].get<double>(), 80);
  // The rest of the model holds 79.9 of the 80 GB: the answer still comes, with one warning line.
  o = run("simulate --algo ring --topology " + topo("h100-2x8.json") +
          " --batch 4 --seq 32k --heads 16 --head-dim 128 --pass bwd --reserved-gb 79.9");
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("charm: warning: DOES NOT FIT"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("bottleneck"), std::string::npos);
  EXPECT_NE(o.out.find("critical path:"), std::string::npos);
}

TEST(SimCli, CompareDefaultsToTheBalancedLayoutUnderACausalMask) {
  const std::string base = "compare --topology " + topo("h100-2x8.json") +
                           " --seq 32k --heads 16 --head-dim 128 --causal --algos ring,charm";
  auto j = nlohmann::json::parse(run(base + " --json").out);
  EXPECT_EQ(j["workload"]["layout"], "zigzag");
  j = nlohmann::json::parse(run(base + " --layout contiguous --json").out);
  EXPECT_EQ(j["workload"]["layout"], "contiguous");
  for (const auto& r : j["results"]) EXPECT_FALSE(r["bottleneck"].get<std::string>().empty()) << r.dump();
  // The best line ranks by fwd + bwd when both passes ran.
  auto o = run(base);
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("(fwd+bwd "), std::string::npos) << o.out;
}

TEST(SimCli, AdviseAcceptance) {
  const std::string args = "advise --topology " + topo("h100-2x8.json") +
                           " --batch 1 --seq 128k --heads 64 --kv-heads 8 --head-dim 128 --dtype bf16 --causal";
  auto o = run(args + " --json");
  ASSERT_EQ(o.code, 0) << o.out;
  auto j = nlohmann::json::parse(o.out);
  const auto& c = j["candidates"];
  ASSERT_GE(c.size(), 3u);
  for (std::size_t i = 0; i < c.size(); ++i) {
    for (const char* k :
         {"algo", "layout", "domains", "fwd_ms", "bwd_ms", "total_ms", "peak_mem_bytes", "fits", "bottleneck"})
      EXPECT_TRUE(c[i].contains(k)) << k;
    EXPECT_TRUE(c[i]["fits"].is_boolean());
    EXPECT_FALSE(c[i]["bottleneck"].get<std::string>().empty());
    EXPECT_NEAR(c[i]["total_ms"].get<double>(), c[i]["fwd_ms"].get<double>() + c[i]["bwd_ms"].get<double>(), 1e-9);
    if (i > 0) {
      EXPECT_LE(c[i - 1]["total_ms"].get<double>(), c[i]["total_ms"].get<double>());
    }
  }
  // Ulysses spreads 8 kv heads over 16 ranks by repeating each twice (as DeepSpeed-Ulysses does): a candidate.
  bool ulysses = false;
  for (const auto& cand : j["candidates"]) ulysses |= cand["algo"].get<std::string>() == "ulysses";
  EXPECT_TRUE(ulysses);
  o = run(args + " --top 3");
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("# best: "), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("#   why: "), std::string::npos) << o.out;
}

TEST(SimCli, APlanFileSimulatesAsTheSamePlanBuiltFromFlags) {
  const std::string w = " --seq 8k --heads 8 --head-dim 64 --dtype bf16 --causal --layout zigzag --pass both";
  const std::string file = charm::test::temp_path("plan_file.json");
  auto o = run("plan --algo charm --ranks 8 --domains 2" + w + " --out " + file);
  ASSERT_EQ(o.code, 0) << o.out;
  o = run("simulate --plan " + file + " --topology " + topo("l20-8-2numa.json") + " --json");
  ASSERT_EQ(o.code, 0) << o.out;
  const auto from_file = nlohmann::json::parse(o.out);
  o = run("simulate --algo charm" + w + " --topology " + topo("l20-8-2numa.json") + " --json");
  ASSERT_EQ(o.code, 0) << o.out;
  const auto from_flags = nlohmann::json::parse(o.out);
  // Bit for bit: the file holds the same plan, and the simulator is deterministic.
  EXPECT_EQ(from_file["time_ms"].get<double>(), from_flags["time_ms"].get<double>());
  EXPECT_EQ(from_file["peak_mem_bytes"], from_flags["peak_mem_bytes"]);
  EXPECT_EQ(from_file["ops"], from_flags["ops"]);
  std::remove(file.c_str());
}

TEST(SimCli, APlanFileCarriesItsPlacementAndTakesALayout) {
  const std::string w = " --algo ring --seq 8k --heads 4 --head-dim 64";
  const std::string placed = charm::test::temp_path("plan_placed.json");
  const std::string plain = charm::test::temp_path("plan_plain.json");
  ASSERT_EQ(run("plan --ranks 8" + w + " --gpus 0,2,4,6,8,10,12,14 --out " + placed).code, 0);
  ASSERT_EQ(run("plan --ranks 8" + w + " --out " + plain).code, 0);
  auto time_of = [](const std::string& args) {
    auto o = run("simulate --topology " + topo("h100-2x8.json") + " --json " + args);
    EXPECT_EQ(o.code, 0) << o.out;
    return o.code == 0 ? nlohmann::json::parse(o.out.substr(o.out.find('{'))) : nlohmann::json{};
  };
  // The file's placement, the same map given to the plain file, and the plan built from flags: bit for bit.
  const auto by_file = time_of("--plan " + placed);
  const auto by_flag = time_of("--plan " + plain + " --gpus 0,2,4,6,8,10,12,14");
  const auto built = time_of(w + " --gpus 0,2,4,6,8,10,12,14");
  ASSERT_TRUE(by_file.contains("time_ms") && by_flag.contains("time_ms") && built.contains("time_ms"));
  EXPECT_EQ(by_file["time_ms"].get<double>(), built["time_ms"].get<double>());
  EXPECT_EQ(by_flag["time_ms"].get<double>(), built["time_ms"].get<double>());
  EXPECT_EQ(by_file["placement"]["text"], "ranks 0-7 on GPUs 0,2,4,6,8,10,...,14 of 16; the others idle");
  // A group's plan file with --cp: every CP group of the layout at once, as --cp builds it.
  const auto deployed = time_of("--plan " + plain + " --cp 8");
  const auto layout = time_of(w + " --cp 8");
  ASSERT_TRUE(deployed.contains("time_ms") && layout.contains("time_ms"));
  EXPECT_EQ(deployed["time_ms"].get<double>(), layout["time_ms"].get<double>());
  EXPECT_EQ(deployed["placement"]["groups"], 2);
  EXPECT_FALSE(by_file["scope"].get<std::string>().empty());
  std::remove(placed.c_str());
  std::remove(plain.c_str());
}

TEST(SimCli, CuSeqlensFileIsTheDocumentMask) {
  const std::string w = " --algo charm --layout zigzag --seq 128k --json --topology " + topo("h100-2x8.json");
  auto a =
      run("simulate" + w + " --mask cu_seqlens:" + std::string(CHARM_SOURCE_DIR) + "/tests/data/cu_seqlens-4docs.txt");
  auto b = run("simulate" + w + " --mask document:65536,32768,16384,16384");
  ASSERT_EQ(a.code, 0) << a.out;
  ASSERT_EQ(b.code, 0) << b.out;
  EXPECT_EQ(nlohmann::json::parse(a.out), nlohmann::json::parse(b.out));
}

// compare on the balanced layout solves each algorithm's chunks once for both passes; an algorithm with a layout
// of its own (ring-zigzag: THD under documents) runs on it, so the two rings of packed documents sit side by side.
TEST(SimCli, CompareSolvesTheBalancedLayoutPerAlgorithm) {
  auto o = run("compare --topology " + topo("h100-2x8.json") +
               " --seq 8k --mask document:4096,2048,2048 --layout balanced --algos ring,ring-zigzag --json");
  ASSERT_EQ(o.code, 0) << o.out;
  const auto j = nlohmann::json::parse(o.out);
  ASSERT_EQ(j["results"].size(), 4u);
  std::map<std::string, double> t;
  for (const auto& r : j["results"]) {
    ASSERT_TRUE(r.contains("time_ms")) << r.dump();
    t[r["algo"].get<std::string>() + " " + r["pass"].get<std::string>()] = r["time_ms"].get<double>();
  }
  EXPECT_LT(t["ring fwd"], t["ring-zigzag fwd"]);
  EXPECT_LT(t["ring bwd"], t["ring-zigzag bwd"]);
}

TEST(SimCli, AdviseMarksTiesAndScalesToLayers) {
  const std::string args = "advise --topology " + topo("h100-2x8.json") +
                           " --batch 16 --seq 26880 --heads 12 --head-dim 192 --algos ring,charm,rm+ --json";
  auto o = run(args + " --layers 4 --tie 15");
  ASSERT_EQ(o.code, 0) << o.out;
  const auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["layers"], 4);
  EXPECT_EQ(j["tie_percent"], 15.0);
  EXPECT_NE(j["scope"].get<std::string>().find("4 attention layers"), std::string::npos) << j["scope"];
  const double best = j["candidates"][0]["total_ms"].get<double>();
  int ties = 0;
  for (const auto& c : j["candidates"]) {
    const double t = c["total_ms"].get<double>();
    EXPECT_EQ(c["tie"].get<bool>(), t <= best * 1.15) << c["label"];
    ties += c["tie"].get<bool>();
    EXPECT_DOUBLE_EQ(c["model_ms"].get<double>(), 4 * t);
  }
  EXPECT_GE(ties, 2) << "charm d=2 and d=4 are within 15% of each other here";
  EXPECT_EQ(j["best"], j["candidates"][0]);
  // The text marks the same rows and names them on the best line.
  o = run(args.substr(0, args.size() - 7) + " --tie 15");
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("#   tie: within 15% of the best"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("~"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("# scope: one attention layer's core attention (fwd+bwd)"), std::string::npos) << o.out;
  EXPECT_EQ(run(args + " --layers 0").code, 2);
}

TEST(SimCli, APlanThatDoesNotFillTheTopologySaysWhichGpusItUses) {
  const std::string file = charm::test::temp_path("plan_8_of_16.json");
  auto o = run("plan --algo ring --ranks 8 --seq 8k --heads 4 --head-dim 64 --out " + file);
  ASSERT_EQ(o.code, 0) << o.out;
  o = run("simulate --plan " + file + " --topology " + topo("h100-2x8.json"));
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("charm: warning: the plan does not fill h100-2x8: ranks 0-7 on GPUs 0-7 of 16; GPUs 8-15 idle"),
            std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("# placement: ranks 0-7 on GPUs 0-7 of 16; GPUs 8-15 idle"), std::string::npos) << o.out;
  o = run("simulate --plan " + file + " --topology " + topo("h100-2x8.json") + " --json");
  ASSERT_EQ(o.code, 0) << o.out;
  const auto from_file = nlohmann::json::parse(o.out.substr(o.out.find('{')));
  // --ranks with a topology is the same group on the same first GPUs, bit for bit.
  o = run("simulate --algo ring --ranks 8 --seq 8k --heads 4 --head-dim 64 --topology " + topo("h100-2x8.json") +
          " --json");
  ASSERT_EQ(o.code, 0) << o.out;
  const auto from_flags = nlohmann::json::parse(o.out);
  EXPECT_EQ(from_flags["time_ms"].get<double>(), from_file["time_ms"].get<double>());
  EXPECT_EQ(from_flags["placement"]["text"], "ranks 0-7 on GPUs 0-7 of 16; GPUs 8-15 idle");
  o = run("simulate --algo ring --seq 8k --heads 4 --head-dim 64 --topology " + topo("h100-2x8.json") + " --json");
  ASSERT_EQ(o.code, 0) << o.out;
  const auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["placement"]["gpus"], 16);
  EXPECT_EQ(j["placement"]["text"], "ranks 0-15 on GPUs 0-15 (all 16)");
  // charm's domains follow the nodes the group spans: one node of h100-2x8, two of h100-4x8.
  o = run("simulate --algo charm --ranks 8 --seq 8k --heads 4 --head-dim 64 --topology " + topo("h100-2x8.json") +
          " --json");
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_EQ(nlohmann::json::parse(o.out)["domains"], 1);
  o = run("simulate --algo charm --ranks 16 --seq 8k --heads 4 --head-dim 64 --topology " + topo("h100-4x8.json") +
          " --json");
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_EQ(nlohmann::json::parse(o.out)["domains"], 2);
  // A plan file fixes its ranks.
  o = run("simulate --plan " + file + " --ranks 8 --topology " + topo("h100-2x8.json"));
  EXPECT_EQ(o.code, 2) << o.out;
  EXPECT_NE(o.out.find("--ranks: the plan file"), std::string::npos) << o.out;
  std::remove(file.c_str());
}

TEST(SimCli, NoInfOrNanAtTheEdgesOfThePlausibleRanges) {
  // Inside the ranges of topology.hpp every simulated time is finite; the
  // corners are where a unit slip would have produced inf or nan.
  for (const char* bw : {"1e-3", "1e7"})
    for (const char* tflops : {"1e-3", "1e7"})
      for (const char* lat : {"0", "1e6"}) {
        const std::string cluster = std::string("--uniform --ranks 8 --bw-gbps ") + bw + " --tflops " + tflops +
                                    " --latency-us " + lat + " --hbm-gbps " + bw + " --seq 64M --causal";
        for (const std::string cmd : {"simulate --algo charm --layout zigzag --pass both --links", "compare"}) {
          const auto o = run(cmd + " " + cluster);
          ASSERT_EQ(o.code, 0) << cmd << " " << cluster << "\n" << o.out;
          for (const char* bad : {"inf", "nan"})
            EXPECT_EQ(o.out.find(bad), std::string::npos) << cmd << " " << cluster << "\n" << o.out;
          const auto j = run(cmd + " " + cluster + " --json");
          ASSERT_EQ(j.code, 0) << j.out;
          EXPECT_EQ(j.out.find("null"), std::string::npos) << cmd << " " << cluster << "\n"
                                                           << j.out;  // how JSON shows inf/nan
        }
      }
}

TEST(SimCli, TraceStructure) {
  const std::string path = charm::test::temp_path("trace.json");
  auto o = run("simulate --algo charm --topology " + topo("h20-2x8.json") + " --seq 16k --pass both --trace " + path);
  ASSERT_EQ(o.code, 0) << o.out;
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = nlohmann::json::parse(ss.str());
  ASSERT_TRUE(j["traceEvents"].is_array());
  std::set<int> pids, procs;
  std::map<long, int> starts, finishes;
  int slices = 0;
  for (const auto& e : j["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "X") {
      ++slices;
      EXPECT_GE(e["dur"].get<double>(), 0);
      EXPECT_GE(e["ts"].get<double>(), 0);
      pids.insert(e["pid"].get<int>());
      EXPECT_GE(e["tid"].get<int>(), 0);
      EXPECT_LT(e["tid"].get<int>(), 6);
    } else if (ph == "M" && e["name"] == "process_name") {
      procs.insert(e["pid"].get<int>());
    } else if (ph == "s") {
      ++starts[e["id"].get<long>()];
    } else if (ph == "f") {
      ++finishes[e["id"].get<long>()];
      EXPECT_EQ(e["bp"], "e");
    }
  }
  EXPECT_GT(slices, 0);
  EXPECT_EQ(pids.size(), 16u);  // one process per rank
  EXPECT_EQ(procs.size(), 16u);
  EXPECT_FALSE(starts.empty());
  EXPECT_EQ(starts, finishes);  // every arrow has both ends
  EXPECT_EQ(j["otherData"]["ranks"], 16);
  EXPECT_EQ(j["otherData"]["ranks_in_trace"], 16);
  EXPECT_EQ(j["otherData"]["symmetric"], false);
}

// A symmetric run simulates one class of ranks: its trace says it holds that class, of how many ranks.
TEST(SimCli, SymmetricTraceSaysWhatItHolds) {
  const std::string path = charm::test::temp_path("trace_sym.json");
  auto o = run("simulate --algo ring --uniform --ranks 64 --bw-gbps 50 --tflops 100 --seq 64k --symmetry on --trace " +
               path);
  ASSERT_EQ(o.code, 0) << o.out;
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = nlohmann::json::parse(ss.str());
  EXPECT_EQ(j["otherData"]["ranks"], 64);
  EXPECT_EQ(j["otherData"]["ranks_in_trace"], 1);
  EXPECT_EQ(j["otherData"]["symmetric"], true);
  std::set<int> pids;
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "X" || (e["ph"] == "M" && e["name"] == "process_name")) pids.insert(e["pid"].get<int>());
  EXPECT_EQ(pids, std::set<int>{0});
}

// A block the generated shape never reads (numa with one NUMA node, inter on one node) is read past and said in one
// warning (it used to be ignored silently); the topology still loads.
TEST(SimCli, UnusedTopologyBlocksAreNamedInAWarning) {
  const std::string dir = std::string(CHARM_SOURCE_DIR) + "/tests/data/bad/";
  for (const auto& [file, what] : std::vector<std::pair<std::string, std::string>>{
           {"topo-numa-unused.json", "numa: ignored: it applies with numa_per_node > 1 only"},
           {"topo-inter-one-node.json", "inter: ignored: it applies with nodes > 1 only"}}) {
    auto o = run("topo " + dir + file + " --route 0,1");
    EXPECT_EQ(o.code, 0) << o.out;
    EXPECT_NE(o.out.find("charm: warning: " + dir + file + ": " + what), std::string::npos) << o.out;
  }
}

// A link's utilisation is a share of what it can carry: dedicated links give every flow the full rate, so their
// capacity counts the flows at once (avg_gbps / bandwidth_gbps once reached 16 there).
TEST(SimCli, LinkUtilisationIsAShare) {
  for (const std::string& args :
       std::vector<std::string>{"--uniform --ranks 16 --bw-gbps 50 --tflops 100 --algo allgather-kv",
                                "--topology " + topo("h20-8.json") + " --algo charm",
                                "--topology " + topo("l20-8-2numa.json") + " --algo ring"}) {
    auto o = run("simulate --seq 16k --json " + args);
    ASSERT_EQ(o.code, 0) << o.out;
    const auto links = nlohmann::json::parse(o.out)["links"];
    ASSERT_FALSE(links.empty()) << args;
    for (const auto& l : links) {
      EXPECT_GE(l["utilisation"].get<double>(), 0) << l.dump();
      EXPECT_LE(l["utilisation"].get<double>(), 1) << l.dump();
      EXPECT_NEAR(l["utilisation"].get<double>(), l["avg_gbps"].get<double>() / l["capacity_gbps"].get<double>(), 1e-12)
          << l.dump();
    }
  }
}

// The closed form does not describe runs whose memory-bound ops cost time, nor passes that overlap; compare says so
// as simulate does.
TEST(SimCli, FormulaAppliesOnlyWhereItDescribesTheRun) {
  auto applies = [](const std::string& args) {
    auto o = run("simulate --uniform --ranks 8 --bw-gbps 1 --tflops 100 --seq 32k --json " + args);
    EXPECT_EQ(o.code, 0) << o.out;
    const auto j = nlohmann::json::parse(o.out);
    return j["formula"]["applies"].get<bool>() ? std::string("applies") : j["formula"]["why_not"].get<std::string>();
  };
  EXPECT_EQ(applies("--algo ring --pass both"), "applies");
  EXPECT_NE(applies("--algo ring --hbm-gbps 2000").find("--hbm-gbps"), std::string::npos);
  EXPECT_NE(applies("--algo merge --pass both").find("add the two passes"), std::string::npos);
  EXPECT_NE(applies("--algo rm+ --pass both").find("add the two passes"), std::string::npos);
  EXPECT_EQ(applies("--algo rm+ --pass fwd"), "applies");
  auto c =
      run("compare --uniform --ranks 8 --bw-gbps 1 --tflops 100 --seq 32k --algos ring,rm+ --hbm-gbps 2000 --json");
  ASSERT_EQ(c.code, 0) << c.out;
  const auto report = nlohmann::json::parse(c.out);  // named: a loop over a temporary's member dangles
  for (const auto& r : report["results"]) {
    EXPECT_EQ(r["formula"]["applies"], false) << r.dump();
    EXPECT_TRUE(r["formula"].contains("why_not")) << r.dump();
  }
}

TEST(SimCli, TopologyErrorsExit2WithOneLine) {
  const std::string dir = charm::test::temp_dir();
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
    return dir + "/" + name;
  };
  const std::string bad_bw = write(
      "bad_bw.json",
      R"({"gpu": {"tflops": 1}, "gpus": 2, "links": [{"a": "gpu0", "b": "gpu1", "bandwidth_gbps": 0, "sharing": "shared"}]})");
  const std::string unreach = write(
      "unreach.json",
      R"({"gpu": {"tflops": 1}, "gpus": 3, "links": [{"a": "gpu0", "b": "gpu1", "bandwidth_gbps": 1, "sharing": "shared"}]})");
  const std::string missing = write("missing.json", R"({"gpus": 2, "links": []})");
  const std::string malformed = write("malformed.json", R"({"gpu": )");
  for (const auto& [file, needle] :
       std::vector<std::pair<std::string, std::string>>{{bad_bw, "links[0].bandwidth_gbps: must be > 0"},
                                                        {unreach, "unreachable"},
                                                        {missing, "gpu: missing required field"},
                                                        {malformed, "malformed JSON"}}) {
    auto o = run("simulate --algo ring --topology " + file);
    EXPECT_EQ(o.code, 2) << o.out;
    EXPECT_NE(o.out.find(needle), std::string::npos) << o.out;
    EXPECT_NE(o.out.find(file), std::string::npos) << o.out;
    EXPECT_EQ(std::count(o.out.begin(), o.out.end(), '\n'), 1) << o.out;
  }
  EXPECT_EQ(run("simulate --algo ring --uniform --ranks 4 --tflops 1").code, 2);  // no --bw-gbps
  EXPECT_EQ(run("compare --topology " + topo("h20-8.json") + " --algos ring,nope").code, 2);
}

}  // namespace
