// charm::calibrate: the measurements CSV and its errors, the nccl-tests reader and its
// alpha-beta fit, the bounds registry, and a calibration made from the simulator itself:
// measurements simulated on a topology scaled by factors the fit is not told, fitted from
// the unscaled base, must predict held-out workloads and algorithms within 3%.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <tuple>

#include "calibrate/calibration.hpp"
#include "calibrate/normal_equations.hpp"
#include "scheduler/planners/planners.hpp"
#include "sim/compute_model.hpp"
#include "sim/evaluate.hpp"
#include "topologies/topology_json.hpp"

namespace charm::calib {
namespace {

using nlohmann::json;

std::string source_path(const std::string& rel) { return std::string(CHARM_SOURCE_DIR) + "/" + rel; }

json load_json(const std::string& rel) {
  std::ifstream in(source_path(rel));
  return json::parse(in);
}

const char* kHeader = "algo,pass,batch,seq,heads,kv_heads,head_dim,dtype,causal,layout,time_ms\n";

// ---------------------------------------------------------------- measurements

TEST(Measurements, ParsesRowsCommentsAndOptionalColumns) {
  const std::string text = "# measured on a test cluster\n"
                           "\n"
                           "time_ms,algo,pass,batch,seq,heads,kv_heads,head_dim,dtype,causal,layout,ranks,domains\r\n"
                           "12.5,ring,fwd,2,4096,8,2,128,bf16,1,zigzag,8,\n"
                           "  # a comment between rows\n"
                           "3e1 , charm , bwd , 1 , 8192 , 4 , , 64 , fp16 , 0 , contiguous , , 2\n";
  auto s = parse_measurements(text, "m.csv");
  ASSERT_TRUE(s) << s.error().message();
  ASSERT_EQ(s->rows.size(), 2u);
  const auto& a = s->rows[0];
  EXPECT_EQ(a.line, 4);
  EXPECT_EQ(a.algo, "ring");
  EXPECT_EQ(a.workload.pass, ir::PassKind::Fwd);
  EXPECT_EQ(a.workload.batch, 2);
  EXPECT_EQ(a.workload.seq, 4096);
  EXPECT_EQ(a.workload.heads, 8);
  EXPECT_EQ(a.workload.kv_heads, 2);
  EXPECT_EQ(a.workload.head_dim, 128);
  EXPECT_TRUE(a.workload.causal);
  EXPECT_EQ(a.workload.layout, ir::Layout::Zigzag);
  EXPECT_DOUBLE_EQ(a.time_ms, 12.5);
  EXPECT_EQ(a.ranks, 8);
  EXPECT_EQ(a.domains, 0);  // empty: the domains the GPUs span
  const auto& b = s->rows[1];
  EXPECT_EQ(b.line, 6);
  EXPECT_EQ(b.algo, "charm");
  EXPECT_EQ(b.workload.kv_heads, 4);  // empty: = heads
  EXPECT_EQ(b.workload.dtype, ir::DType::FP16);
  EXPECT_DOUBLE_EQ(b.time_ms, 30);
  EXPECT_EQ(b.ranks, 0);
  EXPECT_EQ(b.domains, 2);
  EXPECT_EQ(s->where(b, Column::Domains), "m.csv:6:13");
  EXPECT_EQ(s->where(b, Column::TimeMs), "m.csv:6:1");
}

TEST(Measurements, ShippedPaperDataParse) {
  for (const char* f :
       {"calibration/paper-table5-h100.csv", "calibration/paper-table4-l20.csv", "calibration/paper-table4-h20.csv"}) {
    auto s = load_measurements(source_path(f));
    ASSERT_TRUE(s) << s.error().message();
    EXPECT_GE(s->rows.size(), 10u) << f;
    for (const auto& m : s->rows) {
      EXPECT_GT(m.ranks, 0) << f << ":" << m.line;
      EXPECT_GT(m.domains, 0) << f << ":" << m.line;
    }
  }
  EXPECT_EQ(load_measurements(source_path("calibration/paper-table5-h100.csv"))->rows.size(),
            32u);  // 16 table rows x {Ring, CHARM+}
}

/// The RFC 4180 forms of one file (tests/data/csv): every field quoted (with a note column whose
/// commas, doubled quotes and line break are read past), CRLF line ends, a UTF-8 byte order mark,
/// and columns of the user's own. Each reads as the plain file does.
TEST(Measurements, Rfc4180FormsReadAsThePlainFile) {
  auto plain = load_measurements(source_path("tests/data/csv/plain.csv"));
  ASSERT_TRUE(plain) << plain.error().message();
  EXPECT_TRUE(plain->warnings.empty());
  ASSERT_EQ(plain->rows.size(), 14u);
  for (const char* name : {"crlf", "bom", "quoted", "extra-columns"}) {
    SCOPED_TRACE(name);
    auto s = load_measurements(source_path(fmt::format("tests/data/csv/{}.csv", name)));
    ASSERT_TRUE(s) << s.error().message();
    ASSERT_EQ(s->rows.size(), plain->rows.size());
    for (std::size_t i = 0; i < s->rows.size(); ++i) {
      const auto &a = s->rows[i], &b = plain->rows[i];
      EXPECT_EQ(a.algo, b.algo);
      const auto &x = a.workload, &y = b.workload;
      EXPECT_EQ(std::tie(x.batch, x.seq, x.heads, x.kv_heads, x.head_dim, x.dtype, x.causal, x.layout, x.pass),
                std::tie(y.batch, y.seq, y.heads, y.kv_heads, y.head_dim, y.dtype, y.causal, y.layout, y.pass));
      EXPECT_EQ(a.time_ms, b.time_ms);  // the same digits: the same double
      EXPECT_EQ(a.ranks, b.ranks);
      EXPECT_EQ(a.domains, b.domains);
      EXPECT_EQ(a.metric, b.metric);
    }
    const bool extra = std::string(name) == "quoted" || std::string(name) == "extra-columns";
    EXPECT_EQ(s->warnings.size(), extra ? 1u : 0u);
  }
  // A quoted row's line is the line it starts on; the note's line break moves the rows after it.
  auto q = load_measurements(source_path("tests/data/csv/quoted.csv"));
  EXPECT_EQ(q->rows[1].line, 4);
  EXPECT_EQ(q->rows[2].line, 6);
  EXPECT_NE(q->warnings.front().find("ignoring column 'note, free text': not one charm reads"), std::string::npos)
      << q->warnings.front();
  auto e = load_measurements(source_path("tests/data/csv/extra-columns.csv"));
  EXPECT_NE(e->warnings.front().find("ignoring columns 'gpu', 'host'"), std::string::npos) << e->warnings.front();
  EXPECT_EQ(e->where(e->rows[0], Column::Seq), source_path("tests/data/csv/extra-columns.csv") + ":2:5");
}

TEST(Measurements, QuotedFieldsInText) {
  const std::string text =
      "\xEF\xBB\xBF\"algo\",pass,batch,seq,heads,kv_heads,head_dim,dtype,causal,layout,time_ms,\"a \"\"note\"\"\"\r\n"
      "\"ring\" ,fwd,1,4096,8,8,128,bf16,0,contiguous, \"1.5\",\"x,\r\ny\"\r\n"
      "ring,fwd,1,4096,8,8,128,bf16,0,contiguous,2,\r\n";
  auto s = parse_measurements(text, "q.csv");
  ASSERT_TRUE(s) << s.error().message();
  ASSERT_EQ(s->rows.size(), 2u);
  EXPECT_EQ(s->rows[0].time_ms, 1.5);
  EXPECT_EQ(s->rows[1].line, 4);
  ASSERT_EQ(s->warnings.size(), 1u);
  EXPECT_NE(s->warnings[0].find("'a \"note\"'"), std::string::npos) << s->warnings[0];
}

struct BadCsv {
  const char* name;
  std::string text;
  std::string message;  // the whole error message
};

class MeasurementErrors : public ::testing::TestWithParam<BadCsv> {};

TEST_P(MeasurementErrors, NameFileLineAndColumn) {
  auto s = parse_measurements(GetParam().text, "runs.csv");
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().message(), GetParam().message);
}

const std::string kRow = "ring,fwd,1,4096,8,8,128,bf16,0,contiguous,";
INSTANTIATE_TEST_SUITE_P(
    Csv, MeasurementErrors,
    ::testing::Values(
        BadCsv{"empty", "# only a comment\n",
               "runs.csv: no header line (expected the columns: algo, pass, batch, seq, heads, kv_heads, head_dim, "
               "dtype, causal, layout, time_ms, ranks, domains, metric)"},
        BadCsv{"no_rows", std::string(kHeader), "runs.csv:1: no measurements after the header"},
        BadCsv{"unclosed_quote", std::string(kHeader) + kRow + "\"1.5\n",
               "runs.csv:2:11: a quoted field is not closed (a \" with no closing \" before the end of the file)"},
        BadCsv{"text_after_quote", std::string(kHeader) + kRow + "\"1\"5\n",
               "runs.csv:2:11: text after a quoted field's closing quote (a quote inside a quoted field is written "
               "\"\")"},
        BadCsv{"stray_quote", std::string(kHeader) + kRow + "1\"5\n",
               "runs.csv:2:11: a quote inside an unquoted field ('1\"5'): quote the whole field, with \"\" for each "
               "quote in it"},
        BadCsv{"control_in_value", std::string(kHeader) + "\"ri\nng\",fwd,1,4096,8,8,128,bf16,0,contiguous,1\n",
               "runs.csv:2:1: algo: unknown algorithm 'ri?ng' (expected one of: " +
                   fmt::format("{}", fmt::join(sched::algorithm_names(), ", ")) + ")"},
        BadCsv{"empty_column_name", "algo,,pass\n", "runs.csv:1:2: an empty column name in the header"},
        BadCsv{"duplicate_column", "algo,pass,algo\n", "runs.csv:1:3: column 'algo' appears twice"},
        BadCsv{"missing_column", "algo,pass,batch,seq,heads,kv_heads,head_dim,dtype,causal,layout\n",
               "runs.csv:1:11: missing column 'time_ms' (the header needs: algo, pass, batch, seq, heads, kv_heads, "
               "head_dim, dtype, causal, layout, time_ms, ranks, domains, metric; ranks, domains and metric are "
               "optional)"},
        BadCsv{"too_few_fields", std::string(kHeader) + "ring,fwd,1\n",
               "runs.csv:2:4: expected 11 fields as in the header (line 1), got 3"},
        BadCsv{"too_many_fields", std::string(kHeader) + kRow + "1,2\n",
               "runs.csv:2:12: expected 11 fields as in the header (line 1), got 12"},
        BadCsv{"unknown_algo", std::string(kHeader) + "bogus,fwd,1,4096,8,8,128,bf16,0,contiguous,1\n",
               "runs.csv:2:1: algo: unknown algorithm 'bogus' (expected one of: " +
                   fmt::format("{}", fmt::join(sched::algorithm_names(), ", ")) + ")"},
        BadCsv{"bad_pass", std::string(kHeader) + "ring,up,1,4096,8,8,128,bf16,0,contiguous,1\n",
               "runs.csv:2:2: pass: unknown pass 'up' (expected fwd, bwd or both)"},
        BadCsv{"bad_batch", std::string(kHeader) + "ring,fwd,1.5,4096,8,8,128,bf16,0,contiguous,1\n",
               "runs.csv:2:3: batch: must be a whole number > 0, got '1.5'"},
        BadCsv{"zero_seq", std::string(kHeader) + "ring,fwd,1,0,8,8,128,bf16,0,contiguous,1\n",
               "runs.csv:2:4: seq: must be in [1, 1099511627776], got 0"},
        BadCsv{"bad_dtype", std::string(kHeader) + "ring,fwd,1,4096,8,8,128,fp8,0,contiguous,1\n",
               "runs.csv:2:8: dtype: unknown dtype 'fp8' (expected bf16, fp16 or fp32)"},
        BadCsv{"bad_causal", std::string(kHeader) + "ring,fwd,1,4096,8,8,128,bf16,yes,contiguous,1\n",
               "runs.csv:2:9: causal: must be 0 or 1, got 'yes'"},
        BadCsv{"missing_time", std::string(kHeader) + kRow + "\n", "runs.csv:2:11: time_ms: missing value"},
        BadCsv{"text_time", std::string(kHeader) + kRow + "fast\n",
               "runs.csv:2:11: time_ms: must be a number of milliseconds, got 'fast'"},
        BadCsv{"negative_time", std::string(kHeader) + kRow + "-5\n", "runs.csv:2:11: time_ms: must be > 0, got -5"},
        BadCsv{"zero_time", std::string(kHeader) + kRow + "0\n", "runs.csv:2:11: time_ms: must be > 0, got 0"},
        BadCsv{"nan_time", std::string(kHeader) + kRow + "nan\n",
               "runs.csv:2:11: time_ms: must be a number of milliseconds, got 'nan'"},
        BadCsv{"zero_ranks",
               "algo,pass,batch,seq,heads,kv_heads,head_dim,dtype,causal,layout,time_ms,ranks\n" + kRow + "1,0\n",
               "runs.csv:2:12: ranks: must be in [1, 4096], got 0"},
        BadCsv{"negative_domains",
               "algo,pass,batch,seq,heads,kv_heads,head_dim,dtype,causal,layout,time_ms,domains\n" + kRow + "1,-2\n",
               "runs.csv:2:12: domains: must be a whole number > 0, got '-2'"}),
    [](const ::testing::TestParamInfo<BadCsv>& p) { return std::string(p.param.name); });

/// Errors found against the base topology: GPUs, domains, the planner.
struct BadRow {
  const char* name;
  std::string topology;
  std::string row;  // ranks,domains appended
  std::string message;
};

class RowErrors : public ::testing::TestWithParam<BadRow> {};

TEST_P(RowErrors, NameFileLineAndColumn) {
  const auto& p = GetParam();
  auto s = parse_measurements(
      "algo,pass,batch,seq,heads,kv_heads,head_dim,dtype,causal,layout,time_ms,ranks,domains\n" + p.row + "\n",
      "runs.csv");
  ASSERT_TRUE(s) << s.error().message();
  CalibrationOptions opt;
  opt.leave_one_out = LeaveOneOut::Off;
  auto c = calibrate(load_json(p.topology), p.topology, *s, {}, opt);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().message(), p.message);
}

