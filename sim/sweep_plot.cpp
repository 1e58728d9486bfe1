#include "sim/sweep_plot.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "sim/evaluate.hpp"

namespace charm::sim {

namespace {

/// Fixed colours, so an algorithm looks the same in every figure; charm stands out.
std::string colour(const std::string& algo, std::size_t fallback) {
  static const std::map<std::string, std::string> known{{"ring", "#555555"},    {"ring-zigzag", "#8c564b"},
                                                        {"merge", "#1f77b4"},   {"rm+", "#2ca02c"},
                                                        {"charm", "#d62728"},   {"allgather-kv", "#9467bd"},
                                                        {"tasp", "#ff7f0e"},    {"tasp-zigzag", "#bcbd22"},
                                                        {"ulysses", "#17becf"}, {"usp", "#e377c2"}};
  static const char* const spare[] = {"#7f7f7f", "#aec7e8", "#98df8a", "#ffbb78"};
  if (auto it = known.find(algo); it != known.end()) return it->second;
  return spare[fallback % 4];
}

/// gnuplot single-quoted string: a quote is written twice.
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

/// gnuplot double-quoted string, for text with line breaks (titles).
std::string text(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '"' || c == '\\') out += std::string("\\") + c;
    else out += c;
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

std::string block_name(const std::string& kind, std::size_t pass, std::size_t algo, std::size_t topo = 0) {
  return fmt::format("${}_p{}_a{}_t{}", kind, pass, algo, topo);
}

} // namespace

std::string sweep_title(const SweepSpec& spec) {
  std::string topos;
  for (const auto& t : spec.topologies)
    topos += fmt::format("{}{} ({} GPUs, {} domain{})", topos.empty() ? "" : ", ", t.name, t.num_gpus(), default_domains(t),
                         default_domains(t) == 1 ? "" : "s");
  std::vector<std::string_view> dtypes, masks, layouts;
  for (auto d : spec.dtypes) dtypes.push_back(to_string(d));
  for (bool c : spec.causal) masks.push_back(c ? "causal" : "full");
  for (auto l : spec.layouts) layouts.push_back(to_string(l));
  return fmt::format("Speedup over Ring on {}\nbatch {}   seq {}   heads {}   kv heads {}   head dim {}   {}   {} mask   {} layout",
                     topos, list_label(spec.batch), list_label(spec.seq), list_label(spec.heads),
                     spec.kv_heads.empty() ? std::string("= heads") : list_label(spec.kv_heads), list_label(spec.head_dim),
                     fmt::join(dtypes, "/"), fmt::join(masks, "/"), fmt::join(layouts, "/"));
}

std::string sweep_gnuplot_script(const SweepSpec& spec, const SweepResult& result, const std::string& output_path,
                                 PlotFormat format) {
  const std::size_t np = spec.passes.size(), na = spec.algos.size(), nt = spec.topologies.size();
  auto algo_index = [&](const std::string& a) {
    return static_cast<std::size_t>(std::find(spec.algos.begin(), spec.algos.end(), a) - spec.algos.begin());
  };
  auto pass_index = [&](ir::Phase p) {
    return static_cast<std::size_t>(std::find(spec.passes.begin(), spec.passes.end(), p) - spec.passes.begin());
  };
  auto slot = [&](std::size_t p, std::size_t a, std::size_t t) { return (p * na + a) * nt + t; };

  // Speedup vs CCR: every row a point. Speedup vs seq: geometric mean per (pass, algo, topology, seq).
  std::vector<std::vector<std::string>> ccr_pts(np * na * nt);
  std::map<std::tuple<std::size_t, std::size_t, std::size_t, std::int64_t>, std::pair<double, int>> seq_acc;
  double ccr_lo = 1e300, ccr_hi = 0;
  for (const auto& r : result.rows) {
    if (!(r.speedup_vs_ring > 0)) continue;  // ring could not run: no speedup to draw
    const std::size_t p = pass_index(r.pass), a = algo_index(r.algo);
    if (p >= np || a >= na || r.topology >= nt) continue;
    if (r.ccr > 0) {
      ccr_pts[slot(p, a, r.topology)].push_back(fmt::format("{:.6g} {:.6g}", r.ccr, r.speedup_vs_ring));
      ccr_lo = std::min(ccr_lo, r.ccr);
      ccr_hi = std::max(ccr_hi, r.ccr);
    }
    auto& acc = seq_acc[{p, a, r.topology, r.workload.seq}];
    acc.first += std::log(r.speedup_vs_ring);
    acc.second += 1;
  }

  std::string s;
  s += "# charm sweep: speedup over Ring (generated by `charm sweep --plot-script`; the data is inline)\n";
  // Data first: datablocks cannot be defined inside a multiplot.
  for (std::size_t p = 0; p < np; ++p)
    for (std::size_t a = 0; a < na; ++a)
      for (std::size_t t = 0; t < nt; ++t) {
        s += block_name("ccr", p, a, t) + " << EOD\n";
        for (const auto& line : ccr_pts[slot(p, a, t)]) s += line + "\n";
        s += "EOD\n";
        s += block_name("seq", p, a, t) + " << EOD\n";
        for (const auto& [key, acc] : seq_acc) {
          const auto& [kp, ka, kt, seq] = key;
          if (kp == p && ka == a && kt == t) s += fmt::format("{} {:.6g}\n", seq, std::exp(acc.first / acc.second));
        }
        s += "EOD\n";
      }

  const int cols = static_cast<int>(std::max<std::size_t>(np, 1));
  const int width = cols == 1 ? 1100 : 800 * cols, height = 1150;
  if (format == PlotFormat::Svg) {
    s += fmt::format("set terminal svg size {},{} dynamic noenhanced font 'Sans,12' background rgb 'white'\n", width, height);
  } else {
    s += "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n";
    s += fmt::format("  set terminal pngcairo size {},{} noenhanced font 'Sans,11' background rgb 'white'\n", width, height);
    s += "} else {\n";
    s += fmt::format("  set terminal png size {},{} noenhanced background rgb 'white'\n", width, height);
    s += "}\n";
  }
  s += "set output " + quoted(output_path) + "\n";
  s += "set encoding utf8\nset grid xtics ytics mxtics lc rgb '#dddddd' lw 1\nset border lw 1.2\n";
  s += "set key outside below center horizontal maxrows 2 samplen 2.5 width 1 font ',10'\n";
  s += "set bmargin 7\nset ylabel 'speedup over Ring (x)'\nset yrange [0:*]\nset ytics add ('1' 1)\n";
  s += fmt::format("set multiplot layout 2,{} rowsfirst title {} font ',13'\n", cols, text(sweep_title(spec)));

  // The legend has two parts: colour = algorithm, marker (and dash, below) = topology.
  auto marker = [](std::size_t t) { return std::array<int, 5>{7, 5, 9, 13, 11}[t % 5]; };
  auto legend = [&](bool lines) {
    std::string k = "1 with lines dt 2 lw 1.5 lc rgb '#555555' title 'ring (= 1)'";
    for (std::size_t a = 0; a < na; ++a)
      if (spec.algos[a] != "ring")
        k += fmt::format(", keyentry with {} lw 2 pt 7 lc rgb {} title {}", lines ? "linespoints" : "points",
                         quoted(colour(spec.algos[a], a)), quoted(spec.algos[a]));
    if (nt > 1)
      for (std::size_t t = 0; t < nt; ++t)
        k += fmt::format(", keyentry with {} lw 1.5 dt {} pt {} ps 1.2 lc rgb '#444444' title {}", lines ? "linespoints" : "points",
                         t % 5 + 1, marker(t), quoted(spec.topologies[t].name));
    return k;
  };
  auto pass_name = [&](std::size_t p) { return spec.passes[p] == ir::Phase::Fwd ? std::string("Forward") : std::string("Backward"); };

  // Row 1: speedup vs CCR.
  for (std::size_t p = 0; p < np; ++p) {
    s += fmt::format("set title {}\n", quoted(pass_name(p) + ": speedup vs CCR (one point per configuration)"));
    s += "set logscale x 10\nset xlabel 'CCR = computation / communication of Ring (Eq. 7, log scale)'\n";
    s += "set format x '%g'\nset xtics autofreq\n";
    if (ccr_hi > 0) s += fmt::format("set xrange [{:.6g}:{:.6g}]\n", ccr_lo / 1.3, ccr_hi * 1.3);
    std::string plot = "plot " + legend(false);
    for (std::size_t a = 0; a < na; ++a)
      for (std::size_t t = 0; t < nt; ++t) {
        if (spec.algos[a] == "ring" || ccr_pts[slot(p, a, t)].empty()) continue;
        plot += fmt::format(", {} using 1:2 with points pt {} ps 0.6 lc rgb {} notitle", block_name("ccr", p, a, t), marker(t),
                            quoted(colour(spec.algos[a], a)));
      }
    s += plot + "\n";
  }

  // Row 2: speedup vs sequence length.
  const std::set<std::int64_t> seqs(spec.seq.begin(), spec.seq.end());
  std::vector<std::string> tics;
  if (seqs.size() <= 14)
    for (auto v : seqs) tics.push_back(fmt::format("{} {}", quoted(size_label(v)), v));
  for (std::size_t p = 0; p < np; ++p) {
    s += fmt::format("set title {}\n", quoted(pass_name(p) + ": speedup vs sequence length (geometric mean over the other parameters)"));
    s += "unset logscale x\nset logscale x 2\nset xlabel 'sequence length (tokens, log scale)'\n";
    s += tics.empty() ? std::string("set xtics autofreq\n") : fmt::format("set xtics ({})\n", fmt::join(tics, ", "));
    if (!seqs.empty()) s += fmt::format("set xrange [{}:{}]\n", double(*seqs.begin()) / 1.25, double(*seqs.rbegin()) * 1.25);
    std::string plot = "plot " + legend(true);
    for (std::size_t a = 0; a < na; ++a)
      for (std::size_t t = 0; t < nt; ++t) {
        if (spec.algos[a] == "ring") continue;
        plot += fmt::format(", {} using 1:2 with linespoints lw 2 dt {} pt {} ps 1.1 lc rgb {} notitle", block_name("seq", p, a, t),
                            t % 5 + 1, marker(t), quoted(colour(spec.algos[a], a)));
      }
    s += plot + "\n";
  }
  s += "unset multiplot\nset output\n";
  return s;
}

} // namespace charm::sim
