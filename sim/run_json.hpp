#pragma once
// The JSON of a simulated run, as `charm simulate --json`, `compare --json`, `advise --json` and the
// Python module write it: one place for every field, so the command line and `import charm` agree.

#include <nlohmann/json.hpp>

#include <cstddef>
#include <vector>

#include "sim/evaluate.hpp"
#include "sim/explain.hpp"
#include "sim/tensor_parallel.hpp"

namespace charm::sim {

/// The workload without its pass (a run's JSON names the pass beside it).
[[nodiscard]] nlohmann::json workload_json(const ir::Workload& w);
/// {"time_ms", "exposed_comm_ms"} of a closed form.
[[nodiscard]] nlohmann::json formula_json(Seconds time_s, Seconds exposed_s);
/// The closed form's figures with whether they describe the run (`applies`; `why_not` when they do not).
[[nodiscard]] nlohmann::json closed_form_json(const ClosedForm& f, bool uniform);
[[nodiscard]] nlohmann::json bottleneck_json(const Bottleneck& b);
[[nodiscard]] nlohmann::json path_shares_json(const std::vector<PathShare>& path);
[[nodiscard]] nlohmann::json memory_json(const MemoryVerdict& m);
/// What a quotient run simulated.
[[nodiscard]] nlohmann::json symmetry_json(const ir::Plan& p);
/// The full plan's op count (a quotient plan holds one class: every class is an image of it).
[[nodiscard]] std::size_t full_ops(const ir::Plan& p);

/// Where a plan's ranks run: rank r on GPU r, so a plan of fewer ranks than the topology has GPUs
/// uses its first ones ("ranks 0-15 on GPUs 0-15 of 32; GPUs 16-31 idle").
[[nodiscard]] std::string placement_text(int ranks, int gpus);
/// The attention FLOPs of each rank's compute ops (a mask's load balance: documents and windows leave
/// ranks unequal work in every layout).
[[nodiscard]] std::vector<double> flops_per_rank(const ir::Plan& p);
/// Where a plan's ranks run: placement_text(ranks, gpus) for one group on the first GPUs, else the
/// deployment's groups and group 0's GPUs.
[[nodiscard]] std::string placement_text(const ir::Plan& p, int gpus);

/// What every number of a report covers: "one attention layer's core attention (fwd+bwd): the
/// FlashAttention part, no projections; times of the slowest GPU, memory per GPU: attention buffers
/// only". With `layers` > 1 the times are of that many layers run one after another (each layer's
/// buffers are freed before the next: the peak is one layer's).
/// `tp` > 0: the times are whole attention blocks' under that TP size (sim/tensor_parallel.hpp); -1: under each
/// row's TP size (a layout search).
[[nodiscard]] std::string scope_text(ir::PassKind pass, int layers = 1, int tp = 0);
/// A deployment's tensor-parallel block cost: {"tp", "total_ms", "all_gather_ms", "reduce_scatter_ms", "gemm_ms",
/// "hidden_under_gemm_ms", "all_gathers", "reduce_scatters", "ring_gbps", "ring_link", "gemm_efficiency", "line"}.
[[nodiscard]] nlohmann::json tp_block_json(const TpBlockCost& c, const topo::Topology& t);

/// Where the model's values for `t` come from, with what the workload asks of the kernel table that the
/// table does not cover (a head dim or a block size outside its rows): the reports' `# model:` line.
[[nodiscard]] std::string model_text(const topo::Topology& t, const ir::Workload& w);
/// The same as JSON: {"kernel", "stack", "links", "assumed": [...]}.
[[nodiscard]] nlohmann::json model_json(const topo::Topology& t, const ir::Workload& w);

/// The whole `simulate --json` document of one run.
[[nodiscard]] nlohmann::json simulate_json(const Evaluation& r, const topo::Topology& t, const Explanation& ex,
                                           const MemoryVerdict& mem, bool uniform, std::size_t path_limit);

}  // namespace charm::sim
