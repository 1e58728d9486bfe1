// Drives every row of the table in docs/errors.md through the CLI: each bad
// input must get its documented exit code and message, as one line
// `charm: error: <where>: <what>` (exit 2 and 3), with no stack trace and no
// second line. Exit-1 rows (a plan that loads but fails validation) print the
// validator's verdict instead; for those only the message is checked.
// Rows whose command starts with `mpirun` run under the mpirun CMake found
// (suite Mpi, its own CTest entry with the mpi label; skipped without one):
// every `charm` word of the command is this build's binary, and `mpirun -q`
// keeps mpirun's own notices out of the output. `$TMP` is an empty folder, `$FIFO` and
// `$HUGE` special files, `$IN/<path>` a copy of a repository file that must not change.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include "scheduler/planners/planners.hpp"

#include "test_util.hpp"

namespace charm::test {
namespace {

namespace fs = std::filesystem;

struct Row {
  int id = 0;
  std::string args;  // after "charm "
  int exit = 0;
  std::string message;  // a substring of the output
};

/// The text between the first pair of backticks, with `\|` unescaped.
std::string code_span(const std::string& cell) {
  const auto a = cell.find('`');
  const auto b = cell.rfind('`');
  if (a == std::string::npos || b == a) return {};
  std::string s = cell.substr(a + 1, b - a - 1);
  for (std::size_t p; (p = s.find("\\|")) != std::string::npos;) s.replace(p, 2, "|");
  return s;
}

/// Splits a markdown table row on unescaped '|'.
std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  for (std::size_t i = 1; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
      cur += "\\|";
      ++i;
    } else if (line[i] == '|') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += line[i];
    }
  }
  return out;
}

std::vector<Row> load_rows() {
  std::ifstream in(std::string(CHARM_SOURCE_DIR) + "/docs/errors.md");
  std::vector<Row> rows;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line.find("<!-- errors-table:begin -->") != std::string::npos) inside = true;
    if (line.find("<!-- errors-table:end -->") != std::string::npos) inside = false;
    if (!inside || line.rfind("| ", 0) != 0) continue;
    const auto c = cells(line);
    if (c.size() < 4) continue;
    Row r;
    try {
      r.id = std::stoi(c[0]);
      r.exit = std::stoi(c[2]);
    } catch (...) {
      continue;  // the header and the separator
    }
    r.args = code_span(c[1]);
    if (r.args.rfind("charm ", 0) == 0) r.args = r.args.substr(6);
    r.message = code_span(c[3]);
    rows.push_back(r);
  }
  return rows;
}

/// Test names show the command, not the bytes of the row.
void PrintTo(const Row& r, std::ostream* os) { *os << "charm " << r.args; }

bool is_mpi(const Row& r) { return r.args.rfind("mpirun ", 0) == 0; }

std::vector<Row> rows_where(bool mpi) {
  std::vector<Row> out;
  for (auto& r : load_rows())
    if (is_mpi(r) == mpi) out.push_back(r);
  return out;
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class ErrorsTable : public ::testing::TestWithParam<Row> {};

TEST(ErrorsTableFile, HasAtLeastFortyDistinctRows) {
  const auto rows = load_rows();
  EXPECT_GE(rows.size(), 40u);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    // Ids only ascend: a block of rows may start at a round number (200, ...),
    // so that rows added on separate branches keep distinct ids.
    if (i > 0)
      EXPECT_GT(rows[i].id, rows[i - 1].id) << "row ids ascend and are distinct";
    else
      EXPECT_EQ(rows[i].id, 1) << "the first row is 1";
    EXPECT_FALSE(rows[i].args.empty()) << "row " << rows[i].id;
    EXPECT_FALSE(rows[i].message.empty()) << "row " << rows[i].id;
  }
}

