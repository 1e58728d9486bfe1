#!/usr/bin/env python3
"""Prints docs/validation.md's transfer tables: how the model predicts a system it was not fitted on.

usage: scripts/transfer-table.py [build/tools/charm]   (needs a build; a few minutes on 2 cores)

1. Nominal: every paper system's rows predicted by its nominal file as a user would write it (datasheet
   figures, the default te-fused stack and its kernel tables): no measurement of the paper enters.
2. Leave one system out: the paper's software stack (paper-testbed's fields) and the system's links fitted
   on one system's rows, then the stack carried to each other system, whose links stay nominal.
Each figure is `charm calibrate`'s "base" error of the target (its prediction before any fit of its own):
time MAPE over its runs and speedup-over-ring MAPE over its pairs.
"""
import json
import os
import subprocess
import sys
import tempfile

CHARM = sys.argv[1] if len(sys.argv) > 1 else "build/tools/charm"
SYSTEMS = {  # name: (nominal file, measurements, links the system's own rows fit)
    "H100": ("topologies/nominal/h100-2x8.json",
             "calibration/paper-table5-h100.csv,calibration/paper-table9-h100.csv",
             "inter.bandwidth_gbps,intra.injection_gbps"),
    "L20": ("topologies/nominal/l20-8-2numa.json", "calibration/paper-table4-l20.csv",
            "intra.bandwidth_gbps,numa.bandwidth_gbps"),
    "H20": ("topologies/nominal/h20-2x8.json", "calibration/paper-table4-h20.csv",
            "inter.bandwidth_gbps,intra.injection_gbps"),
}
STACK = "stack.step_us,stack.update_passes,stack.message_us,stack.compute_slowdown,stack.comm_slowdown"


def calibrate(topology, csv, fit, out_dir):
    out = os.path.join(out_dir, "out.json")
    r = subprocess.run([CHARM, "calibrate", "-t", topology, "-m", csv, "--fit", fit, "--no-loo", "--restarts", "0",
                        "-o", out, "--json"], capture_output=True, text=True, check=True)
    return json.loads(r.stdout), json.load(open(out))


def errors(report, which):
    m = report["mape_percent"]
    fmt = lambda x: "-" if x is None else f"{x:.1f}%"
    return f"{fmt(m['time'][which])} / {fmt(m['speedup'][which])}"


def with_stack(nominal, stack):
    t = json.load(open(nominal))
    t["stack"] = stack
    return t


def main():
    tmp = tempfile.mkdtemp(prefix="charm-transfer-")
    print("| system (rows) | nominal file: time / speedup MAPE |")
    print("|---|---|")
    for name, (nominal, csv, links) in SYSTEMS.items():
        report, _ = calibrate(nominal, csv, links.split(",")[0], tmp)
        rows = report["mape_percent"]["time"]["rows"]
        print(f"| {name} ({rows} runs) | {errors(report, 'base')} |")
    print()
    fitted = {}
    for name, (nominal, csv, links) in SYSTEMS.items():
        base = os.path.join(tmp, f"{name}-base.json")
        json.dump(with_stack(nominal, "paper-testbed"), open(base, "w"))
        report, doc = calibrate(base, csv, STACK + "," + links, tmp)
        fitted[name] = (doc["stack"], report)
    print("| fitted on | its own rows (in-sample) | " + " | ".join(f"predicts {n}" for n in SYSTEMS) + " |")
    print("|---|---|" + "---|" * len(SYSTEMS))
    for src, (stack, own) in fitted.items():
        cells = []
        for dst, (nominal, csv, links) in SYSTEMS.items():
            if dst == src:
                cells.append("-")
                continue
            target = os.path.join(tmp, f"{src}-to-{dst}.json")
            json.dump(with_stack(nominal, stack), open(target, "w"))
            report, _ = calibrate(target, csv, links.split(",")[0], tmp)
            cells.append(errors(report, "base"))
        print(f"| {src} | {errors(own, 'in_sample')} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
