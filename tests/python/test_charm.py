"""The Python module against the charm command: the same library, the same figures, the same messages.

Run by CTest (python_test, from the repository root, PYTHONPATH=<build>/python, CHARM_BIN=<build>/tools/charm),
or by hand: PYTHONPATH=build/python python3 -m pytest tests/python
"""

import json
import os
import subprocess

import pytest

import charm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
H100 = os.path.join(ROOT, "topologies", "h100-2x8.json")
CHARM_BIN = os.environ.get("CHARM_BIN", os.path.join(ROOT, "build", "tools", "charm"))
# The paper's workload (README), small enough to simulate in a moment.
PAPER = dict(seq=26880, batch=16, heads=12, head_dim=192)


def cli(*args):
    """The command's exit code, stdout and stderr."""
    p = subprocess.run([CHARM_BIN, *map(str, args)], capture_output=True, text=True, cwd=ROOT)
    return p.returncode, p.stdout, p.stderr


def test_plan_validate_round_trip(tmp_path):
    out = tmp_path / "ring.json"
    p = charm.plan(algo="ring", ranks=4, seq="8k", heads=8, head_dim=64, pass_="both", causal=True, out=str(out))
    assert p["algo"] == "ring" and p["ranks"] == 4
    assert p["workload"]["pass"] == "both" and p["workload"]["causal"] is True
    assert json.loads(out.read_text()) == p  # the file is the dict
    for plan in (p, str(out), out):
        v = charm.validate(plan)
        assert v["valid"] and v["violations"] == []
        assert v["summary"].startswith("valid")
    code, stdout, _ = cli("validate", out)
    assert code == 0 and stdout.strip() == v["summary"]
    # A broken plan: an op's dependency removed is a violation, reported as the command reports it.
    bad = json.loads(out.read_text())
    bad["ops"] = bad["ops"][:-1]
    bad_file = tmp_path / "bad.json"
    bad_file.write_text(json.dumps(bad))
    v = charm.validate(bad)
    assert not v["valid"] and v["violations"]
    code, stdout, _ = cli("validate", bad_file)
    assert code == 1 and stdout.strip() == v["summary"]


def test_simulate_equals_the_cli():
    args = dict(topology=H100, algo="charm", pass_="bwd", **PAPER)
    py = charm.simulate(**args)
    code, stdout, stderr = cli("simulate", "-t", H100, "--algo", "charm", "--pass", "bwd", "--seq", 26880,
                               "--batch", 16, "--heads", 12, "--head-dim", 192, "--json")
    assert code == 0, stderr
    assert py == json.loads(stdout)  # every figure, to the last bit
    assert py["time_ms"] > 0 and py["ranks"] == 16


def test_simulate_takes_a_topology_dict_and_a_plan():
    with open(H100) as f:
        doc = json.load(f)
    by_path = charm.simulate(topology=H100, algo="ring", **PAPER)
    by_dict = charm.simulate(topology=doc, algo="ring", **PAPER)
    assert by_dict["time_ms"] == by_path["time_ms"]
    p = charm.plan(algo="ring", ranks=16, domains=2, **PAPER)
    from_plan = charm.simulate(topology=H100, plan=p)
    assert from_plan["time_ms"] == by_path["time_ms"]


def test_compare_rows():
    rows = charm.compare(topology=H100, algos=["ring", "charm", "ulysses"], **PAPER)
    assert len(rows) == 6  # three algorithms x (fwd, bwd)
    keys = set(rows[0])
    assert all(set(r) == keys for r in rows)  # pandas.DataFrame(rows) takes them as they are
    ring = [r for r in rows if r["algo"] == "ring"]
    assert all(r["speedup_vs_ring"] == 1.0 and r["error"] is None for r in ring)
    uly = [r for r in rows if r["algo"] == "ulysses"]
    assert all(r["time_ms"] is None and "12 heads do not divide" in r["error"] for r in uly)
    code, stdout, stderr = cli("compare", "-t", H100, "--algos", "ring,charm,ulysses", "--seq", 26880, "--batch", 16,
                               "--heads", 12, "--head-dim", 192, "--json")
    assert code == 0, stderr
    results = json.loads(stdout)["results"]
    assert [(r["algo"], r["pass"]) for r in results] == [(r["algo"], r["pass"]) for r in rows]
    for r, c in zip(rows, results):
        assert r["time_ms"] == c.get("time_ms") and r["speedup_vs_ring"] == c.get("speedup_vs_ring")