INSTANTIATE_TEST_SUITE_P(
    Base, RowErrors,
    ::testing::Values(
        BadRow{
            "not_whole_nodes", "topologies/h100-2x8.json", "ring,fwd,1,4096,8,8,128,bf16,0,contiguous,1,20,",
            "runs.csv:2:12: ranks 20: more GPUs than topologies/h100-2x8.json has (16), and not whole nodes of 8 GPUs"},
        BadRow{"uneven_domains", "topologies/h100-2x8.json", "ring,fwd,1,4800,8,8,128,bf16,0,contiguous,1,12,",
               "runs.csv:2:12: the first 12 GPUs of h100-2x8 span 2 domains of unequal size (8 + 4); give the domains "
               "column or ranks that fill "
               "whole domains"},
        BadRow{"no_inter", "topologies/l20-4.json", "ring,fwd,1,4096,8,8,128,bf16,0,contiguous,1,8,",
               "runs.csv:2:12: ranks 8 needs topologies/l20-4.json re-generated with 2 nodes: topologies/l20-4.json: "
               "inter: missing required field"},
        BadRow{"domains_do_not_divide", "topologies/h100-2x8.json", "charm,fwd,1,4096,8,8,128,bf16,0,contiguous,1,16,3",
               "runs.csv:2:13: 3 domains do not divide 16 ranks"},
        BadRow{"planner_refuses", "topologies/h100-2x8.json", "merge,fwd,1,4800,8,8,128,bf16,0,contiguous,1,12,1",
               "runs.csv:2:12: merge needs a power-of-two rank count, got 12"},
        BadRow{"seq_does_not_split", "topologies/h100-2x8.json", "ring,fwd,1,1000,8,8,128,bf16,0,contiguous,1,16,2",
               "runs.csv:2:4: sequence length 1000 cannot be split into 16 contiguous chunks for 16 ranks"},
        BadRow{"gqa", "topologies/h100-2x8.json", "ring,fwd,1,4096,8,3,128,bf16,0,contiguous,1,16,2",
               "runs.csv:2:6: 8 query heads cannot be grouped over 3 kv heads (must divide)"}),
    [](const ::testing::TestParamInfo<BadRow>& p) { return std::string(p.param.name); });

