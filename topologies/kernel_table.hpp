#pragma once
// KernelTable: what an attention kernel library attains on one GPU architecture, as
// published single-GPU benchmarks measured it (topologies/kernels/*.csv, each row with
// its source), or as a user's own kernel timings (charm bench-kernels' CSV) give it.
//
//   library x family   fa2 on ampere, fa2 / fa3 / cudnn on hopper, ...
//   row                pass, causal, head dim, tokens (q = kv), batch x heads of the
//                      benchmark, and the kernel's time for that shape
//
// The simulator turns each row into the attainment its tile model needs to reproduce
// that time (sim/compute_model.cpp), so a table row predicted on its own shape gives
// the measured time back, and other shapes interpolate between rows (log head dim,
// log tokens); outside the table the nearest row holds and reports say so.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "support/expected.hpp"

namespace charm::topo {

struct KernelRow {
  bool fwd = true;
  bool causal = false;
  int head_dim = 0;
  double q_tokens = 0, kv_tokens = 0;  // per batch-head
  double batch_heads = 0;              // batch x query heads of the timed call
  double seconds = 0;                  // the kernel's time for that shape
  std::string source;                  // where the figure comes from
};

struct KernelTable {
  std::string library;  // fa2, fa3, cudnn, or "file:PATH"
  std::string family;   // ampere, hopper, ada, blackwell (empty for a user's file)
  std::string source;   // the table's sources, one line
  std::vector<KernelRow> rows;
};

/// The names `gpu.kernel` and --kernel take besides a CSV file.
[[nodiscard]] const std::vector<std::string>& kernel_library_names();
/// The bundled table of `library` on architecture `family`; the error names what exists.
[[nodiscard]] Expected<std::shared_ptr<const KernelTable>> kernel_table(std::string_view library,
                                                                        std::string_view family);

/// Parses one bundled table's CSV (library,family,pass,mask,head_dim,seqlen,batch,heads,tflops,source);
/// TFLOP/s count FlashAttention's convention: 4 * seqlen^2 * head_dim * batch * heads forward,
/// half of it causal, 2.5x forward backward.
[[nodiscard]] Expected<std::vector<KernelTable>> parse_kernel_tables(std::string_view csv, std::string_view name);

}  // namespace charm::topo
