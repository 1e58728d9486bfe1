#!/usr/bin/env python3
"""The scaling table of bench/RESULTS.md ("Scaling by stage"): runs bench/scale_stages
(one process per size and repetition, best of REPS by each stage's time) and prints a
markdown table of each stage's wall time and peak resident memory, with the exponent
of a least-squares fit of log(time) on log(N) over the sizes from FIT_FROM up.

  scripts/scale-table.py BUILD_DIR [--sizes 8,64,...] [--algo charm] [--pass both]
                         [--seq 1048576] [--reps 3] [--fit-from 64] [--stages ...] [--uniform] [--symmetry]
"""
import argparse
import json
import math
import subprocess
import sys

STAGES = ["topology", "plan", "validate", "simulate"]


def run(binary, n, a):
    cmd = [binary, str(n), a.algo, a.pass_, str(a.seq), "--stages", a.stages] + (["--uniform"] if a.uniform else []) + (
        ["--symmetry"] if a.symmetry else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def slope(xs, ys):
    lx = [math.log(x) for x in xs]
    ly = [math.log(max(y, 1e-9)) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    den = sum((x - mx) ** 2 for x in lx)
    return sum((x - mx) * (y - my) for x, y in zip(lx, ly)) / den if den > 0 else float("nan")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("build")
    p.add_argument("--sizes", default="8,16,32,64,128,256,512,1024")
    p.add_argument("--algo", default="charm")
    p.add_argument("--pass", dest="pass_", default="both")
    p.add_argument("--seq", type=int, default=1 << 20)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--fit-from", type=int, default=64)
    p.add_argument("--stages", default=",".join(STAGES))
    p.add_argument("--uniform", action="store_true")
    p.add_argument("--symmetry", action="store_true", help="plan and simulate the quotient (one class of ranks)")
    a = p.parse_args()
    binary = a.build.rstrip("/") + "/bench/scale_stages"
    stages = [s for s in STAGES if s in a.stages.split(",") and not (a.symmetry and s == "validate")]
    sizes = [int(s) for s in a.sizes.split(",")]
    rows = {}
    for n in sizes:
        best = None
        for _ in range(a.reps):
            r = run(binary, n, a)
            if best is None:
                best = r
            else:
                for s in stages:
                    if r[s]["s"] < best[s]["s"]:
                        best[s] = r[s]
        rows[n] = best
        print(f"# n={n} done", file=sys.stderr)
    head = "| N | ops |" + "".join(f" {s} s | {s} peak MB |" for s in stages)
    print(head)
    print("|" + "---:|" * (2 + 2 * len(stages)))
    for n in sizes:
        r = rows[n]
        cells = [str(n), f"{r.get('ops', 0):,}"]
        for s in stages:
            cells += [f"{r[s]['s']:.4g}", f"{r[s]['peak_rss_bytes'] / 1e6:.0f}"]
        print("| " + " | ".join(cells) + " |")
    fit = [n for n in sizes if n >= a.fit_from]
    if len(fit) >= 2:
        cells = [f"exponent ({fit[0]}..{fit[-1]})", ""]
        for s in stages:
            cells += [f"{slope(fit, [rows[n][s]['s'] for n in fit]):.2f}", f"{slope(fit, [rows[n][s]['peak_rss_bytes'] for n in fit]):.2f}"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