TEST(DefaultDomains, FollowTheGpusARunUses) {
  auto t = topo::load_topology(source_path("topologies/nominal/h100-2x8.json"));
  ASSERT_TRUE(t);
  EXPECT_EQ(sim::default_domains(*t), 2);
  EXPECT_EQ(sim::default_domains(*t, 16), 2);
  EXPECT_EQ(sim::default_domains(*t, 8), 1);   // the first node
  EXPECT_EQ(sim::default_domains(*t, 12), 2);  // 8 + 4: calibrate refuses it without a domains column
  EXPECT_EQ(sim::default_domains(*t, 4), 1);
  auto l = topo::load_topology(source_path("topologies/l20-8-2numa.json"));
  ASSERT_TRUE(l);
  EXPECT_EQ(sim::default_domains(*l, 4), 1);  // one NUMA node: the l20-4 system
  EXPECT_EQ(sim::default_domains(*l, 8), 2);
}

TEST(TopologyLoader, KeepsACalibrationBlock) {
  json doc = load_json("topologies/nominal/h100-2x8.json");
  doc["calibration"] = {{"tool", "charm calibrate"}, {"fitted", json::array()}};
  EXPECT_TRUE(topo::parse_topology(doc, "c.json"));
  doc["calibration"] = 5;
  auto bad = topo::parse_topology(doc, "c.json");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message(), "c.json: calibration: must be an object");
  json explicit_doc = {
      {"gpu", {{"tflops", 100}}},
      {"gpus", 2},
      {"switches", {"s"}},
      {"links",
       {{{"a", "gpu0"}, {"b", "s"}, {"bandwidth_gbps", 10}}, {{"a", "gpu1"}, {"b", "s"}, {"bandwidth_gbps", 10}}}},
      {"calibration", json::object()}};
  for (auto& l : explicit_doc["links"]) l["sharing"] = "shared";
  auto e = topo::parse_topology(explicit_doc, "e.json");
  EXPECT_TRUE(e) << e.error().message();
}

