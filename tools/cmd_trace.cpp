// charm trace-diff PREDICTED MEASURED: a simulated trace and a measured one of the same
// plan, op by op: the makespan ratio, which kinds of op the model gets wrong, and the ops
// that depart most from the prediction.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <iostream>

#include "scheduler/trace/diff.hpp"
#include "support/input_file.hpp"
#include "support/json_text.hpp"
#include "tools/cli_common.hpp"

namespace charm::cli {
namespace {

nlohmann::json read_trace(const std::string& path) {
  const auto text = unwrap(read_input_file(path, "a trace file", "cannot open for reading"));
  return unwrap(parse_json_strict(text, path));
}

std::string ratio(double measured, double predicted) {
  return predicted > 0 ? fmt::format("{:.2f}x", measured / predicted) : std::string("-");
}

void register_trace_diff(CLI::App& app) {
  struct Opts {
    std::string predicted, measured;
    int top = 10;
    bool json_out = false;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand(
      "trace-diff",
      "a predicted trace (simulate --trace) beside a measured one (run --trace) of the same plan, op by op");
  sub->add_option("predicted", o->predicted, "trace written by charm simulate --trace")->required();
  sub->add_option("measured", o->measured, "trace written by charm run --trace (any backend)")->required();
  sub->add_option("--top", o->top, "ops to list, those that depart most from the prediction")->capture_default_str();
  sub->add_flag("--json", o->json_out, "JSON output");
  sub->callback([o] {
    if (o->top < 0) fail(Error{"--top", fmt::format("must be >= 0, got {}", o->top)});
    const auto d =
        unwrap(trace::diff_traces(read_trace(o->predicted), read_trace(o->measured), o->predicted, o->measured));
    const std::size_t top = std::min<std::size_t>(std::size_t(o->top), d.ops.size());
    if (o->json_out) {
      nlohmann::json kinds = nlohmann::json::array(), ops = nlohmann::json::array();
      for (const auto& k : d.kinds)
        kinds.push_back(
            {{"kind", k.kind}, {"ops", k.ops}, {"predicted_ms", k.predicted_ms}, {"measured_ms", k.measured_ms}});
      for (std::size_t i = 0; i < top; ++i) {
        const auto& op = d.ops[i];
        ops.push_back({{"op", op.op},
                       {"name", op.name},
                       {"kind", op.kind},
                       {"rank", op.rank},
                       {"predicted_ms", op.predicted_ms},
                       {"measured_ms", op.measured_ms}});
      }
      std::cout << nlohmann::json{{"schema", 1},
                                  {"predicted_makespan_ms", d.predicted_makespan_ms},
                                  {"measured_makespan_ms", d.measured_makespan_ms},
                                  {"ops", d.ops.size()},
                                  {"kinds", kinds},
                                  {"top_ops", ops}}
                       .dump(1)
                << "\n";
      return;
    }
    std::cout << fmt::format(
        "# charm trace-diff: {} ops; makespan predicted {:.3f} ms, measured {:.3f} ms ({} the prediction)\n",
        d.ops.size(), d.predicted_makespan_ms, d.measured_makespan_ms,
        ratio(d.measured_makespan_ms, d.predicted_makespan_ms));
    std::cout << fmt::format("# {:<12}{:>6}{:>16}{:>16}{:>12}\n", "kind", "ops", "predicted ms", "measured ms",
                             "measured/");
    for (const auto& k : d.kinds)
      std::cout << fmt::format("  {:<12}{:>6}{:>16.3f}{:>16.3f}{:>12}\n", k.kind, k.ops, k.predicted_ms, k.measured_ms,
                               ratio(k.measured_ms, k.predicted_ms));
    if (top > 0) std::cout << fmt::format("# the {} ops furthest from their prediction\n", top);
    for (std::size_t i = 0; i < top; ++i) {
      const auto& op = d.ops[i];
      std::cout << fmt::format("  op {:>6}  rank {:>4}  {:<36}{:>12.3f}{:>12.3f}{:>10}\n", op.op, op.rank, op.name,
                               op.predicted_ms, op.measured_ms, ratio(op.measured_ms, op.predicted_ms));
    }
  });
}

const Registrar trace_diff_registered{"trace-diff", register_trace_diff};

}  // namespace
}  // namespace charm::cli
