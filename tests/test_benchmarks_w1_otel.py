"""``python -m benchmarks.w1_otel --instructions``: W1-otel's configurations counted.

``valgrind`` is replaced by a script that reports a known count for each child, so
the arithmetic and the parsing are checked without valgrind; each child itself runs
natively for a few turns.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FAKE_VALGRIND = """#!{python}
import os
import sys
assert os.environ.get("PYTHONHASHSEED") == "0"
assert sys.argv[1:4] == ["--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
assert sys.argv[5:8] == ["-m", "benchmarks.w1_otel", "--child"], sys.argv
kind, turns = sys.argv[8:]
per_turn = {{"off": 1000, "api": 1100, "batch": 1450, "alone-batch": 400}}[kind]
print(f"==7== I   refs:      {{5_000 + int(turns) * per_turn:,}}", file=sys.stderr)
"""


def _w1_otel(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.w1_otel", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


def test_the_counts_are_per_turn_and_ratios_to_off(tmp_path: Path) -> None:
    fake = tmp_path / "valgrind"
    fake.write_text(FAKE_VALGRIND.format(python=sys.executable), encoding="utf-8")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    done = _w1_otel(
        "--instructions", "--turns", "10", "--only", "api,batch,alone-batch", env=env
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "W1 instructions per turn, 10 turns, garbage collector off"
    assert [line.split() for line in lines[1:]] == [
        ["off", "1,000", "1.000", "x", "off"],
        ["api", "1,100", "1.100", "x", "off"],
        ["batch", "1,450", "1.450", "x", "off"],
        ["alone-batch", "400", "0.400", "x", "off"],
    ]


def test_an_unknown_configuration_is_refused() -> None:
    done = _w1_otel("--instructions", "--only", "batch,fast")
    assert done.returncode == 2
    assert "unknown configuration(s) fast" in done.stderr


@pytest.mark.parametrize(
    "kind", ["off", "api", "batch", "simple", "floor-batch", "alone-batch"]
)
def test_each_counted_child_runs(kind: str) -> None:
    # The SDK children check that every span of their turns was exported.
    done = _w1_otel("--child", kind, "3")
    assert done.returncode == 0, done.stderr
