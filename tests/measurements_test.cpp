// The measurements file's writer (charm run --append-measurements) against its
// reader (charm calibrate): one column list, rows that read back as written,
// appends that keep one header, and a file of other columns refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "calibrate/measurements.hpp"
#include "test_util.hpp"

namespace charm::calib {
namespace {

Measurement sample() {
  Measurement m;
  m.algo = "ulysses";
  m.workload.pass = ir::PassKind::Both;
  m.workload.batch = 2;
  m.workload.seq = 32768;
  m.workload.heads = 16;
  m.workload.kv_heads = 4;
  m.workload.head_dim = 128;
  m.workload.dtype = ir::DType::FP16;
  m.workload.causal = true;
  m.workload.layout = ir::Layout::Zigzag;
  m.time_ms = 0.1 + 0.2;  // 0.30000000000000004: every digit must survive
  m.ranks = 8;
  m.domains = 2;
  return m;
}

void expect_same(const Measurement& a, const Measurement& b) {
  EXPECT_EQ(a.algo, b.algo);
  EXPECT_EQ(a.workload.pass, b.workload.pass);
  EXPECT_EQ(a.workload.batch, b.workload.batch);
  EXPECT_EQ(a.workload.seq, b.workload.seq);
  EXPECT_EQ(a.workload.heads, b.workload.heads);
  EXPECT_EQ(a.workload.kv_heads, b.workload.kv_heads);
  EXPECT_EQ(a.workload.head_dim, b.workload.head_dim);
  EXPECT_EQ(a.workload.dtype, b.workload.dtype);
  EXPECT_EQ(a.workload.causal, b.workload.causal);
  EXPECT_EQ(a.workload.layout, b.workload.layout);
  EXPECT_EQ(a.time_ms, b.time_ms);  // exactly
  EXPECT_EQ(a.ranks, b.ranks);
  EXPECT_EQ(a.domains, b.domains);
}

std::string temp_path(const char* name) {
  const auto dir = std::filesystem::path(charm::test::temp_dir()) / "measurements_test";
  std::filesystem::create_directories(dir);
  const auto p = dir / name;
  std::filesystem::remove(p);
  return p.string();
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(MeasurementsWriter, HeaderIsEveryColumnInOrder) {
  EXPECT_EQ(measurements_header(),
            "algo,pass,batch,seq,heads,kv_heads,head_dim,dtype,causal,layout,time_ms,ranks,domains");
  std::string names;
  // A run writes every column but metric (its rows are the run's time).
  for (std::size_t c = 0; c < kWrittenColumns; ++c) names += (c ? "," : "") + std::string(column_name(Column(c)));
  EXPECT_EQ(measurements_header(), names);
}

TEST(MeasurementsWriter, RowReadsBackAsWritten) {
  const Measurement m = sample();
  EXPECT_EQ(measurement_row(m), "ulysses,both,2,32768,16,4,128,fp16,1,zigzag,0.30000000000000004,8,2");
  auto set = parse_measurements(measurements_header() + "\n" + measurement_row(m) + "\n", "mem");
  ASSERT_TRUE(bool(set)) << set.error().message();
  ASSERT_EQ(set->rows.size(), 1u);
  expect_same(set->rows[0], m);
}

TEST(MeasurementsWriter, UnsetRanksAndDomainsAreEmptyCells) {
  Measurement m = sample();
  m.ranks = 0;
  m.domains = 0;
  m.time_ms = 149.97;
  EXPECT_EQ(measurement_row(m), "ulysses,both,2,32768,16,4,128,fp16,1,zigzag,149.97,,");
  auto set = parse_measurements(measurements_header() + "\n" + measurement_row(m) + "\n", "mem");
  ASSERT_TRUE(bool(set)) << set.error().message();
  expect_same(set->rows[0], m);
}

TEST(MeasurementsWriter, AppendsKeepOneHeader) {
  const std::string path = temp_path("runs.csv");
  Measurement a = sample(), b = sample();
  b.algo = "ring";
  b.workload.pass = ir::PassKind::Fwd;
  b.domains = 0;
  b.time_ms = 12.5;
  ASSERT_TRUE(append_measurement(path, a).ok());
  ASSERT_TRUE(append_measurement(path, b).ok());
  EXPECT_EQ(slurp(path), measurements_header() + "\n" + measurement_row(a) + "\n" + measurement_row(b) + "\n");
  auto set = load_measurements(path);
  ASSERT_TRUE(bool(set)) << set.error().message();
  ASSERT_EQ(set->rows.size(), 2u);
  expect_same(set->rows[0], a);
  expect_same(set->rows[1], b);
}

TEST(MeasurementsWriter, CommentsOnlyFileGetsTheHeaderAfterThem) {
  const std::string path = temp_path("commented.csv");
  std::ofstream(path) << "# my H200 runs\n# (no newline at the end)";
  ASSERT_TRUE(append_measurement(path, sample()).ok());
  EXPECT_EQ(slurp(path), "# my H200 runs\n# (no newline at the end)\n" + measurements_header() + "\n" +
                             measurement_row(sample()) + "\n");
  EXPECT_TRUE(load_measurements(path).ok());
}

TEST(MeasurementsWriter, OtherColumnsAreRefusedUntouched) {
  // The paper's files put ranks before time_ms, say: rows in our order would be misread.
  const std::string path = temp_path("other.csv");
  const std::string text = "algo,pass,batch,seq,heads,kv_heads,head_dim,dtype,causal,layout,ranks,time_ms\n"
                           "ring,fwd,1,4096,8,8,128,bf16,0,contiguous,8,1.5\n";
  std::ofstream(path) << text;
  const auto s = append_measurement(path, sample());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find(path), std::string::npos) << s.error().message();
  EXPECT_NE(s.error().message().find("append to a new file"), std::string::npos) << s.error().message();
  EXPECT_EQ(slurp(path), text);
}

}  // namespace
}  // namespace charm::calib