// ---------------------------------------------------------------- nccl-tests

TEST(NcclTests, ParsesTheSampleLogAndFitsAlphaBeta) {
  auto log = load_nccl_tests(source_path("tests/data/nccl-tests-sendrecv-sample.txt"));
  ASSERT_TRUE(log) << log.error().message();
  ASSERT_EQ(log->samples.size(), 17u);
  EXPECT_EQ(log->samples.front().bytes, 1024);
  EXPECT_EQ(log->samples.front().line, 13);
  EXPECT_DOUBLE_EQ(log->samples.back().time_us, 3365.44);
  EXPECT_DOUBLE_EQ(log->samples.back().busbw_gbps, 19.94);
  auto ab = fit_alpha_beta(*log);
  ASSERT_TRUE(ab) << ab.error().message();
  // The sample is 10 us + size / 20 GB/s, printed to 0.01 us.
  EXPECT_NEAR(ab->alpha_us, 10.0, 0.05);
  EXPECT_NEAR(ab->beta_gbps, 20.0, 0.02);
  EXPECT_NEAR(ab->bus_factor, 1.0, 1e-9);
  EXPECT_NEAR(ab->busbw_gbps, 20.0, 0.02);
  EXPECT_DOUBLE_EQ(ab->peak_busbw_gbps, 19.94);
  EXPECT_EQ(ab->rows, 17);
}

