#pragma once
// The text output of nccl-tests (sendrecv_perf, alltoall_perf, all_gather_perf, ...) and
// the alpha-beta line fitted to it, from which `charm calibrate --nccl-tests` sets a link
// class's bandwidth and latency.
//
// The table nccl-tests prints (one row per message size, out-of-place then in-place):
//   #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw
//   #wrong #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s) (GB/s)
//      33554432       8388608     float     sum      -1   1402.3   23.93   23.93      0   1399.8   23.97   23.97      0
// Older versions print no `root` column and `error` for `#wrong`; the header line says
// which, so the columns are located by name. `#` lines are comments; lines that do not
// start with a number (NCCL's INFO lines, "NCCL version ...") are skipped; an mpirun
// "[1,0]<stdout>:" prefix is dropped. A log holds one run: a header after table rows, or a
// smaller size than the row before (a run prints each size once, growing), starts another, and a log
// of several is refused with the line each starts on (one fit needs one run).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "support/expected.hpp"

namespace charm::calib {

struct NcclSample {
  int line = 0;
  std::int64_t bytes = 0;
  double time_us = 0;     // out-of-place
  double algbw_gbps = 0;  // bytes / time
  double busbw_gbps = 0;  // algbw x the collective's bus factor (1 for sendrecv, (n-1)/n for all-gather)
};

struct NcclLog {
  std::string source;
  std::vector<NcclSample> samples;
};

[[nodiscard]] Expected<NcclLog> parse_nccl_tests(std::string_view text, const std::string& source);
[[nodiscard]] Expected<NcclLog> load_nccl_tests(const std::string& path);

/// time(size) = alpha + size / beta over the log's rows.
struct AlphaBeta {
  double alpha_us = 0;
  double beta_gbps = 0;        // asymptotic algorithm bandwidth (size / time)
  double bus_factor = 1;       // busbw / algbw of the log (the collective's)
  double busbw_gbps = 0;       // beta x bus_factor: the bus bandwidth plateau
  double peak_busbw_gbps = 0;  // the largest busbw the log shows
  int rows = 0;
};

/// Least squares on relative time error (sum of ((alpha + size/beta) / time - 1)^2), so
/// small messages set alpha and large ones beta; alpha is kept >= 0.
[[nodiscard]] Expected<AlphaBeta> fit_alpha_beta(const NcclLog& log);

}  // namespace charm::calib
