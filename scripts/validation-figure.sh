#!/usr/bin/env bash
# Draws docs/img/validation.png: predicted against measured time and speedup
# for every calibrated system, from the reports scripts/calibrate-presets.sh
# leaves in build/calibration/. Needs python3 and gnuplot.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build/calibration
for s in h100-2x8 l20-8-2numa h20-2x8; do
  [ -f "$dir/$s.report.json" ] || { echo "validation-figure: run scripts/calibrate-presets.sh first ($dir/$s.report.json)" >&2; exit 2; }
done
python3 - "$dir" <<'EOF'
import json, sys
d = sys.argv[1]
for s in ["h100-2x8", "l20-8-2numa", "h20-2x8"]:
    r = json.load(open(f"{d}/{s}.report.json"))
    with open(f"{d}/{s}.times.dat", "w") as f:
        for row in r["rows"]:
            f.write(f"{row['measured_ms']} {row['predicted_ms']} {row['loo_predicted_ms']}\n")
    with open(f"{d}/{s}.speedups.dat", "w") as f:
        for p in r["speedups"]:
            f.write(f"{p['measured']} {p['predicted']} {p['loo_predicted']}\n")
EOF
gnuplot <<EOF
set terminal pngcairo size 1200,520 font "sans,11"
set output "docs/img/validation.png"
set multiplot layout 1,2 title "Calibrated presets against the paper's measurements (filled: fitted, open: leave-one-out)"
set grid
set key top left
set logscale xy
set xlabel "measured time (ms)"
set ylabel "predicted time (ms)"
set xrange [3:700]
set yrange [3:700]
plot x title "exact" lc rgb "gray" dt 2, \
  "$dir/h100-2x8.times.dat" u 1:2 w p pt 7 ps 1.2 lc rgb "#1f77b4" title "H100 2x8, 4x8 (Table 5)", \
  "$dir/h100-2x8.times.dat" u 1:3 w p pt 6 ps 1.6 lc rgb "#1f77b4" notitle, \
  "$dir/l20-8-2numa.times.dat" u 1:2 w p pt 5 ps 1.2 lc rgb "#2ca02c" title "L20 (Table 4)", \
  "$dir/l20-8-2numa.times.dat" u 1:3 w p pt 4 ps 1.6 lc rgb "#2ca02c" notitle, \
  "$dir/h20-2x8.times.dat" u 1:2 w p pt 9 ps 1.3 lc rgb "#d62728" title "H20 (Table 4, batch assumed)", \
  "$dir/h20-2x8.times.dat" u 1:3 w p pt 8 ps 1.6 lc rgb "#d62728" notitle
unset logscale
set xlabel "measured speedup over Ring"
set ylabel "predicted speedup over Ring"
set xrange [0:5]
set yrange [0:5]
plot x title "exact" lc rgb "gray" dt 2, \
  "$dir/h100-2x8.speedups.dat" u 1:2 w p pt 7 ps 1.2 lc rgb "#1f77b4" title "H100: CHARM+", \
  "$dir/h100-2x8.speedups.dat" u 1:3 w p pt 6 ps 1.6 lc rgb "#1f77b4" notitle, \
  "$dir/l20-8-2numa.speedups.dat" u 1:2 w p pt 5 ps 1.2 lc rgb "#2ca02c" title "L20: RM+, CHARM+", \
  "$dir/l20-8-2numa.speedups.dat" u 1:3 w p pt 4 ps 1.6 lc rgb "#2ca02c" notitle, \
  "$dir/h20-2x8.speedups.dat" u 1:2 w p pt 9 ps 1.3 lc rgb "#d62728" title "H20: RM+, CHARM+", \
  "$dir/h20-2x8.speedups.dat" u 1:3 w p pt 8 ps 1.6 lc rgb "#d62728" notitle
unset multiplot
EOF
echo "validation-figure: wrote docs/img/validation.png" >&2