TEST(NcclTests, OlderFormatMpirunPrefixAndBusFactor) {
  // nccl-tests before 2.13: no root column, "error" for "#wrong"; all_gather's busbw = algbw * (n-1)/n.
  const std::string text = "[1,0]<stdout>:#       size         count      type   redop     time   algbw   busbw  error "
                           "    time   algbw   busbw  error\n"
                           "[1,0]<stdout>:#        (B)    (elements)                       (us)  (GB/s)  (GB/s)        "
                           "    (us)  (GB/s)  (GB/s)\n"
                           "[1,0]<stdout>:host:1:1 [0] NCCL INFO Launch mode Parallel\n"
                           "[1,0]<stdout>:     1000000        250000     float    none    60.00   16.67   14.58  0e+00 "
                           "   60.00   16.67   14.58  0e+00\n"
                           "[1,0]<stdout>:     2000000        500000     float    none   110.00   18.18   15.91  0e+00 "
                           "     N/A     N/A     N/A    N/A\n";
  auto log = parse_nccl_tests(text, "ag.txt");
  ASSERT_TRUE(log) << log.error().message();
  ASSERT_EQ(log->samples.size(), 2u);
  EXPECT_EQ(log->samples[1].line, 5);
  auto ab = fit_alpha_beta(*log);
  ASSERT_TRUE(ab);
  EXPECT_NEAR(ab->alpha_us, 10, 1e-6);
  EXPECT_NEAR(ab->beta_gbps, 20, 1e-6);
  EXPECT_NEAR(ab->bus_factor, 15.91 / 18.18, 1e-9);
}

