#!/usr/bin/env python3
"""Prints the H100 tables of docs/validation.md section 3 from a `charm calibrate --json` report.

usage: scripts/validation-tables.py build/calibration/h100-2x8.report.json
(scripts/calibrate-presets.sh writes the report.) Markdown on stdout: by table and algorithm, then
Table 5 and Table 9 per row (measured -> predicted in-sample, error; speedups with leave-one-out).
"""
import json
import sys


def pct(x):
    return "-" if x is None else f"{x:+.1%}"


def num(x):
    return "-" if x is None else f"{x:.2f}"


def mape(errs):
    errs = [abs(e) for e in errs if e is not None]
    return f"{100 * sum(errs) / len(errs):.1f}%" if errs else "-"


def main(path):
    r = json.load(open(path))
    rows = r["rows"]
    t5 = [x for x in rows if "table5" in x["file"]]
    t9 = [x for x in rows if "table9" in x["file"]]
    print("| rows | n | in-sample | leave-one-out |")
    print("|---|---|---|---|")
    groups = []
    for algo in ("ring", "charm"):
        groups.append((f"Table 5 (Ring, CHARM+, fwd and bwd, 2×8 and 4×8): {algo}",
                       [x for x in t5 if x["algo"] == algo]))
    for algo in ("ring", "tasp", "charm"):
        groups.append((f"Table 9 (fwd, 2×8): {algo}", [x for x in t9 if x["algo"] == algo and x["metric"] == "time"]))
    groups.append(("Table 9: Ring's T_comm", [x for x in t9 if x["metric"] == "comm"]))
    groups.append(("Table 9: Ring's T_comp", [x for x in t9 if x["metric"] == "compute"]))
    for name, g in groups:
        print(f"| {name} | {len(g)} | {mape([x['error'] for x in g])} | {mape([x['loo_error'] for x in g])} |")
    def speedup(ring, x):
        return {"measured": ring["measured_ms"] / x["measured_ms"], "predicted": ring["predicted_ms"] / x["predicted_ms"],
                "loo_predicted": ring["loo_predicted_ms"] / x["loo_predicted_ms"]
                if ring["loo_predicted_ms"] and x["loo_predicted_ms"] else None}

    def ms(x):
        return f"{x['measured_ms']:.2f} → {x['predicted_ms']:.2f} ({x['error']:+.0%})"

    print()
    print("H100, Table 5 (ms):")
    print()
    print("| GPUs | B | S | pass | Ring measured | Ring predicted | CHARM+ measured | CHARM+ predicted | CHARM+ LOO "
          "| speedup measured | predicted | LOO |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for x in t5:
        if x["algo"] != "charm":
            continue
        ring = [y for y in t5 if y["algo"] == "ring" and y["batch"] == x["batch"] and y["seq"] == x["seq"]
                and y["pass"] == x["pass"] and y["ranks"] == x["ranks"]][0]
        p = speedup(ring, x)
        gpus = "2×8" if x["ranks"] == 16 else "4×8"
        print(f"| {gpus} | {x['batch']} | {x['seq']} | {x['pass']} | {ring['measured_ms']:.2f} | "
              f"{ring['predicted_ms']:.2f} ({ring['error']:+.1%}) | {x['measured_ms']:.2f} | "
              f"{x['predicted_ms']:.2f} ({x['error']:+.1%}) | {pct(x['loo_error'])} | {p['measured']:.2f} | "
              f"{p['predicted']:.2f} | {num(p['loo_predicted'])} |")
    print()
    print("H100, Table 9 (forward, 2×8; ms, predicted in-sample, error; speedup = Ring / CHARM+):")
    print()
    print("| B | S | T_comm | T_comp | Ring | TASP | CHARM+ | speedup measured | predicted | LOO |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    keys = []
    for x in t9:
        k = (x["batch"], x["seq"])
        if k not in keys:
            keys.append(k)
    for b, s in keys:
        g = {(x["algo"], x["metric"]): x for x in t9 if x["batch"] == b and x["seq"] == s}
        cell = lambda a, m="time": ms(g[(a, m)]) if (a, m) in g else "-"
        p = speedup(g[("ring", "time")], g[("charm", "time")])
        print(f"| {b} | {s} | {cell('ring', 'comm')} | {cell('ring', 'compute')} | {cell('ring')} | {cell('tasp')} | "
              f"{cell('charm')} | {p['measured']:.2f} | {p['predicted']:.2f} | {num(p['loo_predicted'])} |")


if __name__ == "__main__":
    main(sys.argv[1])
