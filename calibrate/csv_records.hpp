#pragma once
// The CSV records of the measurement files (`calibrate -m`, `calibrate --kernels`): RFC 4180
// fields separated by commas, a field in double quotes may hold commas, line breaks and doubled
// quotes (""), lines end in LF or CRLF, and a UTF-8 byte order mark at the start is skipped.
// Besides the RFC: blank lines and lines whose first non-blank character is '#' are comments,
// and blanks around an unquoted field are trimmed. Errors name file:line:column.

#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "scheduler/ir/workload.hpp"
#include "support/expected.hpp"

namespace charm::calib {

/// `s` without the blanks (and a CR) around it.
[[nodiscard]] std::string_view trim(std::string_view s);
/// Text of a file echoed in a message: a control character (a quoted field may hold a line
/// break) is '?', so that every message stays one line.
[[nodiscard]] std::string printable(std::string_view s);

/// A cell holding a whole number in [1, max]: digits only (no sign, no suffix, no fraction).
/// The error has no place; the caller names the cell.
[[nodiscard]] Expected<std::int64_t> parse_count(std::string_view s, std::int64_t max);

/// A cell holding a time in milliseconds, > 0 and finite. The error has no place.
[[nodiscard]] Expected<double> parse_time_ms(std::string_view s);

/// Makes the error of a cell from what is wrong with it (the caller knows the file, line and column).
using BadCell = std::function<Error(const std::string&)>;

/// A cell holding a whole number in [1, max] (parse_count) into `out`; `bad` names the cell.
[[nodiscard]] Status read_count_cell(std::string_view v, std::int64_t max, std::int64_t& out, const BadCell& bad);

/// The workload's cells that both measurement files hold.
enum class WorkloadCell : std::uint8_t { Pass, DType, Batch, Heads, KvHeads, HeadDim };

/// One workload cell into its field of `w`, within the workload's own bounds (scheduler/ir/workload.hpp),
/// so that a row is refused here, by its column. An empty KvHeads cell leaves `w` as it is (kv heads = heads).
[[nodiscard]] Status read_workload_cell(WorkloadCell c, std::string_view v, ir::Workload& w, const BadCell& bad);

/// One record of the file: its fields (quotes removed) and the line it starts on.
struct Record {
  int line = 0;
  std::vector<std::string> fields;
};

/// Reads `text` record by record; `source` (the file name) prefixes every error and must outlive it.
class RecordReader {
 public:
  RecordReader(std::string_view text, const std::string& source);
  /// The next record: false at the end of the text.
  [[nodiscard]] Expected<bool> next(Record& r);

 private:
  [[nodiscard]] Expected<std::string> field(const Record& r);

  std::string_view t_;
  const std::string& source_;
  std::size_t pos_ = 0;
  int line_ = 1;
};

/// A table: its first record is the header (`header(record)`), every other a row (`row(record,
/// header_line)`); both return Status. Errors besides the reader's and the callbacks': a text with no
/// header line (naming `columns`, the columns expected) and a header with no rows after it ("no `what`").
template <class Header, class Row>
[[nodiscard]] Status read_table(std::string_view text, const std::string& source, std::string_view columns,
                                std::string_view what, Header&& header, Row&& row) {
  RecordReader reader(text, source);
  int header_line = 0;
  std::size_t rows = 0;
  for (Record rec;;) {
    auto more = reader.next(rec);
    if (!more) return more.error();
    if (!*more) break;
    if (header_line == 0) {
      header_line = rec.line;
      if (auto st = header(rec); !st) return st;
      continue;
    }
    if (auto st = row(rec, header_line); !st) return st;
    ++rows;
  }
  if (header_line == 0) return Error{source, fmt::format("no header line (expected the columns: {})", columns)};
  if (rows == 0) return Error{fmt::format("{}:{}", source, header_line), fmt::format("no {} after the header", what)};
  return {};
}

/// A header line of known column names: order[i] is field i's column (its index in `names`), or
/// nullopt for a name not among them (the user's own column, listed in `ignored`); index[c] is
/// column c's 1-based field (index holds names.size() zeros to start with). Errors, by
/// FILE:LINE:FIELD: an empty name, a column named twice.
[[nodiscard]] Status read_column_names(const Record& rec, const std::string& source,
                                       std::span<const std::string_view> names, std::span<int> index,
                                       std::vector<std::optional<std::size_t>>& order,
                                       std::vector<std::string>& ignored);

}  // namespace charm::calib