TEST(NcclTests, ErrorsNameFileAndLine) {
  const std::string header =
      "#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong\n";
  auto err = [](const std::string& text) {
    auto log = parse_nccl_tests(text, "x.txt");
    if (log) {
      auto ab = fit_alpha_beta(*log);
      return ab ? std::string("ok") : ab.error().message();
    }
    return log.error().message();
  };
  EXPECT_EQ(err("# nothing\n"),
            "x.txt: no nccl-tests table rows (expected the output of sendrecv_perf, alltoall_perf, ...)");
  // Several runs in one log: each header after rows, or a size that does not grow, starts one.
  const std::string row1 = "1024 256 float sum -1 10 0.1 0.1 0 10 0.1 0.1 0\n",
                    row2 = "2048 512 float sum -1 11 0.2 0.2 0 11 0.2 0.2 0\n";
  EXPECT_EQ(err(header + row1 + row2 + header + row1 + row2),
            "x.txt: holds 2 nccl-tests runs (they start on lines 1, 4): one fit needs one run; split it into one file "
            "per run");
  EXPECT_EQ(err(header + header + row1 + row2 + row1 + row2 + row1),
            "x.txt: holds 3 nccl-tests runs (they start on lines 1, 5, 7): one fit needs one run; split it into one "
            "file per run");
  EXPECT_EQ(err(header + "# (B) (elements)\n" + header + row1 + row2), "ok");  // header lines before rows: one run
  EXPECT_EQ(err("1024 256 float sum -1 10 0.1 0.1 0 10 0.1 0.1 0\n"),
            "x.txt:1: a table row before the nccl-tests header (# size count type ... time algbw busbw ...)");
  EXPECT_EQ(err(header + "1024 256 float sum -1 10 0.1\n"),
            "x.txt:2: expected 13 fields as in the header (line 1), got 7");
  EXPECT_EQ(err(header + "1024 256 float sum -1 slow 0.1 0.1 0 10 0.1 0.1 0\n"),
            "x.txt:2: time: must be a number of microseconds > 0, got 'slow'");
  EXPECT_EQ(err(header + "1024 256 float sum -1 -3 0.1 0.1 0 10 0.1 0.1 0\n"),
            "x.txt:2: time: must be a number of microseconds > 0, got '-3'");
  EXPECT_EQ(err(header + "1024 256 float sum -1 10 x 0.1 0 10 0.1 0.1 0\n"),
            "x.txt:2: algbw: must be a number >= 0, got 'x'");
  EXPECT_EQ(err(header + "1e3x 256 float sum -1 10 0.1 0.1 0 10 0.1 0.1 0\n"),
            "x.txt:2: size: must be a whole number of bytes, got '1e3x'");
  EXPECT_EQ(err(header +
                "1024 256 float sum -1 10 0.1 0.1 0 10 0.1 0.1 0\n1024 256 float sum -1 11 0.1 0.1 0 10 0.1 0.1 0\n"),
            "x.txt: every row has the same size (1024 B): a latency and a bandwidth need at least two sizes");
  EXPECT_EQ(err(header +
                "1024 256 float sum -1 50 0.1 0.1 0 10 0.1 0.1 0\n2048 256 float sum -1 10 0.1 0.1 0 10 0.1 0.1 0\n"),
            "x.txt: the times do not grow with the message size: no bandwidth to fit");
}

