"""Repetitions, medians, targets, the results table and its JSON form.

A workload returns :class:`Row` values: one measured quantity each, with every
repetition's sample kept. The table shows the median and the min-max range; the JSON
file keeps the samples too. Timing helpers measure CPU time
(``time.process_time_ns``) and wall time (``time.perf_counter_ns``) together.
"""

from __future__ import annotations

import gc
import json
import math
import os
import platform
import statistics
import sys
import textwrap
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

__all__ = [
    "Context",
    "Row",
    "Target",
    "Timer",
    "clean_heap",
    "live_rows",
    "machine_info",
    "render_table",
    "results_json",
    "skipped",
    "timed",
    "write_json",
]


@attrs.frozen(kw_only=True)
class Target:
    """A ceiling a figure should stay under: the first ``bar`` and the ``goal`` beyond.

    Lower is better for every figure this suite targets.
    """

    bar: float | None = None
    goal: float | None = None
    #: Extra condition printed beside the verdict (e.g. "partial reply kept").
    condition: str = ""

    def verdict(self, value: float, *, condition_met: bool = True) -> str:
        """``"goal met"``, ``"bar met"`` (the goal missed), or ``"MISS"``.

        A target with a goal and no bar is ``"goal missed"`` when the goal is missed.
        The goal also needs ``condition_met``.
        """
        if self.goal is not None and value <= self.goal and condition_met:
            return "goal met"
        if self.bar is not None:
            return "bar met" if value <= self.bar else "MISS"
        return "goal missed"

    def describe(self) -> str:
        """The target in words, e.g. ``"bar <= 5, goal <= 2"``."""
        parts = []
        if self.bar is not None:
            parts.append(f"bar <= {self.bar:g}")
        if self.goal is not None:
            parts.append(f"goal <= {self.goal:g}")
        if self.condition:
            parts.append(self.condition)
        return ", ".join(parts)


@attrs.frozen(kw_only=True)
class Row:
    """One measured figure of one workload, over its repetitions.

    A row with no samples is a workload (or part of one) that did not run;
    ``status`` then says why (``"skipped: ..."`` or ``"error: ..."``).
    """

    workload: str
    metric: str
    unit: str = ""
    samples: tuple[float, ...] = ()
    target: Target | None = None
    #: Figures of other implementations for the same workload, as text.
    ref: str = ""
    note: str = ""
    status: str = "ok"
    #: Whether the target's extra condition held (see :attr:`Target.condition`).
    condition_met: bool = True
    #: Extra structured detail written to the JSON only.
    detail: dict[str, Any] = attrs.field(factory=dict)

    @property
    def measured(self) -> bool:
        """Whether the row holds samples."""
        return bool(self.samples)

    @property
    def median(self) -> float:
        """The median sample (NaN without samples)."""
        return statistics.median(self.samples) if self.samples else math.nan

    @property
    def low(self) -> float:
        """The smallest sample (NaN without samples)."""
        return min(self.samples) if self.samples else math.nan

    @property
    def high(self) -> float:
        """The largest sample (NaN without samples)."""
        return max(self.samples) if self.samples else math.nan

    @property
    def verdict(self) -> str:
        """The target verdict of the median, or ``""`` without a target or samples."""
        if self.target is None or not self.samples:
            return ""
        return self.target.verdict(self.median, condition_met=self.condition_met)

    def to_json(self) -> dict[str, Any]:
        """The row as plain JSON data."""
        out: dict[str, Any] = {
            "workload": self.workload,
            "metric": self.metric,
            "unit": self.unit,
            "status": self.status,
        }
        if self.samples:
            out.update(
                median=self.median,
                min=self.low,
                max=self.high,
                samples=list(self.samples),
            )
        if self.target is not None:
            out["target"] = {
                "bar": self.target.bar,
                "goal": self.target.goal,
                "condition": self.target.condition or None,
                "verdict": self.verdict or None,
            }
        if self.ref:
            out["ref"] = self.ref
        if self.note:
            out["note"] = self.note
        if self.detail:
            out["detail"] = self.detail
        return out


def skipped(workload: str, reason: str, *, metric: str = "-") -> Row:
    """A row for a workload that did not run, with the reason."""
    return Row(workload=workload, metric=metric, status=f"skipped: {reason}")


@attrs.frozen(kw_only=True)
class Context:
    """How a workload should run: full or smoke-sized, and how many repetitions."""

    quick: bool = False
    repetitions: int = 5
    #: Repetitions of the peers' W1 run (each takes tens of seconds).
    peer_repetitions: int = 1
    #: Print progress lines on stderr.
    verbose: bool = True
    #: Sessions of the Fleet workload's one-worker run (``None``: its default).
    fleet_sessions: int | None = None

    def size(self, full: int, quick: int) -> int:
        """``full`` in a full run, ``quick`` in a smoke-sized one."""
        return quick if self.quick else full

    def log(self, text: str) -> None:
        """A progress line on stderr (the table goes to stdout)."""
        if self.verbose:
            print(f"  .. {text}", file=sys.stderr, flush=True)


@attrs.define
class Timer:
    """CPU and wall nanoseconds of one timed block (filled in when it exits)."""

    cpu_ns: int = 0
    wall_ns: int = 0


