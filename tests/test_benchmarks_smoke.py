"""The benchmark suite still runs: a smoke-sized ``python -m benchmarks --quick``.

Checks the shape of the table and of the JSON (every workload present, every
figure a finite number, timings positive); it never asserts on speed.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Workloads that must run everywhere; the others may be skipped with a reason
#: (W2 without tools, P1 without its module, Peers without the ``bench`` extra, W1-otel
#: without the ``otel`` extra, Fleet without PostgreSQL).
ALWAYS = (
    "W1",
    "W1-growth",
    "W1-shape",
    "W1-skeleton",
    "W3",
    "W3-10k",
    "W4",
    "W4-turns",
    "W5",
    "P2",
    "S1",
)
MAY_SKIP = ("W1-otel", "W2", "Ir", "P1", "P1-pg", "Fleet", "Peers")


@pytest.fixture(scope="module")
def quick_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = tmp_path_factory.mktemp("bench") / "results.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--quiet", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        # A guard against a hang only: about a minute of CPU, several times that
        # beside the other test workers on a busy machine.
        timeout=1800,
        check=False,
    )
    assert proc.returncode == 0, f"benchmark run failed:\n{proc.stdout}\n{proc.stderr}"
    return proc, json.loads(out.read_text(encoding="utf-8"))


def test_every_workload_is_reported(
    quick_run: tuple[subprocess.CompletedProcess[str], dict[str, Any]],
) -> None:
    _, data = quick_run
    assert data["quick"] is True
    assert data["repetitions"] >= 5
    status = data["workloads"]
    assert set(status) == set(ALWAYS) | set(MAY_SKIP)
    for name in ALWAYS:
        assert status[name] == "ok", (name, status[name])
    for name in MAY_SKIP:
        assert status[name] == "ok" or status[name].startswith("skipped: "), (
            name,
            status[name],
        )
    reported = {row["workload"] for row in data["rows"]}
    assert reported == set(status)


def test_figures_are_finite_and_timings_positive(
    quick_run: tuple[subprocess.CompletedProcess[str], dict[str, Any]],
) -> None:
    _, data = quick_run
    measured = [row for row in data["rows"] if row["status"] == "ok"]
    assert measured
    for row in measured:
        samples = row["samples"]
        assert samples and all(
            isinstance(s, int | float) and math.isfinite(s) for s in samples
        ), row
        assert row["min"] <= row["median"] <= row["max"], row
        fitted = row.get("detail", {}).get(
            "fitted", False
        )  # any sign on a busy machine
        if row["unit"] in ("µs", "x", "turns/s", "KB") and not fitted:
            assert row["min"] > 0, row
    by_metric = {(row["workload"], row["metric"]): row for row in measured}
    ratio = by_metric[("W1", "ratio dsh_trio / floor (CPU)")]
    assert ratio["target"]["verdict"] in ("goal met", "bar met", "MISS")
    assert len(ratio["samples"]) == data["repetitions"]
    assert by_metric[("W5", "cancel -> when_idle() wall µs")]["detail"]["trials"] > 0
    assert by_metric[("W4", "extra trio tasks while idle")]["median"] >= 0
    # Only fitted coefficients are exempt from the sign check above.
    fitted = {
        key for key, row in by_metric.items() if row.get("detail", {}).get("fitted")
    }
    assert fitted and {workload for workload, _ in fitted} == {"W1-shape"}


def test_table_is_printed(
    quick_run: tuple[subprocess.CompletedProcess[str], dict[str, Any]],
) -> None:
    proc, data = quick_run
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("dsh_trio benchmarks: quick")
    assert lines[1].split()[:4] == ["workload", "metric", "median", "min-max"]
    for name in data["workloads"]:
        assert any(line.startswith(f"{name} ") for line in lines), name
    assert any("ratio dsh_trio / floor" in line for line in lines)
