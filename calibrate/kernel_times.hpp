#pragma once
// Single-GPU attention kernel times for `charm calibrate --kernels` and `charm bench-kernels`:
// one CSV row per timed kernel call, the kind a FlashAttention benchmark on one GPU gives.
//
//   # comment lines anywhere
//   pass,batch,heads,kv_heads,head_dim,dtype,q_tokens,kv_tokens,mask,time_ms
//   fwd,1,12,12,192,bf16,13440,13440,full,7.9
//
// The CSV forms of calibrate/csv_records.hpp (RFC 4180, CRLF, a byte order mark); columns may come
// in any order; every one is required (kv_heads may be empty: = heads); other columns (a benchmark's
// TFLOP/s, a note) are read past and named in one warning.
// mask is full or causal; a causal row has q_tokens == kv_tokens (the diagonal block).
// Such a row is predicted by the topology's kernel model alone (sim::ComputeModel::kernel_seconds:
// the launch and the tile waves, no framework step and no result update), so it pins the GPU's
// attainment apart from the stack and the links. Errors name file:line:column.

#include <string>
#include <string_view>
#include <vector>

#include "scheduler/ir/workload.hpp"
#include "support/enum_names.hpp"
#include "support/expected.hpp"

namespace charm::calib {

/// The mask column's spellings (and `bench-kernels --mask`'s): a kernel timed without a mask or with the causal one.
inline constexpr EnumName<bool> kKernelMaskNames[] = {{"full", false}, {"causal", true}};

struct KernelTime {
  int line = 0;           // 1-based line in the file
  ir::Workload workload;  // pass, batch, heads, kv_heads, head_dim, dtype (seq = q_tokens)
  std::int64_t q_tokens = 0, kv_tokens = 0;
  bool causal = false;
  double time_ms = 0;
};

struct KernelTimeSet {
  std::string source;
  std::vector<KernelTime> rows;
  std::vector<std::string> warnings;  // columns read past (a user's own: TFLOP/s, a note)
};

/// Parses the CSV text; `source` prefixes every error.
[[nodiscard]] Expected<KernelTimeSet> parse_kernel_times(std::string_view text, const std::string& source);
/// Reads and parses one file.
[[nodiscard]] Expected<KernelTimeSet> load_kernel_times(const std::string& path);

/// The header line, every column (no newline).
[[nodiscard]] std::string kernel_times_header();
/// One row in the header's order (no newline); the time keeps every digit of the double.
[[nodiscard]] std::string kernel_time_row(const KernelTime& k);

}  // namespace charm::calib
