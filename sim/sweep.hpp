#pragma once
// What-if sweeps: every algorithm on the cross product of topologies and
// workload parameters, one independent simulation each, run by a pool of
// worker threads (no global state, so simulations run in
// parallel). `charm sweep` and bench/sweep_bench.cpp drive it.
//
//   configuration = topology x batch x seq x heads x kv_heads x head_dim x dtype x causal x layout
//   (a hardware sweep, `charm sweep --set`, makes one topology per point: its file with some numbers edited)
//   task          = configuration x pass            (what one worker takes at a time)
//   row           = task x algorithm                (ring is always simulated: the baseline)
//
// Tasks write only their own slot of the result, so the rows come out in the
// same order whatever the number of workers.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "scheduler/ir/workload.hpp"
#include "topologies/topology.hpp"

namespace charm::sim {

class PlanReuse;       // evaluate.hpp
class SimulationMemo;  // below

struct SweepSpec {
  std::vector<topo::Topology> topologies;
  std::vector<std::int64_t> batch, seq, heads, head_dim;
  std::vector<std::int64_t> kv_heads;  // empty: kv_heads = heads (no GQA)
  std::vector<ir::DType> dtypes{ir::DType::BF16};
  std::vector<bool> causal{false};
  std::vector<ir::Layout> layouts{ir::Layout::Contiguous};
  std::vector<std::string> algos;  // in report order
  std::vector<ir::Phase> passes{ir::Phase::Fwd};
  double reserved_gb = 0;  // memory the rest of the model holds per GPU, for `fits`
  /// Parallel axes (empty: not an axis): TP sizes (each CP group on TP's share of the heads, the times whole
  /// attention blocks', sim/tensor_parallel.hpp), CP sizes (a group's ranks; the rest data parallel) and
  /// charm's / usp's domains. Without TP or CP every configuration is one CP group on all the GPUs.
  std::vector<int> tp, cp, domains;

  /// A hardware sweep: numbers of the topology JSON by dotted path ("inter.bandwidth_gbps"), each a
  /// column of the output. With fields, `points[t]` says where topology t came from.
  struct Point {
    std::size_t file = 0;        // which topology file (several points share one: they are one series in the figure)
    std::vector<double> values;  // the value of each of set_fields
  };
  std::vector<std::string> set_fields;
  std::vector<Point> points;  // one per topology when set_fields is not empty
  /// What the topology loader said of the files and --set points (a unit slip, a block read past), each once,
  /// "--set FIELD=V: " before a point's: the front end prints them.
  std::vector<std::string> warnings;