TEST(NcclTests, FixLinkClassBandwidthAndLatency) {
  auto log = load_nccl_tests(source_path("tests/data/nccl-tests-sendrecv-sample.txt"));
  ASSERT_TRUE(log);
  const json h100 = load_json("topologies/nominal/h100-2x8.json");
  // Inter-node route (one NIC per GPU): GPU -> fabric -> GPU, two inter links: 10 us / 2.
  auto inter = fixed_from_nccl_tests(h100, "h100.json", "inter", *log);
  ASSERT_TRUE(inter) << inter.error().message();
  ASSERT_EQ(inter->size(), 2u);
  EXPECT_EQ((*inter)[0].path, "inter.bandwidth_gbps");
  EXPECT_NEAR((*inter)[0].value, 20, 0.02);
  EXPECT_DOUBLE_EQ((*inter)[0].base, 42.5);
  EXPECT_EQ((*inter)[1].path, "inter.latency_us");
  EXPECT_NEAR((*inter)[1].value, 5, 0.03);
  EXPECT_EQ((*inter)[1].detail["links_on_route"], 2);
  // NUMA route: GPU -> switch (intra 5 us) -> host -> switch -> GPU (intra 5 us): (10 - 10) / 2 = 0.
  auto numa = fixed_from_nccl_tests(load_json("topologies/l20-8-2numa.json"), "l20.json", "numa", *log);
  ASSERT_TRUE(numa) << numa.error().message();
  EXPECT_NEAR((*numa)[1].value, 0, 0.03);
  EXPECT_NEAR((*numa)[1].detail["other_latency_us"].get<double>(), 10, 1e-9);
  auto no_numa = fixed_from_nccl_tests(h100, "h100.json", "numa", *log);
  ASSERT_FALSE(no_numa);
  EXPECT_EQ(no_numa.error().message(), "--nccl-tests: h100.json has no 'numa' block");
  auto bad = fixed_from_nccl_tests(h100, "h100.json", "rack", *log);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message(), "--nccl-tests: unknown link class 'rack' (expected intra, numa or inter)");
}

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

