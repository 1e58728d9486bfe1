#include "sim/sweep_plot.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <tuple>

#include "scheduler/planners/algorithms.hpp"
#include "sim/evaluate.hpp"

namespace charm::sim {

namespace {

/// Fixed colours (the algorithm table's), so an algorithm looks the same in every figure; charm stands out.
std::string colour(const std::string& algo, std::size_t fallback) {
  static const char* const spare[] = {"#7f7f7f", "#aec7e8", "#98df8a", "#ffbb78"};
  if (const sched::Algorithm* row = sched::find_algorithm(algo); row != nullptr && !row->colour.empty())
    return std::string(row->colour);
  return spare[fallback % 4];
}

/// A control character (newline, ESC, NUL, ...) would end a gnuplot command line or drive the terminal: shown as '?'.
bool is_control(char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }

/// gnuplot single-quoted string: a quote is written twice. Single quotes also keep gnuplot from running
/// backquoted text as a command, as long as no line break ends the string early (control characters become '?').
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "''";
    else
      out += is_control(c) ? '?' : c;
  }
  return out + "'";
}

/// gnuplot double-quoted string, for text with line breaks (titles). gnuplot runs backquoted text inside double
/// quotes as a shell command before it parses the line, so a backquote is written as its octal escape, and '@'
/// (a macro) likewise.
std::string text(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '\n')
      out += "\\n";
    else if (c == '"' || c == '\\')
      out += std::string("\\") + c;
    else if (c == '`')
      out += "\\140";
    else if (c == '@')
      out += "\\100";
    else
      out += is_control(c) ? '?' : c;
  }
  return out + "\"";
}

std::string size_label(std::int64_t v) {
  if (v >= (1 << 20) && v % (1 << 20) == 0) return fmt::format("{}M", v >> 20);
  if (v >= 1024 && v % 1024 == 0) return fmt::format("{}k", v >> 10);
  return fmt::format("{}", v);
}

/// "1,2,4" for a few values, "4k..128k (6 values)" for many.
std::string list_label(const std::vector<std::int64_t>& v) {
  if (v.empty()) return "-";
  if (v.size() <= 4) {
    std::vector<std::string> parts;
    for (auto x : v) parts.push_back(size_label(x));
    return fmt::format("{}", fmt::join(parts, ","));
  }
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return fmt::format("{}..{} ({} values)", size_label(*lo), size_label(*hi), v.size());
}

std::string number_label(double v) { return v >= 1e6 ? fmt::format("{:.0e}", v) : fmt::format("{:.6g}", v); }

/// "25,50,100" for a few values, "25..400 (6 values)" for many.
std::string values_label(const std::vector<double>& v) {
  if (v.size() <= 4) {
    std::vector<std::string> parts;
    for (auto x : v) parts.push_back(number_label(x));
    return fmt::format("{}", fmt::join(parts, ","));
  }
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return fmt::format("{}..{} ({} values)", number_label(*lo), number_label(*hi), v.size());
}

/// Labelled tics for a log axis over [lo, hi]: powers of ten alone leave a range narrower than a few
/// decades with one or two labels, so take the first mantissa set giving at least four.
std::vector<double> log_tics(double lo, double hi) {
  static const std::vector<std::vector<double>> mantissas{
      {1}, {1, 2, 5}, {1, 1.5, 2, 3, 5, 7}, {1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8, 9}};
  std::vector<double> tics;
  if (!(lo > 0) || !(hi >= lo)) return tics;
  for (const auto& m : mantissas) {
    tics.clear();
    for (int e = static_cast<int>(std::floor(std::log10(lo))); e <= static_cast<int>(std::ceil(std::log10(hi))); ++e)
      for (double x : m) {
        const double v = std::stod(fmt::format("{:.12g}", x * std::pow(10.0, e)));
        if (v >= lo && v <= hi) tics.push_back(v);
      }
    if (tics.size() >= 4) break;
  }
  return tics;
}

