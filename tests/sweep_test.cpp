// charm sweep: row counts, columns, ring = 1, determinism across --jobs, list
// parsing, flag validation, --set hardware sweeps, layout lists, the PNG,
// running without gnuplot, and Ctrl-C.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <spawn.h>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "scheduler/planners/planners.hpp"
#include "test_util.hpp"

extern char** environ;

namespace charm::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string topo(const std::string& f) { return std::string(CHARM_SOURCE_DIR) + "/topologies/" + f; }
const std::string kTwoTopos = topo("l20-8-2numa.json") + "," + topo("h20-8.json");

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> split(const std::string& line, char sep = ',') {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(line);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  return out;
}

struct Csv {
  std::vector<std::string> header;
  std::vector<std::map<std::string, std::string>> rows;
};
Csv read_csv(const std::string& path) {
  Csv c;
  std::istringstream in(slurp(path));
  std::string line;
  if (!std::getline(in, line)) return c;
  c.header = split(line);
  while (std::getline(in, line)) {
    const auto f = split(line);
    std::map<std::string, std::string> row;
    for (std::size_t i = 0; i < c.header.size() && i < f.size(); ++i) row[c.header[i]] = f[i];
    EXPECT_EQ(f.size(), c.header.size()) << line;
    c.rows.push_back(std::move(row));
  }
  return c;
}

