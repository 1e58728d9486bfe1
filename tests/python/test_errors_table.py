"""The Python rows of docs/errors.md: each row's code, run in a fresh interpreter, must raise the exception named
with the message in the row, and the interpreter must end normally (a crash fails the row, it cannot take pytest
down). $TMP must stay empty and $IN/<path> copies unchanged, as in tests/errors_table_test.cpp for the command."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKIPPED = 77  # the exit code of a row whose numeric_locale is not installed

# Runs one row's code; prints the exception it raised as JSON.
RUNNER = r"""
import json, locale, sys
import charm

def numeric_locale(name):
    try:
        locale.setlocale(locale.LC_NUMERIC, name)
    except locale.Error:
        sys.exit(%d)

try:
    exec(sys.argv[1], {"charm": charm, "json": json, "numeric_locale": numeric_locale})
except Exception as e:
    print(json.dumps({"type": type(e).__name__, "message": str(e)}))
else:
    print(json.dumps({"type": None, "message": ""}))
""" % SKIPPED


def code_span(cell):
    a, b = cell.find("`"), cell.rfind("`")
    return cell[a + 1 : b].replace("\\|", "|") if 0 <= a < b else ""


def load_rows():
    with open(os.path.join(ROOT, "docs", "errors.md")) as f:
        text = f.read()
    table = text.split("<!-- python-errors-table:begin -->")[1].split("<!-- python-errors-table:end -->")[0]
    rows = []
    for line in table.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) < 4 or not cells[0].isdigit():
            continue  # the header and the separator
        rows.append((int(cells[0]), code_span(cells[1]), cells[2], code_span(cells[3])))
    return rows


ROWS = load_rows()


def test_the_table_has_a_row_per_class():
    ids = [r[0] for r in ROWS]
    assert ids == sorted(set(ids)) and ids[0] == 1, "ids ascend and are distinct"
    assert len(ROWS) >= 20
    assert all(code and raises.endswith("Error") and message for _, code, raises, message in ROWS)


@pytest.mark.parametrize("row", ROWS, ids=[f"row{r[0]}" for r in ROWS])
def test_row(row, tmp_path):
    _, code, raises, message = row
    scratch, inputs = tmp_path / "tmp", tmp_path / "in"
    scratch.mkdir()
    copies = []
    for rel in re.findall(r"\$IN/([^'\", ]+)", code):
        (inputs / rel).parent.mkdir(parents=True, exist_ok=True)
        if os.path.isfile(os.path.join(ROOT, rel)) and not (inputs / rel).exists():
            shutil.copyfile(os.path.join(ROOT, rel), inputs / rel)
            copies.append(rel)
    code = code.replace("$IN", str(inputs)).replace("$TMP", str(scratch))
    message = message.replace("$IN", str(inputs))
    p = subprocess.run([sys.executable, "-c", RUNNER, code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    if p.returncode == SKIPPED:
        pytest.skip("the row's locale is not installed")
    assert p.returncode == 0, f"the interpreter did not end normally ({p.returncode}): {p.stderr[-2000:]}"
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["type"] == raises, got
    assert message in got["message"], got
    assert not os.listdir(scratch), "a failed call left a file"
    for rel in copies:
        with open(inputs / rel, "rb") as a, open(os.path.join(ROOT, rel), "rb") as b:
            assert a.read() == b.read(), f"an input was changed: {rel}"