/// gnuplot's "set xtics ('label' value, ...)".
std::string tics_command(const char* axis, const std::vector<std::pair<std::string, double>>& tics) {
  if (tics.empty()) return fmt::format("set {}tics autofreq\n", axis);
  std::vector<std::string> items;
  for (const auto& [label, v] : tics) items.push_back(fmt::format("{} {:.12g}", quoted(label), v));
  return fmt::format("set {}tics ({})\n", axis, fmt::join(items, ", "));
}

std::vector<std::pair<std::string, double>> labelled(const std::vector<double>& values) {
  std::vector<std::pair<std::string, double>> out;
  for (double v : values) out.emplace_back(number_label(v), v);
  return out;
}

std::string block_name(const std::string& kind, std::size_t pass, std::size_t algo, std::size_t file) {
  return fmt::format("${}_p{}_a{}_t{}", kind, pass, algo, file);
}

std::size_t file_count(const SweepSpec& spec) {
  std::size_t n = 0;
  for (std::size_t t = 0; t < spec.topologies.size(); ++t) n = std::max(n, spec.file_of(t) + 1);
  return n;
}

/// A topology file as the legends name it.
std::string file_name(const SweepSpec& spec, std::size_t f) {
  for (std::size_t t = 0; t < spec.topologies.size(); ++t)
    if (spec.file_of(t) == f) return spec.topologies[t].name;
  return {};
}

/// A topology file as the title names it: its GPUs and domains too, when every hardware point shares them
/// (a swept `nodes` changes them).
std::string file_label(const SweepSpec& spec, std::size_t f) {
  std::set<std::pair<int, int>> shapes;
  for (std::size_t t = 0; t < spec.topologies.size(); ++t)
    if (spec.file_of(t) == f) shapes.emplace(spec.topologies[t].num_gpus(), default_domains(spec.topologies[t]));
  const std::string name = file_name(spec, f);
  if (shapes.size() != 1) return name;
  const auto [gpus, domains] = *shapes.begin();
  return fmt::format("{} ({} GPUs, {} domain{})", name, gpus, domains, domains == 1 ? "" : "s");
}

/// An x axis of the line views: the sequence length or one swept field.
struct Axis {
  std::string kind;    // block name prefix: "seq" or "set<k>"
  std::string name;    // "sequence length" or the field's path
  bool sizes = false;  // label values as token counts (4k)
  bool log = false;
  std::vector<double> values;  // distinct, ascending
  std::function<double(const SweepRow&)> of;
  int field = -1;  // the swept field's index in spec.set_fields; -1: the sequence length
};

std::vector<Axis> line_axes(const SweepSpec& spec) {
  std::vector<Axis> all;
  {
    Axis a{"seq", "sequence length", true, true, {}, [](const SweepRow& r) { return double(r.workload.seq); }};
    for (auto v : std::set<std::int64_t>(spec.seq.begin(), spec.seq.end())) a.values.push_back(double(v));
    all.push_back(std::move(a));
  }
  for (std::size_t k = 0; k < spec.set_fields.size(); ++k) {
    Axis a{fmt::format("set{}", k),
           spec.set_fields[k],
           false,
           false,
           {},
           [&spec, k](const SweepRow& r) { return spec.points[r.topology].values[k]; },
           int(k)};
    std::set<double> values;
    for (const auto& p : spec.points) values.insert(p.values[k]);
    a.values.assign(values.begin(), values.end());
    // A log axis when the values are positive and span at least two doublings: bandwidths and peaks are ratios.
    a.log = !a.values.empty() && a.values.front() > 0 && a.values.back() >= 4 * a.values.front();
    all.push_back(std::move(a));
  }
  // An axis with one value draws one point per series: leave it out unless nothing else is left.
  std::vector<Axis> kept;
  for (auto& a : all)
    if (a.values.size() > 1) kept.push_back(std::move(a));
  if (kept.empty()) kept.push_back(std::move(all.front()));
  return kept;
}

}  // namespace