TEST_P(ErrorsTable, Row) {
  const Row& r = GetParam();
  const fs::path tmp = temp_path("errors_" + std::to_string(r.id));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  std::string args = r.args;
  // Special files a row may name, made beside $TMP (which must stay empty): $FIFO, a
  // FIFO with no writer; $HUGE, a sparse file of 2 GiB, past the input size cap.
  const fs::path fixtures = temp_path("errors_fixtures_" + std::to_string(r.id));
  fs::remove_all(fixtures);
  fs::create_directories(fixtures);
  auto replace = [&](const std::string& var, const std::string& value) {
    for (std::size_t p; (p = args.find(var)) != std::string::npos;) args.replace(p, var.size(), value);
  };
  if (args.find("$FIFO") != std::string::npos) {
    ASSERT_EQ(::mkfifo((fixtures / "fifo.json").c_str(), 0600), 0);
    replace("$FIFO", (fixtures / "fifo.json").string());
  }
  if (args.find("$HUGE") != std::string::npos) {
    std::ofstream((fixtures / "huge.json").string()) << "{";
    fs::resize_file(fixtures / "huge.json", std::uintmax_t{2} << 30);
    replace("$HUGE", (fixtures / "huge.json").string());
  }
  // $IN/<path>: a copy of the repository's <path>, for a row whose outputs name an input; it
  // must come out of the run byte for byte as it went in (a path that is no repository file is
  // only a place in $IN). The message may name $IN too.
  const fs::path in = fixtures / "in";
  std::vector<std::string> copies;
  for (std::size_t p = args.find("$IN/"); p != std::string::npos; p = args.find("$IN/", p + 1)) {
    const std::string rel = args.substr(p + 4, args.find_first_of(" =,", p + 4) - (p + 4));
    fs::create_directories((in / rel).parent_path());
    if (!fs::is_regular_file(fs::path(CHARM_SOURCE_DIR) / rel)) continue;  // a folder or a new file in $IN
    fs::copy_file(fs::path(CHARM_SOURCE_DIR) / rel, in / rel, fs::copy_options::skip_existing);
    copies.push_back(rel);
  }
  replace("$IN", in.string());
  std::string message = r.message;
  for (std::size_t p; (p = message.find("$IN")) != std::string::npos;) message.replace(p, 3, in.string());
  for (std::size_t p; (p = message.find("<algorithms>")) != std::string::npos;)
    message.replace(p, 12, fmt::format("{}", fmt::join(sched::algorithm_names(), ", ")));
  replace("$TMP", tmp.string());
  std::string cmd = "'" + std::string(CHARM_BIN) + "' " + args;
  if (is_mpi(r)) {
    const std::string mpirun = CHARM_MPIRUN;
    if (mpirun.empty() || !fs::exists(mpirun)) GTEST_SKIP() << "mpirun not found";
    // As in mpi_run_test: root in CI, 2 cores, no ptrace rights for CMA.
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    ::setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
    ::setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
    // A session directory of this process's own: mpiruns of other tests at once cannot remove it under us.
    const fs::path session = charm::test::temp_path("ompi");  // removed with the test's scratch directory
    fs::create_directories(session);
    ::setenv("OMPI_MCA_orte_tmpdir_base", session.c_str(), 1);
    std::string words = " " + args.substr(7) + " ";
    for (std::size_t p; (p = words.find(" charm ")) != std::string::npos;)
      words.replace(p, 7, " '" + std::string(CHARM_BIN) + "' ");
    cmd = "timeout 120 '" + mpirun + "' --oversubscribe" + words;
  }
  // Braces: a row's own redirection (`> /dev/full`) applies to stdout alone, the messages are still read.
  const auto res = run_cmd("cd '" + std::string(CHARM_SOURCE_DIR) + "' && { " + cmd + "; }");
  EXPECT_EQ(res.code, r.exit) << "charm " << args << "\n" << res.out;
  EXPECT_NE(res.out.find(message), std::string::npos)
      << "charm " << args << "\nexpected: " << message << "\ngot: " << res.out;
  for (const auto& rel : copies)
    EXPECT_EQ(read_file(in / rel), read_file(fs::path(CHARM_SOURCE_DIR) / rel)) << "an input was changed: " << rel;
  if (r.exit == 2 || r.exit == 3) {
    EXPECT_EQ(res.out.rfind("charm: error: ", 0), 0u) << res.out;
    EXPECT_EQ(std::count(res.out.begin(), res.out.end(), '\n'), 1) << "exactly one line:\n" << res.out;
  }
  // A failed command leaves no output file behind, not even a temporary one.
  if (r.exit != 0) {
    EXPECT_TRUE(fs::is_empty(tmp)) << "left: " << fs::directory_iterator(tmp)->path();
  }
  fs::remove_all(tmp);
  fs::remove_all(fixtures);
}

INSTANTIATE_TEST_SUITE_P(Docs, ErrorsTable, ::testing::ValuesIn(rows_where(false)),
                         [](const ::testing::TestParamInfo<Row>& p) { return "row" + std::to_string(p.param.id); });
INSTANTIATE_TEST_SUITE_P(Mpi, ErrorsTable, ::testing::ValuesIn(rows_where(true)),
                         [](const ::testing::TestParamInfo<Row>& p) { return "row" + std::to_string(p.param.id); });

}  // namespace
}  // namespace charm::test
