// charm::calib's inputs: the measurements CSV and its errors, kernel times, and the nccl-tests reader and its fit.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <utility>

#include "calibrate/calibration.hpp"
#include "calibration_test_support.hpp"
#include "scheduler/planners/planners.hpp"
#include "sim/evaluate.hpp"
#include "topologies/topology_json.hpp"

namespace charm::calib {
namespace {

using nlohmann::json;
using test_support::kHeader;
using test_support::load_json;
using test_support::source_path;

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

// ---------------------------------------------------------------- kernel times

// The H100 table `charm bench-kernels --backend cuda` measured (docs/validation.md section 5): whole,
// every head dim, pass and mask at each block size, and a causal block never slower than a full one.
TEST(KernelTimes, TheMeasuredH100TableLoadsWhole) {
  auto k = load_kernel_times(std::string(CHARM_SOURCE_DIR) + "/calibration/kernels-h100-charm-cublas.csv");
  ASSERT_TRUE(k) << k.error().message();
  ASSERT_EQ(k->rows.size(), 72u);
  std::map<std::tuple<std::int64_t, ir::PassKind, std::int64_t>, std::map<bool, double>> by_shape;
  for (const auto& r : k->rows) {
    EXPECT_GT(r.time_ms, 0.0);
    by_shape[{r.workload.head_dim, r.workload.pass, r.q_tokens}][r.causal] = r.time_ms;
  }
  ASSERT_EQ(by_shape.size(), 36u);  // 3 head dims x 2 passes x 6 block sizes
  for (const auto& [shape, t] : by_shape) {
    ASSERT_EQ(t.size(), 2u);
    EXPECT_LE(t.at(true), t.at(false) * 1.05) << "head dim " << std::get<0>(shape) << ", " << std::get<2>(shape);
  }
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

}  // namespace
}  // namespace charm::calib