std::string sweep_title(const SweepSpec& spec) {
  std::string topos;
  for (std::size_t f = 0; f < file_count(spec); ++f) topos += (topos.empty() ? "" : ", ") + file_label(spec, f);
  std::vector<std::string_view> dtypes, masks, layouts;
  for (auto d : spec.dtypes) dtypes.push_back(to_string(d));
  for (bool c : spec.causal) masks.push_back(c ? "causal" : "full");
  for (auto l : spec.layouts) layouts.push_back(to_string(l));
  std::string title =
      fmt::format("Speedup over Ring and run time on {}\nbatch {}   seq {}   heads {}   kv heads {}   head dim {}   {} "
                  "  {} mask   {} layout",
                  topos, list_label(spec.batch), list_label(spec.seq), list_label(spec.heads),
                  spec.kv_heads.empty() ? std::string("= heads") : list_label(spec.kv_heads), list_label(spec.head_dim),
                  fmt::join(dtypes, "/"), fmt::join(masks, "/"), fmt::join(layouts, "/"));
  std::vector<std::string> sets;
  for (std::size_t k = 0; k < spec.set_fields.size(); ++k) {
    std::set<double> values;
    for (const auto& p : spec.points) values.insert(p.values[k]);
    sets.push_back(fmt::format("{} {}", spec.set_fields[k], values_label({values.begin(), values.end()})));
  }
  if (!sets.empty()) title += fmt::format("\n{}", fmt::join(sets, "   "));
  return title;
}

namespace {

/// The gnuplot script of a sweep, built in steps: the means it draws, the data
/// blocks, the terminal and layout, the CCR row, then the line views.
class PlotScript {
 public:
  PlotScript(const SweepSpec& spec, const SweepResult& result)
      : spec_(spec), np_(spec.passes.size()), na_(spec.algos.size()), nf_(file_count(spec)), axes_(line_axes(spec)),
        ccr_pts_(np_ * na_ * nf_), time_lo_(np_, 1e300), time_hi_(np_, 0) {
    // The run-time view is drawn against the first swept field when there is one: that is the question
    // a hardware sweep asks (how much faster with twice the bandwidth); else against the first axis.
    for (std::size_t i = 0; i < axes_.size(); ++i)
      if (axes_[i].field >= 0) {
        time_axis_ = i;
        break;
      }
    collect(result);
  }

  std::string script(const std::string& output_path, PlotFormat format) {
    s_ += "# charm sweep: speedup over Ring and run time (generated by `charm sweep --plot-script`; the data is "
          "inline)\n";
    data_blocks();
    layout(output_path, format);
    ccr_row();
    for (std::size_t x = 0; x < axes_.size(); ++x) line_view(x, false);
    line_view(time_axis_, true);
    s_ += "unset multiplot\nset output\n";
    return std::move(s_);
  }

 private:
  struct Mean {
    double log_speedup = 0, log_time = 0;
    int speedups = 0, times = 0;
  };

  std::size_t algo_index(const std::string& a) const {
    return static_cast<std::size_t>(std::find(spec_.algos.begin(), spec_.algos.end(), a) - spec_.algos.begin());
  }
  std::size_t pass_index(ir::Phase p) const {
    return static_cast<std::size_t>(std::find(spec_.passes.begin(), spec_.passes.end(), p) - spec_.passes.begin());
  }
  std::size_t slot(std::size_t p, std::size_t a, std::size_t f) const { return (p * na_ + a) * nf_ + f; }
  static int marker(std::size_t f) { return std::array<int, 5>{7, 5, 9, 13, 11}[f % 5]; }
  std::string pass_name(std::size_t p) const {
    return spec_.passes[p] == ir::Phase::Fwd ? std::string("Forward") : std::string("Backward");
  }