def test_compare_layouts_as_the_command():
    H100_4X8 = os.path.join(ROOT, "topologies", "h100-4x8.json")
    rows = charm.compare(topology=H100_4X8, cp=16, tp=2, algos="ring,charm", **PAPER)
    assert {(r["cp"], r["tp"]) for r in rows} == {(16, 2)}
    code, stdout, stderr = cli("compare", "-t", H100_4X8, "--cp", 16, "--tp", 2, "--algos", "ring,charm", "--seq",
                               26880, "--batch", 16, "--heads", 12, "--head-dim", 192, "--json")
    assert code == 0, stderr
    assert [r["time_ms"] for r in rows] == [r["time_ms"] for r in json.loads(stdout)["results"]]
    with pytest.raises(ValueError, match="--cp: CP 5 x TP 2 = 10 does not divide"):
        charm.compare(topology=H100_4X8, cp=5, tp=2, **PAPER)


def test_sweep_rows():
    rows = charm.sweep(topology=H100, batch=1, seq=[8192, "16k"], heads=16, head_dim=128, algos="ring,charm",
                       pass_="both", jobs=2)
    assert len(rows) == 2 * 2 * 2  # seq x pass x algo
    keys = set(rows[0])
    assert all(set(r) == keys for r in rows)
    assert {"topology", "seq", "algo", "pass", "time_ms", "speedup_vs_ring", "ccr", "fits"} <= keys
    assert sorted({r["seq"] for r in rows}) == [8192, 16384]
    hw = charm.sweep(topology=H100, batch=1, seq="8k", heads=16, head_dim=128, algos=["ring"],
                     set={"inter.bandwidth_gbps": [25, 50]})
    assert [r["inter.bandwidth_gbps"] for r in hw] == [25, 50]
    assert hw[0]["time_ms"] > hw[1]["time_ms"]


def test_advise():
    adv = charm.advise(topology=H100, jobs=2, **PAPER)
    cands = adv["candidates"]
    assert cands and adv["best"] == cands[0]
    assert [c["total_ms"] for c in cands] == sorted(c["total_ms"] for c in cands)
    fw = adv["best"]["frameworks"]
    assert fw["line"] == charm.frameworks(algo=cands[0]["algo"], layout=cands[0]["layout"], ranks=16,
                                          domains=cands[0]["domains"], tp=1)["line"]
    code, stdout, stderr = cli("advise", "-t", H100, "--seq", 26880, "--batch", 16, "--heads", 12, "--head-dim", 192,
                               "--jobs", 2, "--json")
    assert code == 0, stderr
    assert [c["algo"] for c in json.loads(stdout)["candidates"]] == [c["algo"] for c in cands]
    assert "#   " + fw["line"] + "\n" in cli("advise", "-t", H100, "--seq", 26880, "--batch", 16, "--heads", 12,
                                             "--head-dim", 192, "--jobs", 2)[1]
    # The module's advise is the command's: the same document, key for key.
    assert json.loads(stdout) == adv


def test_advise_layouts_layers_and_ties():
    adv = charm.advise(topology=H100, jobs=2, tp_search=[1, 2, 4], layers=8, tie=20, algos=["ring", "charm"], **PAPER)
    best = adv["best"]
    assert adv["layers"] == 8 and best["model_ms"] == 8 * best["total_ms"]
    assert {c["deployment"]["tp"] for c in adv["candidates"]} == {1, 2, 4}
    assert all(c["tie"] == (c["total_ms"] <= 1.2 * best["total_ms"]) for c in adv["candidates"])
    with pytest.raises(ValueError, match="--tp-search: TP sizes must be in"):
        charm.advise(topology=H100, tp_search=[0], **PAPER)


def test_frameworks_table():
    table = charm.frameworks()
    assert {r["algo"] for r in table} == set(charm.algorithms())
    ring = charm.frameworks(algo="ring-zigzag", ranks=16, domains=2, causal=True)
    assert ring["megatron_lm"] == "--context-parallel-size 16 --cp-comm-type p2p"
    assert ring["ring_flash_attention"] == "zigzag_ring_flash_attn"
    assert charm.frameworks(algo="charm", ranks=16, domains=2)["megatron_lm"] is None