TEST(KernelTimes, ParseWriteAndRefuseWithTheCell) {
  const std::string text = "\xEF\xBB\xBF# a FlashAttention benchmark\r\n"
                           "pass,batch,heads,kv_heads,head_dim,dtype,q_tokens,kv_tokens,mask,time_ms\r\n"
                           "fwd,2,12,,192,bf16,4096,8192,full,1.25\r\n"
                           "bwd,1,12,4,192,bf16,4096,4096,causal,2.5\n";
  auto k = parse_kernel_times(text, "k.csv");
  ASSERT_TRUE(k) << k.error().message();
  ASSERT_EQ(k->rows.size(), 2u);
  EXPECT_EQ(k->rows[0].line, 3);
  EXPECT_EQ(k->rows[0].workload.kv_heads, 12);  // empty: = heads
  EXPECT_EQ(k->rows[0].kv_tokens, 8192);
  EXPECT_FALSE(k->rows[0].causal);
  EXPECT_TRUE(k->rows[1].causal);
  EXPECT_EQ(k->rows[1].workload.pass, ir::PassKind::Bwd);
  // What the writer writes reads back the same.
  auto again = parse_kernel_times(kernel_times_header() + "\n" + kernel_time_row(k->rows[1]) + "\n", "again.csv");
  ASSERT_TRUE(again) << again.error().message();
  EXPECT_EQ(again->rows[0].time_ms, 2.5);
  EXPECT_EQ(again->rows[0].workload.kv_heads, 4);
  // A benchmark's own columns are read past, named in one warning.
  auto extra = parse_kernel_times("pass,batch,heads,kv_heads,head_dim,dtype,q_tokens,kv_tokens,mask,time_ms,TFLOPs\n"
                                  "fwd,1,8,8,128,bf16,1024,1024,full,1,\"350,5\"\n",
                                  "x.csv");
  ASSERT_TRUE(extra) << extra.error().message();
  ASSERT_EQ(extra->warnings.size(), 1u);
  EXPECT_NE(extra->warnings[0].find("x.csv:1: ignoring column TFLOPs"), std::string::npos) << extra->warnings[0];
  EXPECT_EQ(extra->rows[0].time_ms, 1.0);
  const std::string head = "pass,batch,heads,kv_heads,head_dim,dtype,q_tokens,kv_tokens,mask,time_ms\n";
  const std::pair<std::string, std::string> bad[] = {
      {head + "fwd,1,8,8,128,bf16,1024,2048,causal,1\n",
       "k.csv:2:8: kv_tokens: a causal row is a diagonal block, q_tokens == kv_tokens (got 1024 and 2048)"},
      {head + "fwd,1,8,8,128,bf16,1024,1024,sliding,1\n", "k.csv:2:9: mask: must be full or causal, got 'sliding'"},
      {head + "both,1,8,8,128,bf16,1024,1024,full,1\n", "k.csv:2:1: pass: must be fwd or bwd, got 'both'"},
      {head + "fwd,1,8,3,128,bf16,1024,1024,full,1\n", "k.csv:2:4: kv_heads: 3 does not divide heads 8"},
      {head + "fwd,1,8,8,128,bf16,1024,1024,full,-1\n", "k.csv:2:10: time_ms: must be > 0, got -1"},
      {"pass,batch,heads,head_dim,dtype,q_tokens,kv_tokens,mask,time_ms\n",
       "k.csv:1:10: missing column 'kv_heads' (the header needs: "
       "pass,batch,heads,kv_heads,head_dim,dtype,q_tokens,kv_tokens,mask,time_ms)"},
      {head, "k.csv:1: no kernel times after the header"},
      {"pass,batch,heads,kv_heads,head_dim,dtype,q_tokens,kv_tokens,mask,time_ms\nfwd,1,8,8,128,bf16,\"1024,1024,full,"
       "1\n",
       "k.csv:2:7: a quoted field is not closed (a \" with no closing \" before the end of the file)"}};
  for (const auto& [csv, want] : bad) {
    auto e = parse_kernel_times(csv, "k.csv");
    ASSERT_FALSE(e) << csv;
    EXPECT_EQ(e.error().message(), want);
  }
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