  // Speedup vs CCR: every row a point. Line views: geometric means per (pass, algo, file, axis, x).
  void collect(const SweepResult& result) {
    for (const auto& r : result.rows) {
      const std::size_t p = pass_index(r.pass), a = algo_index(r.algo), f = spec_.file_of(r.topology);
      if (p >= np_ || a >= na_ || f >= nf_) continue;
      const bool has_speedup = r.speedup_vs_ring > 0;  // 0: ring could not run, no speedup to draw
      if (has_speedup && r.ccr > 0) {
        ccr_pts_[slot(p, a, f)].push_back(fmt::format("{:.6g} {:.6g}", r.ccr, r.speedup_vs_ring));
        ccr_lo_ = std::min(ccr_lo_, r.ccr);
        ccr_hi_ = std::max(ccr_hi_, r.ccr);
      }
      for (std::size_t x = 0; x < axes_.size(); ++x) {
        Mean& m = means_[{p, a, f, x, axes_[x].of(r)}];
        if (has_speedup) {
          m.log_speedup += std::log(r.speedup_vs_ring);
          ++m.speedups;
        }
        if (r.time_ms > 0) {
          m.log_time += std::log(r.time_ms);
          ++m.times;
        }
      }
    }
    // The time view's range, from the means it draws.
    for (const auto& [key, m] : means_) {
      const auto& [p, a, f, x, v] = key;
      if (x != time_axis_ || m.times == 0) continue;
      const double t = std::exp(m.log_time / m.times);
      time_lo_[p] = std::min(time_lo_[p], t);
      time_hi_[p] = std::max(time_hi_[p], t);
    }
  }
  bool has_line(std::size_t p, std::size_t a, std::size_t f, std::size_t x, bool time) const {
    for (const auto& [key, m] : means_) {
      const auto& [kp, ka, kf, kx, v] = key;
      if (kp == p && ka == a && kf == f && kx == x && (time ? m.times : m.speedups) > 0) return true;
    }
    return false;
  }

  // Data first: datablocks cannot be defined inside a multiplot. Line blocks: x, mean speedup, mean time (NaN: none).
  void data_blocks() {
    for (std::size_t p = 0; p < np_; ++p)
      for (std::size_t a = 0; a < na_; ++a)
        for (std::size_t f = 0; f < nf_; ++f) {
          s_ += block_name("ccr", p, a, f) + " << EOD\n";
          for (const auto& line : ccr_pts_[slot(p, a, f)]) s_ += line + "\n";
          s_ += "EOD\n";
          for (std::size_t x = 0; x < axes_.size(); ++x) {
            s_ += block_name(axes_[x].kind, p, a, f) + " << EOD\n";
            for (const auto& [key, m] : means_) {
              const auto& [kp, ka, kf, kx, v] = key;
              if (kp != p || ka != a || kf != f || kx != x) continue;
              const std::string speedup =
                  m.speedups ? fmt::format("{:.6g}", std::exp(m.log_speedup / m.speedups)) : "NaN";
              const std::string time = m.times ? fmt::format("{:.6g}", std::exp(m.log_time / m.times)) : "NaN";
              s_ += fmt::format("{:.12g} {} {}\n", v, speedup, time);
            }
            s_ += "EOD\n";
          }
        }
  }

  // Rows: speedup vs CCR, speedup vs each axis, run time; columns: passes.
  void layout(const std::string& output_path, PlotFormat format) {
    const std::size_t rows = 2 + axes_.size();
    const int cols = static_cast<int>(std::max<std::size_t>(np_, 1));
    const int width = cols == 1 ? 1100 : 800 * cols, height = static_cast<int>(rows) * 540 + 70;
    if (format == PlotFormat::Svg) {
      s_ += fmt::format("set terminal svg size {},{} dynamic noenhanced font 'Sans,12' background rgb 'white'\n", width,
                        height);
    } else {
      s_ += "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n";
      s_ += fmt::format("  set terminal pngcairo size {},{} noenhanced font 'Sans,11' background rgb 'white'\n", width,
                        height);
      s_ += "} else {\n";
      s_ += fmt::format("  set terminal png size {},{} noenhanced background rgb 'white'\n", width, height);
      s_ += "}\n";
    }
    // No file: gnuplot's stdout, where charm reads the figure from (tools/gnuplot_run.hpp).
    s_ += output_path.empty() ? std::string("set output\n") : "set output " + quoted(output_path) + "\n";
    s_ += "set encoding utf8\nset grid xtics ytics mxtics lc rgb '#dddddd' lw 1\nset border lw 1.2\n";
    // Legends stand in a right margin wide enough for the longest entry: below the panel, a long list
    // of algorithms runs into the axis label, and one margin for all keeps the panels aligned.
    std::size_t longest = std::string("ring (= 1)").size();
    for (const auto& a : spec_.algos) longest = std::max(longest, a.size());
    if (nf_ > 1)
      for (std::size_t f = 0; f < nf_; ++f) longest = std::max(longest, file_name(spec_, f).size());
    s_ += "set key outside right top vertical Left reverse samplen 2 spacing 1.1 font ',10'\n";
    s_ += fmt::format("set rmargin {}\n", longest + 7);
    s_ +=
        fmt::format("set multiplot layout {},{} rowsfirst title {} font ',13'\n", rows, cols, text(sweep_title(spec_)));
  }

