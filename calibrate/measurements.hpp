#pragma once
// Measured run times for `charm calibrate`: one CSV row per measured run.
//
//   # comment lines (the file's source) anywhere
//   algo,pass,batch,seq,heads,kv_heads,head_dim,dtype,causal,layout,time_ms[,ranks][,domains][,metric]
//   (metric: time, comm, compute, comm-alone or compute-alone; see Metric)
//   ring,fwd,16,26880,12,12,192,bf16,0,contiguous,149.97,16,2
//
// The file is RFC 4180 CSV: a field in double quotes may hold commas, line breaks and doubled
// quotes; lines end in LF or CRLF; a UTF-8 byte order mark at the start is skipped. Columns of
// the user's own (a note, the GPU model) are read past, named in one warning.
// Columns may come in any order; `ranks`, `domains` and `metric` are optional (an
// empty cell or a missing column means: every GPU of the base topology, the
// domains those GPUs span, and the run's time). Every error names the file, line and column as
// `file:line:column`, so the message points at the cell to fix.
//
// The writer (`charm run --append-measurements FILE`) uses the same column list:
// measurements_header() is every column in Column order, measurement_row() one
// run in that order, and append_measurement() adds a row to a file (the header
// first when the file is new or empty).

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "scheduler/ir/workload.hpp"
#include "support/expected.hpp"

namespace charm::calib {

enum class Column : std::uint8_t {
  Algo,
  Pass,
  Batch,
  Seq,
  Heads,
  KvHeads,
  HeadDim,
  DType,
  Causal,
  Layout,
  TimeMs,
  Ranks,
  Domains,
  Metric
};
inline constexpr std::size_t kNumColumns = 14;
/// The columns a run writes (append_measurement): every one but metric, which is always "time" there.
inline constexpr std::size_t kWrittenColumns = 13;

/// What a row's time measures: the run; or, per GPU in that run, the time its compute stream
/// is busy (`compute`) or a transfer of it is outstanding (`comm`), what a profiler's kernel
/// durations add up to; or one side of the schedule alone as if the other were free
/// (`compute-alone`, `comm-alone`: each step's computation, or communication, one after another).
enum class Metric : std::uint8_t { Time, Comm, Compute, CommAlone, ComputeAlone };
[[nodiscard]] std::string_view to_string(Metric m);

/// The header name of a column ("kv_heads").
[[nodiscard]] std::string_view column_name(Column c);
/// The column of a field a planner error is about (Field::KvHeads -> KvHeads); Algo when no column holds it
/// (a mask, a symmetry: the row as a whole).
[[nodiscard]] Column column_of(Field field);

struct Measurement {
  int line = 0;  // 1-based line in the file
  std::string algo;
  ir::Workload workload;  // pass included
  int ranks = 0;          // 0: every GPU of the base topology
  int domains = 0;        // 0: the domains the first `ranks` GPUs span
  double time_ms = 0;
  Metric metric = Metric::Time;
  int file = 0;  // which file of the set it came from
};

struct MeasurementSet {
  std::string source;  // the file name, as given (several: their names joined by commas)
  /// Per file: its name and the column index (1-based) of each column in its header (0: no such column).
  std::vector<std::string> files;
  std::vector<std::array<int, kNumColumns>> column_index;
  std::vector<Measurement> rows;
  /// What the reader passed over (columns charm does not read), one line each, for stderr.
  std::vector<std::string> warnings;

  /// "file:line:column" of one cell, for errors found after parsing (a planner refusal, say).
  [[nodiscard]] std::string where(const Measurement& m, Column c) const;
};

/// Parses the CSV text; `source` prefixes every error.
[[nodiscard]] Expected<MeasurementSet> parse_measurements(std::string_view text, const std::string& source);
/// Reads and parses a measurements file, or several (comma-separated) as one set.
[[nodiscard]] Expected<MeasurementSet> load_measurements(const std::string& paths);

/// "algo,pass,...,time_ms,ranks,domains": every column, in Column order (no newline).
[[nodiscard]] std::string measurements_header();
/// One row in the header's order (no newline); ranks and domains 0 are empty cells. The
/// time keeps every digit of the double (the reader gets the same value back).
[[nodiscard]] std::string measurement_row(const Measurement& m);
/// Appends `m` to the file at `path` (created when missing; the header first when the file
/// has no lines but comments). A file whose header is another column list is refused (its
/// rows would be read in the wrong columns); the row goes in with one write.
[[nodiscard]] Status append_measurement(const std::string& path, const Measurement& m);

/// Reads a whole text file; errors name the path (shared with the nccl-tests reader).
[[nodiscard]] Expected<std::string> read_text_file(const std::string& path, const char* what);

}  // namespace charm::calib
