#pragma once
// The gnuplot script that draws a sweep (the data travels inside it as
// datablocks, so the script alone reproduces the picture):
//
//   +-------------------------------+-------------------------------+
//   | fwd: speedup vs CCR           | bwd: speedup vs CCR           |  one point per configuration,
//   |  (log x, one series per algo) |                               |  like the paper's Figure 6
//   +-------------------------------+-------------------------------+
//   | fwd: speedup vs seq length    | bwd: speedup vs seq length    |  geometric mean over the other
//   +-------------------------------+-------------------------------+  parameters, one series per
//   | fwd: speedup vs each --set    | bwd: ...                      |  algorithm x topology file;
//   |  field (one row per field)    |                               |  an axis with one value is
//   +-------------------------------+-------------------------------+  left out
//   | fwd: run time vs the first    | bwd: ...                      |  ring drawn too; log y when
//   |  --set field (else seq)       |                               |  the times span 3x
//   +-------------------------------+-------------------------------+
//
// Legends stand in the right margin and list only what their panel draws.

#include <string>

#include "sim/sweep.hpp"

namespace charm::sim {

enum class PlotFormat { Png, Svg };

/// A complete gnuplot script writing the figure to `output_path`.
[[nodiscard]] std::string sweep_gnuplot_script(const SweepSpec& spec, const SweepResult& result,
                                               const std::string& output_path, PlotFormat format);

/// The figure's title: topologies and the workload ranges.
[[nodiscard]] std::string sweep_title(const SweepSpec& spec);

}  // namespace charm::sim