  // The legend has two parts: colour = algorithm, marker (and dash, in line views) = topology file.
  // Each panel lists only the algorithms and files it draws.
  std::string legend(bool lines, bool ring_is_one,
                     const std::function<bool(std::size_t a, std::size_t f)>& drawn) const {
    std::vector<std::string> k;
    if (ring_is_one) k.push_back("1 with lines dt 2 lw 1.5 lc rgb '#555555' title 'ring (= 1)'");
    std::set<std::size_t> files;
    for (std::size_t a = 0; a < na_; ++a) {
      bool any = false;
      for (std::size_t f = 0; f < nf_; ++f)
        if (drawn(a, f)) {
          any = true;
          files.insert(f);
        }
      if (any)
        k.push_back(fmt::format("keyentry with {} lw 2 pt 7 lc rgb {} title {}", lines ? "linespoints" : "points",
                                quoted(colour(spec_.algos[a], a)), quoted(spec_.algos[a])));
    }
    if (nf_ > 1)
      for (std::size_t f : files)
        k.push_back(fmt::format("keyentry with {} lw 1.5 dt {} pt {} ps 1.2 lc rgb '#444444' title {}",
                                lines ? "linespoints" : "points", f % 5 + 1, marker(f), quoted(file_name(spec_, f))));
    // A panel with nothing to draw still needs a plot command (an undefined function draws nothing).
    if (k.empty()) k.push_back("NaN notitle");
    return fmt::format("{}", fmt::join(k, ", "));
  }

  static std::string x_axis(const Axis& ax) {
    std::string c = "unset logscale x\n";
    c += ax.log ? fmt::format("set logscale x {}\n", ax.sizes ? 2 : 10) : "";
    c += fmt::format("set xlabel {}\n", quoted(ax.sizes ? "sequence length (tokens, log scale)"
                                                        : ax.name + (ax.log ? " (log scale)" : "")));
    std::vector<std::pair<std::string, double>> tics;
    if (ax.values.size() <= 14)
      for (double v : ax.values) tics.emplace_back(ax.sizes ? size_label(std::int64_t(v)) : number_label(v), v);
    else if (ax.log)
      tics = labelled(log_tics(ax.values.front(), ax.values.back()));
    c += tics_command("x", tics);
    const double lo = ax.values.front(), hi = ax.values.back();
    if (ax.log)
      c += fmt::format("set xrange [{:.6g}:{:.6g}]\n", lo / 1.25, hi * 1.25);
    else {
      const double pad = hi > lo ? (hi - lo) * 0.05 : std::max(std::abs(lo) * 0.1, 1.0);
      c += fmt::format("set xrange [{:.6g}:{:.6g}]\n", lo - pad, hi + pad);
    }
    return c;
  }