def test_errors_are_value_errors_with_the_cli_message():
    with pytest.raises(ValueError) as e:
        charm.simulate(topology=H100, algo="ulysses", **PAPER)
    code, _, stderr = cli("simulate", "-t", H100, "--algo", "ulysses", "--seq", 26880, "--batch", 16, "--heads", 12,
                          "--head-dim", 192)
    assert code == 2
    assert stderr == "charm: error: " + str(e.value) + "\n"
    with pytest.raises(ValueError) as e:
        charm.compare(topology=H100, seq="12q", heads=12)
    assert str(e.value).startswith("--seq: ")
    with pytest.raises(ValueError, match="--topology"):
        charm.simulate(algo="ring")
    with pytest.raises(ValueError, match="describes the --uniform cluster only"):
        charm.simulate(topology=H100, algo="ring", tflops=100)
    # The cluster's checks are the command's, in its order: no cluster source is said before a stray number.
    with pytest.raises(ValueError, match="^--topology: give exactly one of --topology FILE and --uniform$"):
        charm.simulate(algo="ring", tflops=100)
    code, _, stderr = cli("simulate", "--algo", "ring", "--tflops", 100)
    assert code == 2 and stderr == "charm: error: --topology: give exactly one of --topology FILE and --uniform\n"
    with pytest.raises(ValueError, match="--ranks: must be in"):
        charm.simulate(topology=H100, algo="ring", ranks=32)
    # With a topology, ranks is one group on its first GPUs, as the command line's --ranks.
    assert charm.simulate(topology=H100, algo="ring", ranks=4, seq=8192)["placement"]["text"].startswith("ranks 0-3")
    with pytest.raises(TypeError):
        charm.simulate(topology=H100, sequence=4096)  # not a flag


def test_a_deployment_is_every_cp_group_at_once():
    h100_4x8 = os.path.join(ROOT, "topologies", "h100-4x8.json")
    py = charm.simulate(topology=h100_4x8, algo="charm", cp=16, tp=2, seq=32768, batch=4, heads=12, head_dim=128)
    code, stdout, stderr = cli("simulate", "-t", h100_4x8, "--algo", "charm", "--cp", 16, "--tp", 2, "--seq", 32768,
                               "--batch", 4, "--heads", 12, "--head-dim", 128, "--json")
    assert code == 0, stderr
    assert py == json.loads(stdout)
    assert py["placement"]["groups"] == 2 and py["placement"]["group_ranks"] == 16
    assert py["workload"]["heads"] == 6  # TP 2 splits the heads
    with pytest.raises(ValueError, match="^--cp: CP 5 x TP 2 = 10 does not divide"):
        charm.simulate(topology=h100_4x8, algo="charm", cp=5, tp=2)


def test_masks_take_the_cli_spelling():
    py = charm.simulate(topology=H100, algo="ring", seq=8192, heads=8, mask="document:4096,2048,2048")
    code, stdout, stderr = cli("simulate", "-t", H100, "--algo", "ring", "--seq", 8192, "--heads", 8,
                               "--mask", "document:4096,2048,2048", "--json")
    assert code == 0, stderr
    assert py == json.loads(stdout)
    assert py["workload"]["documents"] == [4096, 2048, 2048]
    assert py["visible_tflop_per_rank"]["max"] > py["visible_tflop_per_rank"]["min"]
    with pytest.raises(ValueError, match="^--mask: the document lengths sum to 300"):
        charm.simulate(topology=H100, algo="ring", seq=8192, mask="document:100,200")


def test_a_group_placed_by_hand():
    py = charm.simulate(topology=H100, algo="ring", seq=8192, heads=8, gpus=[0, 2, 4, 6, 8, 10, 12, 14])
    code, stdout, stderr = cli("simulate", "-t", H100, "--algo", "ring", "--seq", 8192, "--heads", 8,
                               "--gpus", "0,2,4,6,8,10,12,14", "--json")
    assert code == 0, stderr
    assert py == json.loads(stdout)
    assert py["ranks"] == 8 and py["domains"] == 2  # the GPUs span both nodes
    assert py["placement"]["text"].startswith("ranks 0-7 on GPUs 0,2,4,6,8,10,...,14 of 16")
    with pytest.raises(ValueError, match="^--gpus: GPU 2 is named twice$"):
        charm.simulate(topology=H100, algo="ring", gpus="0,2,2,6")


