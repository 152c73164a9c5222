"""The ``Ir`` benchmark: instructions per turn (per event for Load) from counted child runs.

``valgrind`` is replaced by a script that reports a known count for each child
(``1,000 + turns * agents * per_turn``), so the arithmetic and the parsing of its report are
checked without valgrind, and without timing anything.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FAKE_VALGRIND = """#!{python}
import os
import sys
assert os.environ.get("PYTHONHASHSEED") == "0"  # counts comparable across children
workload, kind, turns = sys.argv[-3:]
per_turn = {{"floor": 400, "skeleton": 600, "dsh_trio": 1000}}[kind] * (2 if workload == "W2" else 1)
# W3's turns are per agent; a Load repetition reads 10,000 events
agents = {{"W3": 100, "Load": 10_000}}.get(workload, 1)
count = 1_000 + int(turns) * agents * per_turn
assert sys.argv[1:4] == ["--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
print(f"==7== I   refs:      {{count:,}}", file=sys.stderr)
"""

SCRIPT = """
import json
from benchmarks._harness import Context
from benchmarks.instructions import run
rows = run(Context(quick=False, verbose=False))
print(json.dumps([[r.metric, r.samples, r.detail, r.status] for r in rows]))
"""


def _python(
    script: str, *args: str, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """``python -c script args...`` in the checkout, its output captured as text."""
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=check,
        timeout=600,
    )


def test_instruction_ratios_come_from_counted_runs(tmp_path: Path) -> None:
    fake = tmp_path / "valgrind"
    fake.write_text(FAKE_VALGRIND.format(python=sys.executable), encoding="utf-8")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    done = _python(SCRIPT, env=env)
    rows = json.loads(done.stdout.splitlines()[-1])
    assert [metric.split(":")[0] for metric, *_ in rows] == [
        "W1",
        "W1-skeleton",
        "W1-skeleton",
        "W1-skeleton",
        "W1-quiet",
        "W2",
        "W3",
        "W5",
        "Load",
    ]
    shape = {
        "W1-skeleton: instructions per turn, skeleton / floor": (
            [1.5],
            {"floor": 400.0, "skeleton": 600.0},
        ),
        "W1-skeleton: instructions per turn, dsh_trio / skeleton": (
            [1000 / 600],
            {"skeleton": 600.0, "dsh_trio": 1000.0},
        ),
    }
    for metric, samples, detail, status in rows:
        assert status == "ok"
        if metric in shape:
            assert (samples, detail) == shape.pop(metric)
            continue
        assert samples == [2.5], metric
        scale = 2 if metric.startswith("W2") else 1
        assert detail == {"floor": 400.0 * scale, "dsh_trio": 1000.0 * scale}
    assert not shape  # both rows of the skeleton were made


FAKE_COMPARED = """#!{python}
import os
import sys
assert os.environ.get("PYTHONHASHSEED") == "0"
*child, workload, kind, turns, flag = sys.argv[4:]
assert (kind, flag) == ("dsh_trio", "--no-gc"), sys.argv  # the code's own count
# The other checkout's src comes first on the path: its turns cost 800, ours 1,000.
other = os.environ.get("PYTHONPATH", "").startswith({other!r})
count = 5_000 + int(turns) * (800 if other else 1_000)
print(f"==7== I   refs:      {{count:,}}", file=sys.stderr)
"""

COMPARE = """
import sys
from benchmarks.ir_compare import main
sys.exit(main([sys.argv[1], "--only", "W1,W5"]))
"""


def test_ir_compare_counts_both_checkouts_without_the_collector(
    tmp_path: Path,
) -> None:
    other = tmp_path / "other" / "src"
    (other / "dsh_trio").mkdir(parents=True)
    (other / "dsh_trio" / "__init__.py").write_text("", encoding="utf-8")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "valgrind"
    fake.write_text(
        FAKE_COMPARED.format(python=sys.executable, other=str(other)), encoding="utf-8"
    )
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    done = _python(COMPARE, str(other), env=env)
    lines = done.stdout.splitlines()
    assert lines[0].endswith("garbage collector off")
    assert lines[2].split() == ["W1", "1,000", "800", "+25.00%"]
    assert lines[3].split() == ["W5", "1,000", "800", "+25.00%"]
    # Progress: one line per counted run (two per workload and checkout).
    progress = [line for line in done.stderr.splitlines() if line.startswith("  .. ")]
    assert len(progress) == 8
    assert progress[-1].startswith("  .. 8/8: ")


def test_ir_compare_names_a_bad_checkout(tmp_path: Path) -> None:
    done = _python(COMPARE, str(tmp_path), check=False)
    assert done.returncode == 2
    assert f"{tmp_path} holds no dsh_trio package" in done.stderr