  /// The topology file topology t came from (t itself without set_fields).
  [[nodiscard]] std::size_t file_of(std::size_t t) const { return points.empty() ? t : points[t].file; }
  /// Topologies x workload combinations (each is simulated once per algorithm and pass).
  [[nodiscard]] std::size_t num_configs() const;
};

/// One configuration, numbered in row order: the topology index and the workload (pass unset).
struct SweepConfig {
  std::size_t topology = 0;
  ir::Workload workload;
  int tp = 0, cp = 0, domains = 0;  // 0: the axis is not swept
};
/// The i-th configuration, i < spec.num_configs(); the topology varies slowest, the domains fastest.
[[nodiscard]] SweepConfig sweep_config(const SweepSpec& spec, std::size_t i);

struct SweepRow {
  std::size_t topology = 0;  // index into SweepSpec::topologies
  int ranks = 0, domains = 0;
  int tp = 0, cp = 0;     // a CP x TP layout's sizes (0: one CP group on every GPU)
  ir::Workload workload;  // as configured; pass = this row's phase
  std::string algo;
  ir::Phase pass = ir::Phase::Fwd;
  double ccr = 0;  // Eq. 7 for this configuration and pass (algorithm independent)
  double time_ms = 0, exposed_comm_ms = 0;
  double idle_ms = 0;            // compute-stream idle time, mean over ranks
  double speedup_vs_ring = 0;    // ring time / this time; 0 when ring could not run
  ir::Bytes peak_mem_bytes = 0;  // peak attention buffers per GPU (max over ranks)
  int fits = -1;                 // 1/0: peak + SweepSpec::reserved_gb within gpu.memory_gb; -1: memory unknown
};

struct SweepResult {
  std::vector<SweepRow> rows;   // configuration, then pass, then algorithm order
  std::size_t configs = 0;      // configurations in the spec
  std::size_t tasks_done = 0;   // (configuration, pass) pairs evaluated
  std::size_t simulations = 0;  // simulator runs (ring included when only the baseline)
  std::size_t shared = 0;       // rows and baselines an equal simulation's figures served (the split with simulations
                                // depends on the workers' timing: two may run one simulation at once)
  std::size_t skipped = 0;      // (configuration, algorithm, pass) the planner refused
  std::map<std::string, std::size_t> skip_reasons;  // the planner's message -> how many times
  std::vector<std::string> failures;                // simulator failures (a bug, not a refusal)
  bool cancelled = false;
  double wall_s = 0;
};

/// What one task (a configuration and a pass) produces: its rows in algorithm order and its counts.
struct SweepTaskOut {
  std::vector<SweepRow> rows;
  std::size_t simulations = 0, shared = 0, skipped = 0;
  std::vector<std::string> skip_reasons, failures;
};

/// Tasks of the spec: configurations x passes; task i is configuration i / passes, pass i % passes.
[[nodiscard]] std::size_t sweep_tasks(const SweepSpec& spec);
/// Runs task i. Never throws for a planner refusal or a simulator failure (both are counted in the
/// output); an exception becomes a failure line. With `reuse`, plans come from the caller's earlier tasks
/// where only the batch differs (the same rows, bit for bit); with `memo`, figures of earlier simulations that
/// are the same simulation (SimulationMemo).
[[nodiscard]] SweepTaskOut run_sweep_task(const SweepSpec& spec, std::size_t i, PlanReuse* reuse = nullptr,
                                          SimulationMemo* memo = nullptr);
/// The task to run k-th (a permutation of the tasks): the batches of one configuration one after another,
/// so that a worker's PlanReuse finds the plan of the batch before.
[[nodiscard]] std::size_t sweep_task_to_run(const SweepSpec& spec, std::size_t k);
/// The sweep's result from its tasks' outputs in task order; an empty slot is a task not done
/// (the sweep was cancelled).
[[nodiscard]] SweepResult sweep_result(const SweepSpec& spec, std::vector<std::optional<SweepTaskOut>> outs,
                                       double wall_s);
/// One task's output as bytes (MessagePack, every double exact) and back, for sweeps spread over
/// processes. decode_task checks what it reads against the spec (topology index, shape).
[[nodiscard]] std::string encode_task(const SweepTaskOut& out);
[[nodiscard]] Expected<SweepTaskOut> decode_task(const SweepSpec& spec, std::string_view bytes);

struct SweepControl {
  int jobs = 1;
  /// Set (e.g. from a signal handler) to stop: workers finish their current task and quit.
  const std::atomic<bool>* cancel = nullptr;
  /// Called on the calling thread about ten times a second and once at the end: tasks done, tasks in all.
  std::function<void(std::size_t done, std::size_t total)> progress;
  /// Run the tasks batch-fastest and let each worker reuse its plans across batches (PlanReuse).
  bool reuse_plans = true;
  /// Simulate once what several configurations simulate alike (SimulationMemo, shared by the workers).
  bool share_simulations = true;
};

/// Runs the sweep. Never throws for a refused combination: those are counted in `skipped`.
[[nodiscard]] SweepResult run_sweep(const SweepSpec& spec, const SweepControl& control);

/// The CSV column names, in order: the swept fields follow `topology`.
[[nodiscard]] std::vector<std::string> sweep_columns(const SweepSpec& spec);
/// Header line plus one line per row.
[[nodiscard]] std::string sweep_csv(const SweepSpec& spec, const SweepResult& result);
/// {"schema": 1, "columns": [...], "rows": [{...}], "configs", "skipped", "skip_reasons", ...}.
[[nodiscard]] nlohmann::json sweep_json(const SweepSpec& spec, const SweepResult& result);

}  // namespace charm::sim