@contextmanager
def timed() -> Iterator[Timer]:
    """Time the block in CPU (process) and wall nanoseconds.

    Example::

        with timed() as t:
            work()
        print(t.cpu_ns / 1000, "µs CPU")
    """
    timer = Timer()
    cpu, wall = time.process_time_ns, time.perf_counter_ns
    c0, w0 = cpu(), wall()
    try:
        yield timer
    finally:
        timer.cpu_ns = cpu() - c0
        timer.wall_ns = wall() - w0


def clean_heap() -> None:
    """Collect garbage so one repetition does not pay for the last one's."""
    gc.collect()


def machine_info() -> dict[str, Any]:
    """What the figures were measured on."""
    import trio

    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "trio": trio.__version__,
    }


# --------------------------------------------------------------------------- output


def _number(value: float) -> str:
    if math.isnan(value):
        return "-"
    magnitude = abs(value)
    if magnitude >= 10_000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.0f}" if magnitude >= 1_000 else f"{value:.1f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


_HEADERS = (
    "workload",
    "metric",
    "median",
    "min-max",
    "unit",
    "target",
    "verdict",
    "reference / note",
)


def _cells(row: Row) -> tuple[str, ...]:
    if not row.measured:
        return (row.workload, row.metric, "-", "-", "", "", "", row.status)
    spread = f"{_number(row.low)} - {_number(row.high)}"
    target = row.target.describe() if row.target is not None else ""
    tail = "; ".join(part for part in (row.ref, row.note) if part)
    return (
        row.workload,
        row.metric,
        _number(row.median),
        spread,
        row.unit,
        target,
        row.verdict,
        tail,
    )


#: The widest line :func:`render_table` prints (the notes column wraps).
TABLE_WIDTH = 120


def render_table(rows: Sequence[Row], *, title: str = "") -> str:
    """The rows as one aligned plain-text table, at most ``TABLE_WIDTH`` columns
    wide when the fixed columns fit."""
    body = [_cells(row) for row in rows]
    widths = [len(h) for h in _HEADERS]
    for cells in body:
        for k, cell in enumerate(cells[:-1]):
            widths[k] = max(widths[k], len(cell))
    right = {2, 3}

    # The last column wraps onto continuation lines so no line is wider than
    # TABLE_WIDTH: beside the row when there is room, else below it, under the metric.
    lead = sum(widths[:-1]) + 2 * (len(widths) - 1)
    beside = TABLE_WIDTH - lead >= 32
    indent = lead if beside else widths[0] + 2
    room = TABLE_WIDTH - indent

    def line(cells: Sequence[str]) -> str:
        parts = []
        for k, cell in enumerate(cells[:-1]):
            if k in right:
                parts.append(cell.rjust(widths[k]))
            else:
                parts.append(cell.ljust(widths[k]))
        tail = textwrap.wrap(cells[-1], room, break_on_hyphens=False)
        if not beside:
            tail = ["", *tail]
        first = "  ".join([*parts, tail[0] if tail else ""]).rstrip()
        return "\n".join([first, *(" " * indent + more for more in tail[1:])])

    out = []
    if title:
        out.append(title)
    headers = _HEADERS if beside else (*_HEADERS[:-1], "")
    out.append(line(headers))
    out.append(line(["-" * w for w in widths[:-1]] + ["-" * len(headers[-1])]))
    previous = None
    for row, cells in zip(rows, body, strict=True):
        if previous is not None and row.workload != previous:
            out.append("")
        out.append(line(cells))
        previous = row.workload
    return "\n".join(out)


def results_json(
    rows: Sequence[Row],
    *,
    context: Context,
    elapsed_s: float,
    workloads: dict[str, str],
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The whole run as plain JSON data."""
    return {
        "suite": "dsh_trio benchmarks",
        "format": 1,
        "quick": context.quick,
        "repetitions": context.repetitions,
        "peer_repetitions": context.peer_repetitions,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "elapsed_s": round(elapsed_s, 3),
        "machine": machine_info(),
        "workloads": workloads,
        "rows": [row.to_json() for row in rows],
        **(extra or {}),
    }


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` (parents created), replacing it atomically.

    Non-finite floats (a ratio over a zero, say) are written as ``null``.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    text = json.dumps(_finite(data), indent=2, ensure_ascii=False, allow_nan=False)
    tmp.write_text(text + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def live_rows(
    workload: str,
    live: Sequence[tuple[float, float]],
    *,
    note: str,
    floor_note: str,
    target: Target,
) -> list[Row]:
    """The three rows of a live-listener figure: dsh_trio, its floor, and their ratio.

    ``live`` holds one ``(floor, dsh_trio)`` CPU µs/turn pair per repetition, measured
    alternately in one process; the ratio row is what ``bench_ratio.py`` reports.
    """
    return [
        Row(
            workload=workload,
            metric="live: dsh_trio CPU µs/turn",
            unit="µs",
            samples=tuple(r for _, r in live),
            note=note,
        ),
        Row(
            workload=workload,
            metric="live: bare-trio floor CPU µs/turn",
            unit="µs",
            samples=tuple(f for f, _ in live),
            note=floor_note,
        ),
        Row(
            workload=workload,
            metric="live: ratio dsh_trio / floor (CPU)",
            unit="x",
            samples=tuple(r / f for f, r in live),
            target=target,
            note="the figure bench-peers/bench_ratio.py reports",
        ),
    ]
