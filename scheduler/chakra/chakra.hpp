#pragma once
// A plan as Chakra execution traces: one file per rank that ASTRA-sim (and the tools built on
// Chakra's feeder) read as that NPU's workload. What each op becomes:
//   Compute, Merge, Accumulate, Copy -> COMP_NODE: num_ops (FLOPs, 0 for the memory-bound ops),
//                                      tensor_size (bytes of the buffers it touches)
//   Send / Recv                      -> COMM_SEND_NODE / COMM_RECV_NODE: comm_src, comm_dst,
//                                      comm_size (bytes), comm_tag
// Node ids are the plan's op ids. Dependencies: data_deps holds the op's own dependencies,
// every member of the issue group (ncclGroup) of each, and the issue group before it on its
// stream (the stream order, which the plan implies and Chakra has no streams for: its feeder
// orders nodes by data_deps alone); ctrl_deps names that stream predecessor group apart.
// Tags: Chakra matches a send and a receive by (src, dst, tag), the plan by (stream, src, dst,
// tag), so the tag on the wire is tag * kNumStreams + stream.

#include <functional>
#include <string>

#include "scheduler/ir/plan.hpp"
#include "support/expected.hpp"

namespace charm::chakra {

struct ExportOptions {
  std::string prefix = "charm";  // files DIR/PREFIX.RANK.et (the tool's name, not the algorithm)
  /// Seconds an op takes, for duration_micros (ASTRA-sim uses it where its roofline is off);
  /// empty: every duration is 0 and the reader's own model decides.
  std::function<double(ir::OpId)> seconds;
};

/// DIR/PREFIX.RANK.et: ASTRA-sim's --workload-configuration is DIR/PREFIX.
[[nodiscard]] std::string et_path(const std::string& dir, const std::string& prefix, int rank);
/// The tag a Send or Recv carries on the wire.
[[nodiscard]] std::int64_t wire_tag(const ir::Op& op);

/// Writes one file per rank (each atomically), creating `dir`. Errors: a quotient plan (it holds
/// one class of ranks), a tag past int32, a file that cannot be written.
[[nodiscard]] Status write_chakra(const ir::Plan& plan, const std::string& dir, const ExportOptions& options = {});

}  // namespace charm::chakra