  // Row 1: speedup vs CCR. Small points keep a cloud of thousands readable; a few points can be bigger.
  void ccr_row() {
    std::size_t ccr_points = 0;
    for (const auto& pts : ccr_pts_) ccr_points += pts.size();
    const double point_size = ccr_points > 200 ? 0.6 : 1.2;
    for (std::size_t p = 0; p < np_; ++p) {
      s_ += fmt::format("set title {}\n", quoted(pass_name(p) + ": speedup vs CCR (one point per configuration)"));
      s_ += kSpeedupY + "unset logscale x\nset logscale x 10\nset xlabel 'CCR = computation / communication of Ring "
                        "(Eq. 7, log scale)'\n";
      if (ccr_hi_ > 0) {
        s_ += tics_command("x", labelled(log_tics(ccr_lo_ / 1.3, ccr_hi_ * 1.3)));
        s_ += fmt::format("set xrange [{:.6g}:{:.6g}]\n", ccr_lo_ / 1.3, ccr_hi_ * 1.3);
      } else {
        s_ += "set xtics autofreq\nset xrange [*:*]\n";
      }
      std::string plot = "plot " + legend(false, true, [&](std::size_t a, std::size_t f) {
                           return spec_.algos[a] != sched::baseline_algorithm() && !ccr_pts_[slot(p, a, f)].empty();
                         });
      for (std::size_t a = 0; a < na_; ++a)
        for (std::size_t f = 0; f < nf_; ++f) {
          if (spec_.algos[a] == sched::baseline_algorithm() || ccr_pts_[slot(p, a, f)].empty()) continue;
          plot += fmt::format(", {} using 1:2 with points pt {} ps {} lc rgb {} notitle", block_name("ccr", p, a, f),
                              marker(f), point_size, quoted(colour(spec_.algos[a], a)));
        }
      s_ += plot + "\n";
    }
  }

  // A line view: speedup (or run time) vs axis x, one panel per pass.
  void line_view(std::size_t x, bool time) {
    const Axis& ax = axes_[x];
    for (std::size_t p = 0; p < np_; ++p) {
      s_ += fmt::format("set title {}\n", quoted(fmt::format("{}: {} vs {}{}", pass_name(p),
                                                             time ? "run time" : "speedup", ax.name, kGeo)));
      s_ += x_axis(ax);
      if (!time) {
        s_ += kSpeedupY;
      } else if (time_hi_[p] > 0 && time_hi_[p] >= 3 * time_lo_[p]) {
        s_ += "set logscale y 10\nset ylabel 'run time (ms, log scale)'\n";
        s_ += fmt::format("set yrange [{:.6g}:{:.6g}]\n", time_lo_[p] / 1.3, time_hi_[p] * 1.3);
        s_ += tics_command("y", labelled(log_tics(time_lo_[p] / 1.3, time_hi_[p] * 1.3)));
      } else {
        // No time at all (every combination refused): a fixed range, or gnuplot fails on an empty plot.
        s_ += fmt::format("unset logscale y\nset ylabel 'run time (ms)'\nset yrange [0:{}]\nset ytics autofreq\n",
                          time_hi_[p] > 0 ? "*" : "1");
      }
      auto drawn = [&](std::size_t a, std::size_t f) {
        return (time || spec_.algos[a] != sched::baseline_algorithm()) && has_line(p, a, f, x, time);
      };
      std::string plot = "plot " + legend(true, !time, drawn);
      for (std::size_t a = 0; a < na_; ++a)
        for (std::size_t f = 0; f < nf_; ++f) {
          if (!drawn(a, f)) continue;
          plot += fmt::format(", {} using 1:{} with linespoints lw 2 dt {} pt {} ps 1.1 lc rgb {} notitle",
                              block_name(ax.kind, p, a, f), time ? 3 : 2, f % 5 + 1, marker(f),
                              quoted(colour(spec_.algos[a], a)));
        }
      s_ += plot + "\n";
    }
  }

  inline static const std::string kSpeedupY = "unset logscale y\nset ylabel 'speedup over Ring (x)'\nset yrange "
                                              "[0:*]\nset ytics autofreq\nset ytics add ('1' 1)\n";
  inline static const std::string kGeo = " (geometric mean over the other parameters)";

  const SweepSpec& spec_;
  // Series are algorithm x topology file: the hardware points of one file (--set) are one series.
  std::size_t np_, na_, nf_;
  std::vector<Axis> axes_;
  std::size_t time_axis_ = 0;
  std::vector<std::vector<std::string>> ccr_pts_;
  std::map<std::tuple<std::size_t, std::size_t, std::size_t, std::size_t, double>, Mean> means_;
  double ccr_lo_ = 1e300, ccr_hi_ = 0;
  std::vector<double> time_lo_, time_hi_;
  std::string s_;
};

}  // namespace

std::string sweep_gnuplot_script(const SweepSpec& spec, const SweepResult& result, const std::string& output_path,
                                 PlotFormat format) {
  return PlotScript(spec, result).script(output_path, format);
}

}  // namespace charm::sim