/// A fresh folder per test, so "no file left behind" can be checked by listing it.
std::string fresh_dir(const std::string& name) {
  const fs::path d = temp_path(name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

const std::vector<std::string> kColumns{
    "topology", "ranks",           "domains", "batch",           "seq",  "heads",         "kv_heads",
    "head_dim", "dtype",           "causal",  "layout",          "algo", "pass",          "ccr",
    "time_ms",  "exposed_comm_ms", "idle_ms", "speedup_vs_ring", "fits", "peak_mem_bytes"};

// Acceptance 1: >= 2,000 configurations over 2 topologies with --jobs 2.
// 2 topologies x 5 batch x 5 seq x 4 heads x 2 head_dim x 4 kv_heads x 2 layouts = 3,200 configurations.
TEST(Sweep, TwoThousandConfigurationsOneRowPerConfigAlgoPass) {
  const auto dir = fresh_dir("big");
  const std::string csv = dir + "/s.csv", js = dir + "/s.json";
  const auto r = run_charm("sweep --topology " + kTwoTopos +
                           " --batch 1..16*2 --seq 4k..64k*2 --heads 8..64*2 --kv-heads 1,2,4,8 --head-dim 64,128"
                           " --layout contiguous,zigzag --causal --algos ring,charm,rm+ --pass both --jobs 2 --out " +
                           csv + " --json-out " + js);
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(slurp(js));
  const std::size_t configs = j["configs"], skipped = j["skipped"];
  EXPECT_EQ(configs, 3200u);
  EXPECT_EQ(skipped, 0u);  // 8 GPUs and power-of-two domains: every algorithm plans every configuration
  const Csv c = read_csv(csv);
  EXPECT_EQ(c.header, kColumns);
  ASSERT_EQ(c.rows.size(), configs * 3 * 2 - skipped);
  EXPECT_EQ(j["rows"].size(), c.rows.size());
  std::map<std::string, std::size_t> per_algo, per_topo;
  for (const auto& row : c.rows) {
    ++per_algo[row.at("algo")];
    ++per_topo[row.at("topology")];
    EXPECT_GT(std::stod(row.at("time_ms")), 0);
    EXPECT_GT(std::stod(row.at("ccr")), 0);
    EXPECT_GE(std::stod(row.at("exposed_comm_ms")), 0);
    if (row.at("algo") == "ring") {
      EXPECT_EQ(row.at("speedup_vs_ring"), "1");
      EXPECT_EQ(std::stod(row.at("speedup_vs_ring")), 1.0);
    } else {
      EXPECT_GT(std::stod(row.at("speedup_vs_ring")), 0);
    }
  }
  EXPECT_EQ(per_algo["ring"], 6400u);
  EXPECT_EQ(per_algo["charm"], 6400u);
  EXPECT_EQ(per_topo["l20-8-2numa"], 9600u);
  EXPECT_EQ(per_topo["h20-8"], 9600u);
}

TEST(Sweep, RowsDoNotDependOnJobs) {
  const auto dir = fresh_dir("jobs");
  const std::string args =
      "sweep --topology " + kTwoTopos + " --batch 1,2 --seq 8k,32k --heads 8,16 --head-dim 128 --pass both --out ";
  ASSERT_EQ(run_charm(args + dir + "/a.csv --jobs 1").code, 0);
  ASSERT_EQ(run_charm(args + dir + "/b.csv --jobs 2").code, 0);
  ASSERT_EQ(run_charm(args + dir + "/c.csv --jobs 7").code, 0);
  const std::string a = slurp(dir + "/a.csv");
  EXPECT_GT(a.size(), 1000u);
  EXPECT_EQ(a, slurp(dir + "/b.csv"));
  EXPECT_EQ(a, slurp(dir + "/c.csv"));
}

TEST(Sweep, SpeedupAndCcrAgreeWithCompare) {
  const auto dir = fresh_dir("compare");
  ASSERT_EQ(run_charm("sweep --topology " + topo("h20-8.json") +
                      " --batch 2 --seq 16k --heads 16 --head-dim 128 --causal --layout zigzag --pass bwd"
                      " --algos ring,charm --out " +
                      dir + "/s.csv")
                .code,
            0);
  const auto cmp = run_charm(
      "compare --topology " + topo("h20-8.json") +
      " --batch 2 --seq 16k --heads 16 --head-dim 128 --causal --layout zigzag --pass bwd --algos ring,charm --json");
  ASSERT_EQ(cmp.code, 0) << cmp.out;
  const json j = json::parse(cmp.out);
  const Csv c = read_csv(dir + "/s.csv");
  ASSERT_EQ(c.rows.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(c.rows[i].at("algo"), j["results"][i]["algo"]);
    EXPECT_DOUBLE_EQ(std::stod(c.rows[i].at("time_ms")), j["results"][i]["time_ms"].get<double>());
    EXPECT_DOUBLE_EQ(std::stod(c.rows[i].at("speedup_vs_ring")), j["results"][i]["speedup_vs_ring"].get<double>());
    EXPECT_DOUBLE_EQ(std::stod(c.rows[i].at("ccr")), j["results"][i]["ccr"].get<double>());
  }
}

TEST(Sweep, FitsColumnJudgesPeakMemoryAgainstTheGpu) {
  const auto dir = fresh_dir("fits");
  const std::string base =
      "sweep --topology " + topo("h100-2x8.json") + " --batch 1 --seq 256k --heads 16 --head-dim 128 --algos ring";
  ASSERT_EQ(run_charm(base + " --out " + dir + "/a.csv").code, 0);
  // The rest of the model holds all but 10 MB of the 80 GB: ring's buffers no longer fit.
  ASSERT_EQ(run_charm(base + " --reserved-gb 79.99 --out " + dir + "/b.csv").code, 0);
  const Csv a = read_csv(dir + "/a.csv"), b = read_csv(dir + "/b.csv");
  ASSERT_EQ(a.rows.size(), 1u);
  ASSERT_EQ(b.rows.size(), 1u);
  EXPECT_EQ(a.rows[0].at("fits"), "1");
  EXPECT_EQ(b.rows[0].at("fits"), "0");
  EXPECT_GT(std::stod(a.rows[0].at("peak_mem_bytes")), 10e6);
  EXPECT_EQ(a.rows[0].at("peak_mem_bytes"), b.rows[0].at("peak_mem_bytes"));
}

TEST(Sweep, JsonOnStdoutAndNothingComputedIsAnError) {
  const std::string base =
      "sweep --topology " + topo("h100-2x8.json") + " --batch 1 --seq 16k --heads 16 --head-dim 128 ";
  // --json is a switch, as in simulate, compare and advise: the rows on stdout, nothing else there.
  auto r = run_charm(base + "--algos ring,charm --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = json::parse(r.out.substr(r.out.find('{')));
  EXPECT_EQ(j.at("rows").size(), 2u);
  // Every combination refused: exit 2 with the reason, not an empty table.
  const auto dir = fresh_dir("none");
  r = run_charm(base + "--algos tasp --pass bwd --out " + dir + "/s.csv");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("no row"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/s.csv"));
}

TEST(Sweep, ListsExpandRangesAndSuffixes) {
  const auto dir = fresh_dir("lists");
  const auto r =
      run_charm("sweep --topology " + topo("h20-8.json") +
                " --batch 1..3 --seq 4k..32k*2,48k --heads 8,8,16 --head-dim 64..192+64 --algos ring --out " + dir +
                "/s.csv --json-out " + dir + "/s.json");
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(slurp(dir + "/s.json"));
  std::set<std::int64_t> batch, seq, heads, hd;
  for (const auto& row : j["rows"]) {
    batch.insert(row["batch"].get<std::int64_t>());
    seq.insert(row["seq"].get<std::int64_t>());
    heads.insert(row["heads"].get<std::int64_t>());
    hd.insert(row["head_dim"].get<std::int64_t>());
  }
  EXPECT_EQ(batch, (std::set<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(seq, (std::set<std::int64_t>{4096, 8192, 16384, 32768, 49152}));
  EXPECT_EQ(heads, (std::set<std::int64_t>{8, 16}));  // duplicates are dropped
  EXPECT_EQ(hd, (std::set<std::int64_t>{64, 128, 192}));
  EXPECT_EQ(j["configs"], 3 * 5 * 2 * 3);
}

// A 6-GPU machine: merge and rm+ need a power-of-two rank count, charm a power-of-two per domain.
// kv_heads 3 does not divide 8 heads: refused for every algorithm. Refusals are counted, not fatal.
TEST(Sweep, RefusedCombinationsAreSkippedAndCounted) {
  const auto dir = fresh_dir("skip");
  const std::string six = dir + "/six.json";
  std::ofstream(six)
      << R"({"schema": 1, "name": "six", "gpu": {"model": "g", "tflops": {"bf16": 100, "fp16": 100, "fp32": 50}, "efficiency": 0.5},
    "nodes": 1, "gpus_per_node": 6, "intra": {"bandwidth_gbps": 100, "latency_us": 2, "sharing": "dedicated"}})";
  const auto r = run_charm("sweep --topology " + six + "," + topo("h20-8.json") +
                           " --batch 1 --seq 24k --heads 8 --kv-heads 2,3 --head-dim 128 --out " + dir +
                           "/s.csv --json-out " + dir + "/s.json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("skipped"), std::string::npos) << r.out;
  const json j = json::parse(slurp(dir + "/s.json"));
  // 4 configurations x every algorithm; refused: six/kv3 and h20-8/kv3 all of them (3 kv heads
  // do not group 8 heads); six/kv2 merge, rm+, charm (6 ranks in 1 domain), ulysses and
  // usp (8 query heads over 6 ranks); h20-8/kv2 runs everything (ulysses and usp repeat each of the 2 kv heads
  // 4 times over their 8 ranks, as DeepSpeed-Ulysses does).
  EXPECT_EQ(j["configs"], 4);
  const std::size_t skipped = j["skipped"];
  const std::size_t algos = charm::sched::algorithm_names().size();
  const Csv c = read_csv(dir + "/s.csv");
  EXPECT_EQ(c.rows.size() + skipped, 4u * algos);
  EXPECT_EQ(skipped, algos + 5u + algos);
  for (const auto& row : c.rows) EXPECT_EQ(row.at("kv_heads"), "2");
}

TEST(Sweep, NamesThatHoldCommasOrQuotesAreQuotedAndControlCharactersRefused) {
  const auto dir = fresh_dir("csv_quoting");
  json t = json::parse(slurp(topo("h100-2x8.json")));
  t["name"] = "h100,2x8 \"big\"";
  std::ofstream(dir + "/named.json") << t.dump();
  t.erase("name");  // named after its file, then
  std::ofstream(dir + "/a\"b.json") << t.dump();
  std::ofstream(dir + "/a\nb.json") << t.dump();
  const std::string args = " -b 1 -s 8k --heads 8 --head-dim 64 --algos ring --pass fwd --out " + dir + "/s.csv";
  // RFC 4180: a field with a comma or a quote is quoted and its quotes doubled, so the columns stay put.
  auto r = run_charm("sweep --topology " + dir + "/named.json" + args);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(slurp(dir + "/s.csv").find("\n\"h100,2x8 \"\"big\"\"\",16,"), std::string::npos) << slurp(dir + "/s.csv");
  r = run_charm("sweep --topology '" + dir + "/a\"b.json'" + args);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(slurp(dir + "/s.csv").find("\n\"" + dir + "/a\"\"b.json\",16,"), std::string::npos)
      << slurp(dir + "/s.csv");
  // A line break in a name would split the row: refused, in one line that shows it escaped.
  r = run_charm("sweep --topology '" + dir + "/a\nb.json'" + args);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("a\\nb.json: the file name holds a control character (byte 0x0a"), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
}

TEST(Sweep, RejectsBadFlagsNamingTheFlag) {
  const auto dir = fresh_dir("bad");
  const std::string base = "sweep --topology " + topo("h20-8.json") + " --out " + dir + "/s.csv ";
  const std::string ok = "--batch 1 --seq 8k --heads 8 --head-dim 128 ";
  const std::vector<std::pair<std::string, std::string>> cases{
      {"--batch 0 --seq 8k --heads 8 --head-dim 128", "--batch"},
      {"--batch 1 --seq 64k..4k*2 --heads 8 --head-dim 128", "--seq"},
      {"--batch 1 --seq 4k..64k*1 --heads 8 --head-dim 128", "--seq"},
      {"--batch 1 --seq 4k..64k* --heads 8 --head-dim 128", "--seq"},
      {"--batch 1 --seq 8q --heads 8 --head-dim 128", "--seq"},
      {"--batch 1 --seq 8k --heads 8,,16 --head-dim 128", "--heads"},
      {"--batch 1 --seq 8k --heads x --head-dim 128", "--heads"},
      {"--batch 1 --seq 8k --heads 8 --head-dim -4", "--head-dim"},
      {ok + "--kv-heads 0", "--kv-heads"},
      {ok + "--algos ring,nope", "--algos"},
      {ok + "--pass sideways", "--pass"},
      {ok + "--dtype fp8", "--dtype"},
      {ok + "--layout spiral", "--layout"},
      {ok + "--jobs 0", "--jobs"},
      {ok + "--plot x.jpg", "--plot"},
      {ok + "--json-out /nonexistent/dir/s.json", "--json-out"},
      {ok + "--no-such-flag", "no-such-flag"},
  };
  for (const auto& [args, flag] : cases) {
    const auto r = run_charm(base + args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(flag), std::string::npos) << args << "\n" << r.out;
  }
  const auto r = run_charm("sweep --topology /nonexistent.json --out " + dir + "/s.csv " + ok);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--topology"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir + "/s.csv"));
}

// The acceptance command of --set: one column per swept field, one hardware point per value.
TEST(Sweep, SetSweepsATopologyFieldAsAColumn) {
  const auto dir = fresh_dir("set");
  const auto r =
      run_charm("sweep --topology " + topo("h100-2x8.json") +
                " --batch 1 --seq 64k --heads 16 --head-dim 128 --set inter.bandwidth_gbps=25,50,100 --algos ring,charm"
                " --out " +
                dir + "/s.csv --json-out " + dir + "/s.json");
  ASSERT_EQ(r.code, 0) << r.out;
  const Csv c = read_csv(dir + "/s.csv");
  auto columns = kColumns;
  columns.insert(columns.begin() + 1, "inter.bandwidth_gbps");
  EXPECT_EQ(c.header, columns);
  ASSERT_EQ(c.rows.size(), 3u * 2u);
  std::map<std::string, double> ring_ms;
  for (const auto& row : c.rows) {
    EXPECT_EQ(row.at("topology"), "h100-2x8");
    if (row.at("algo") == "ring") {
      EXPECT_EQ(row.at("speedup_vs_ring"), "1");
      ring_ms[row.at("inter.bandwidth_gbps")] = std::stod(row.at("time_ms"));
    }
  }
  ASSERT_EQ(ring_ms.size(), 3u);
  // Ring crosses the NIC every step, so more bandwidth is less time, until the calibrated
  // intra.injection_gbps (about 47 GB/s) becomes the slower link. Past it, the stack's overlap
  // costs move the figure a little either way (faster steps line communication up with more of
  // the computation, which both slow), never by much.
  EXPECT_GT(ring_ms["25"], 1.3 * ring_ms["50"]);
  EXPECT_NEAR(ring_ms["100"] / ring_ms["50"], 1.0, 0.1);
  const json j = json::parse(slurp(dir + "/s.json"));
  EXPECT_EQ(j["configs"], 3);
  EXPECT_EQ(j["columns"][1], "inter.bandwidth_gbps");
  EXPECT_EQ(j["rows"][0]["inter.bandwidth_gbps"], 25);
}

TEST(Sweep, SetsMultiplyAndTheFilesOwnValueChangesNothing) {
  const auto dir = fresh_dir("sets");
  const std::string base = "sweep --topology " + topo("h100-2x8.json") +
                           " --batch 1 --seq 16k,64k --heads 16 --head-dim 128 --algos ring,charm";
  ASSERT_EQ(
      run_charm(base + " --set inter.bandwidth_gbps=25..100*2 --set gpu.tflops.bf16=312,989 --out " + dir + "/two.csv")
          .code,
      0);
  const Csv two = read_csv(dir + "/two.csv");
  EXPECT_EQ(std::vector<std::string>(two.header.begin(), two.header.begin() + 3),
            (std::vector<std::string>{"topology", "inter.bandwidth_gbps", "gpu.tflops.bf16"}));
  EXPECT_EQ(two.rows.size(), 3u * 2u * 2u * 2u);  // 3 bandwidths x 2 peaks x 2 seq x 2 algorithms
  std::set<std::pair<std::string, std::string>> points;
  for (const auto& row : two.rows) points.emplace(row.at("inter.bandwidth_gbps"), row.at("gpu.tflops.bf16"));
  EXPECT_EQ(points.size(), 6u);
  EXPECT_TRUE(points.contains({"50", "312"}));
  // h100-2x8 has launch_us 10: setting it to 10 must reproduce the plain sweep, column aside.
  ASSERT_EQ(run_charm(base + " --out " + dir + "/plain.csv").code, 0);
  ASSERT_EQ(run_charm(base + " --set gpu.launch_us=10 --out " + dir + "/same.csv").code, 0);
  const Csv plain = read_csv(dir + "/plain.csv"), same = read_csv(dir + "/same.csv");
  ASSERT_EQ(plain.rows.size(), same.rows.size());
  for (std::size_t i = 0; i < plain.rows.size(); ++i) {
    auto row = same.rows[i];
    EXPECT_EQ(row.at("gpu.launch_us"), "10");
    row.erase("gpu.launch_us");
    EXPECT_EQ(row, plain.rows[i]);
  }
}

// Forced-layout algorithms (ring-zigzag, tasp-zigzag) once per layout they run on; a layout named twice counts once.
TEST(Sweep, LayoutListsNeverDuplicateARow) {
  const auto dir = fresh_dir("layouts");
  const auto r =
      run_charm("sweep --topology " + topo("h20-8.json") +
                " --batch 1 --seq 16k,32k --heads 8 --head-dim 128 --causal --layout contiguous,zigzag,zigzag"
                " --algos ring,ring-zigzag,tasp-zigzag,charm --out " +
                dir + "/s.csv");
  ASSERT_EQ(r.code, 0) << r.out;
  const Csv c = read_csv(dir + "/s.csv");
  std::set<std::vector<std::string>> keys;
  std::map<std::string, int> per_algo;
  for (const auto& row : c.rows) {
    std::vector<std::string> key;
    for (const auto& col : kColumns)
      if (col == "ccr")
        break;
      else
        key.push_back(row.at(col));
    EXPECT_TRUE(keys.insert(key).second) << "duplicate row: " << row.at("algo") << " " << row.at("layout") << " "
                                         << row.at("seq");
    ++per_algo[row.at("algo")];
  }
  EXPECT_EQ(per_algo["ring"], 4);  // 2 seq x 2 layouts
  EXPECT_EQ(per_algo["charm"], 4);
  EXPECT_EQ(per_algo["ring-zigzag"], 2);
  EXPECT_EQ(per_algo["tasp-zigzag"], 2);
}

bool gnuplot_available() { return run_cmd("command -v gnuplot").code == 0; }

// Acceptance 2: --plot writes a real PNG.
TEST(Sweep, PlotWritesAPng) {
  if (!gnuplot_available()) GTEST_SKIP() << "gnuplot is not installed (scripts/setup.sh installs gnuplot-nox)";
  const auto dir = fresh_dir("plot");
  const auto r = run_charm("sweep --topology " + kTwoTopos +
                           " --batch 1,4 --seq 4k..64k*2 --heads 8,32 --head-dim 128 --causal --pass both --out " +
                           dir + "/s.csv --plot " + dir + "/s.png --plot-script " + dir + "/s.gp");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string png = slurp(dir + "/s.png");
  ASSERT_GT(png.size(), 20000u) << "a blank figure is a few KiB";
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(png.substr(12, 4), "IHDR");
  EXPECT_NE(png.find("IEND"), std::string::npos);
  const std::string gp = slurp(dir + "/s.gp");
  EXPECT_NE(gp.find("speedup vs CCR"), std::string::npos);
  EXPECT_NE(gp.find("speedup vs sequence length"), std::string::npos);
  EXPECT_NE(gp.find("l20-8-2numa"), std::string::npos);
  for (const auto& e : fs::directory_iterator(dir))  // no temporary left behind
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  EXPECT_NE(gp.find("run time vs sequence length"), std::string::npos);
  // With --set: the swept field's views (the acceptance command of --set).
  ASSERT_EQ(run_charm("sweep --topology " + topo("h100-2x8.json") +
                      " --batch 1 --seq 64k --heads 16 --head-dim 128"
                      " --set inter.bandwidth_gbps=25,50,100 --algos ring,charm --out " +
                      dir + "/b.csv --plot " + dir + "/b.png --plot-script " + dir + "/b.gp")
                .code,
            0);
  EXPECT_EQ(slurp(dir + "/b.png").substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  const std::string bgp = slurp(dir + "/b.gp");
  EXPECT_NE(bgp.find("speedup vs inter.bandwidth_gbps"), std::string::npos);
  EXPECT_NE(bgp.find("run time vs inter.bandwidth_gbps"), std::string::npos);
  EXPECT_EQ(bgp.find("speedup vs sequence length"), std::string::npos);  // one sequence length: nothing to draw against
  // SVG too.
  ASSERT_EQ(run_charm("sweep --topology " + topo("h20-8.json") +
                      " --batch 1 --seq 8k,16k --heads 8 --head-dim 128 --out " + dir + "/t.csv --plot " + dir +
                      "/t.svg")
                .code,
            0);
  EXPECT_NE(slurp(dir + "/t.svg").find("<svg"), std::string::npos);
}

// A topology name is text from a file: it reaches the gnuplot script's titles and legends, and gnuplot runs
// backquoted text inside double quotes as a shell command. Neither it nor a line break may get out.
TEST(Sweep, PlotNeverRunsANameAsACommand) {
  if (!gnuplot_available()) GTEST_SKIP() << "gnuplot is not installed (scripts/setup.sh installs gnuplot-nox)";
  const auto dir = fresh_dir("hostile");
  const std::string marker = dir + "/ran";
  auto doc = nlohmann::json::parse(slurp(topo("h20-8.json")));
  doc["name"] = "h20 `touch " + marker + "` $(touch " + marker + ") @x ' \\ \"";
  {
    std::ofstream f(dir + "/t.json");
    f << doc.dump(1);
  }
  const auto r =
      run_charm("sweep --topology " + dir + "/t.json --batch 1 --seq 8k,16k --heads 8 --head-dim 128 --out " + dir +
                "/s.csv --plot " + dir + "/s.png --plot-script " + dir + "/s.gp");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(fs::exists(marker)) << "gnuplot ran a command from the topology name";
  EXPECT_EQ(slurp(dir + "/s.png").substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  const std::string gp = slurp(dir + "/s.gp");
  EXPECT_EQ(gp.find("`touch"), std::string::npos) << "a backquote in double quotes is written as \\140";
  // A control character in a name never reaches a terminal or a script: the file is refused.
  for (const std::string& bad : {std::string("a\nb"), std::string("a\x1b[2Jb"), std::string("a\rb")}) {
    doc["name"] = bad;
    {
      std::ofstream f(dir + "/c.json");
      f << doc.dump(1);
    }
    const auto c = run_charm("simulate --topology " + dir + "/c.json --algo ring --seq 8k --heads 8 --head-dim 128");
    EXPECT_EQ(c.code, 2) << c.out;
    EXPECT_NE(c.out.find("control character"), std::string::npos) << c.out;
    EXPECT_EQ(c.out.find('\x1b'), std::string::npos) << "the byte itself is not echoed";
  }
}

TEST(Sweep, WithoutGnuplotTheCsvIsStillWritten) {
  const auto dir = fresh_dir("nognuplot");
  const auto r =
      run_cmd("env PATH=" + dir + " " + std::string(CHARM_BIN) + " sweep --topology " + topo("h20-8.json") +
              " --batch 1 --seq 8k --heads 8 --head-dim 128 --out " + dir + "/s.csv --plot " + dir + "/s.png");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("gnuplot is not on PATH"), std::string::npos) << r.out;
  EXPECT_EQ(read_csv(dir + "/s.csv").rows.size(), charm::sched::algorithm_names().size());  // each, fwd
  EXPECT_FALSE(fs::exists(dir + "/s.png"));
}

// gnuplot is given no path of the user's: the figure comes back on its stdout, so a line break in
// --plot names the file asked for, and nothing is left under a temporary name.
TEST(Sweep, PlotWithALineBreakInItsPathWritesThatFile) {
  if (!gnuplot_available()) GTEST_SKIP() << "gnuplot is not installed (scripts/setup.sh installs gnuplot-nox)";
  const auto dir = fresh_dir("plot_newline");
  fs::create_directories(dir + "/tmp");
  const auto r = run_charm("sweep --topology " + topo("h20-8.json") +
                           " --batch 1 --seq 8k,16k --heads 8 --head-dim 128 --algos ring,charm --out " + dir +
                           "/s.csv --plot '" + dir + "/a\nb.png'");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(slurp(dir + "/a\nb.png").substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  std::set<std::string> left;
  for (const auto& e : fs::directory_iterator(dir)) left.insert(e.path().filename().string());
  EXPECT_EQ(left, (std::set<std::string>{"s.csv", "a\nb.png", "tmp"}));
}

// A gnuplot that never ends is stopped after --timeout-s; the CSV stands, and its temporaries go.
TEST(Sweep, AGnuplotThatHangsIsStoppedAndLeavesNothing) {
  const auto dir = fresh_dir("plot_hang");
  fs::create_directories(dir + "/bin");
  fs::create_directories(dir + "/tmp");
  {
    std::ofstream f(dir + "/bin/gnuplot");
    f << "#!/bin/sh\nexec sleep 60\n";
  }
  fs::permissions(dir + "/bin/gnuplot", fs::perms::owner_all);
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = run_cmd("env TMPDIR=" + dir + "/tmp PATH=" + dir + "/bin:/usr/bin:/bin " + std::string(CHARM_BIN) +
                         " sweep --topology " + topo("h20-8.json") +
                         " --batch 1 --seq 8k --heads 8 --head-dim 128 --timeout-s 1 --out " + dir + "/s.csv --plot " +
                         dir + "/s.png");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("gnuplot did not finish within 1 s (--timeout-s)"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir + "/s.png"));
  EXPECT_TRUE(fs::exists(dir + "/s.csv"));
  EXPECT_TRUE(fs::is_empty(dir + "/tmp")) << "left: " << fs::directory_iterator(dir + "/tmp")->path();
}

/// Starts a long sweep, waits for its start line on stderr, sends `sig`, and returns the exit status.
int interrupt_sweep(const std::string& dir, int sig) {
  int err[2];
  if (::pipe(err) != 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, err[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&fa, err[0]);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  // About 100,000 configurations: minutes of work, so the signal lands mid-way.
  std::vector<std::string> args{
      CHARM_BIN, "sweep",        "--topology", kTwoTopos,       "--batch", "1..64",       "--seq",  "1k..1M*2",
      "--heads", "8..64*2",      "--head-dim", "64,128",        "--pass",  "both",        "--jobs", "2",
      "--out",   dir + "/s.csv", "--json-out", dir + "/s.json", "--plot",  dir + "/s.png"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, CHARM_BIN, &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(err[1]);
  if (rc != 0) return -1;
  std::string seen;
  char buf[256];
  while (seen.find('\n') == std::string::npos) {  // the start line: handlers are installed, workers run
    const auto n = ::read(err[0], buf, sizeof buf);
    if (n <= 0) break;
    seen.append(buf, std::size_t(n));
  }
  ::usleep(300 * 1000);
  ::kill(pid, sig);
  while (::read(err[0], buf, sizeof buf) > 0) {}
  ::close(err[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

TEST(Sweep, InterruptLeavesNoFile) {
  for (int sig : {SIGINT, SIGTERM}) {
    const auto dir = fresh_dir("interrupt" + std::to_string(sig));
    EXPECT_EQ(interrupt_sweep(dir, sig), 128 + sig);
    EXPECT_TRUE(fs::is_empty(dir)) << "left: "
                                   << (fs::is_empty(dir) ? "" : fs::directory_iterator(dir)->path().string());
  }
}

}  // namespace
}  // namespace charm::test