def test_model_config_tp_blocks_and_layout_axes():
    model = os.path.join(ROOT, "tests", "data", "llama70b-config.json")
    box = os.path.join(ROOT, "tests", "data", "l40s-8.json")
    adv = charm.advise(topology=box, model=model, seq="16k", causal=True, tp_search=[1, 8], jobs=2, runnable=True)
    assert adv["layers"] == 80 and adv["workload"]["heads"] == 64 and adv["workload"]["kv_heads"] == 8
    assert "all-gathers and reduce-scatters" in adv["scope"]
    tp8 = [c for c in adv["candidates"] if c.get("deployment", {}).get("tp") == 8]
    assert tp8 and tp8[0]["tensor_parallel"]["fwd"]["all_gather_ms"] > 0
    assert all(c["runnable"] for c in adv["candidates"])
    rows = charm.sweep(topology=H100, seq="16k", tp=[1, 2], algos="ring")
    assert sorted({(r["tp"], r["cp"]) for r in rows}) == [(1, 16), (2, 8)]
    assert all(r["batch"] == 1 and r["heads"] == 8 and r["head_dim"] == 128 for r in rows)  # simulate's defaults
    # Heads given beside a model must agree with its config, as on the command line (they were ignored before).
    agree = charm.simulate(topology=box, algo="ring", model=model, heads=64, kv_heads=8, seq="4k")
    assert agree["workload"]["heads"] == 64 and agree["workload"]["kv_heads"] == 8
    with pytest.raises(ValueError, match="^--heads: 32 contradicts the --model config's num_attention_heads 64; "
                                         "give one of them$"):
        charm.simulate(topology=box, algo="ring", model=model, heads=32, seq="4k")
    code, _, stderr = cli("simulate", "-t", box, "--algo", "ring", "--model", model, "--heads", 32, "--seq", "4k")
    assert code == 2 and "--heads: 32 contradicts the --model config's num_attention_heads 64" in stderr


def test_the_balanced_layout_solves_as_the_cli_does():
    args = dict(topology=H100, algo="ring", seq=8192, heads=8, mask="document:4096,2048,1024,1024",
                layout="balanced", pass_="both")
    py = charm.simulate(**args)
    code, stdout, stderr = cli("simulate", "-t", H100, "--algo", "ring", "--seq", 8192, "--heads", 8, "--mask",
                               "document:4096,2048,1024,1024", "--layout", "balanced", "--pass", "both", "--json")
    assert code == 0, stderr
    by_cli = json.loads(stdout)
    for run in (py, by_cli):  # the solve's wall time and whether it hit the budget are the machine's
        del run["chunk_solver"]["solve_ms"], run["chunk_solver"]["budget_hit"]
    assert py == by_cli
    assert len(py["workload"]["chunks"]) == 16
    solver = py["chunk_solver"]
    assert solver["best"]["time_ms"] == py["time_ms"] <= solver["thd"]["time_ms"]
    with pytest.raises(ValueError, match="^--layout: the balanced layout places packed documents"):
        charm.simulate(topology=H100, algo="ring", seq=8192, layout="balanced")
    # The solver's flags: a seed and a budget, as --solve-seed and --solve-ms.
    seeded = charm.simulate(**args, solve_seed=7, solve_ms=10000)
    code, stdout, stderr = cli("simulate", "-t", H100, "--algo", "ring", "--seq", 8192, "--heads", 8, "--mask",
                               "document:4096,2048,1024,1024", "--layout", "balanced", "--pass", "both",
                               "--solve-seed", 7, "--solve-ms", 10000, "--json")
    assert code == 0, stderr
    assert seeded["chunk_solver"]["tried"] == json.loads(stdout)["chunk_solver"]["tried"]
    with pytest.raises(ValueError, match="^--solve-ms: must be >= 0, got -1"):
        charm.simulate(**args, solve_ms=-1)
    advice = charm.advise(topology=H100, algos=["ring"], seq=8192, heads=8, mask="document:4096,2048,1024,1024",
                          solve_seed=7)
    assert "ring [balanced]" in [c["label"] for c in advice["candidates"]]
