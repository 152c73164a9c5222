"""Turn a stand-alone benchmark's ``main(quick=...)`` into table rows.

Such a ``main`` prints its own table and returns a JSON-like dict of figures. It is
called once per repetition with its output captured; every number in the returned
dict becomes one row whose samples are that number's value in each repetition.
Whole numbers that never change between repetitions (sizes, counts) are parameters
of the run: they go into the first row's note instead.
"""

from __future__ import annotations

import contextlib
import io
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ._harness import Context, Row

__all__ = ["rows_from_main"]


def _leaves(
    value: object, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], float]]:
    if isinstance(value, bool):
        return
    if isinstance(value, int | float):
        yield path, float(value)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _leaves(item, (*path, str(key)))


_UNITS = (
    ("ratio", "x"),
    ("_us", "µs"),
    ("_ms", "ms"),
    ("_s", "s"),
    ("per_s", "/s"),
    ("per_sec", "/s"),
    ("_bytes", "B"),
    ("_kb", "KB"),
)


def _unit(path: tuple[str, ...]) -> str:
    last = path[-1].lower() if path else ""
    for suffix, unit in _UNITS:
        if last.endswith(suffix) or last == suffix.strip("_"):
            return unit
    return ""


def _label(path: tuple[str, ...]) -> str:
    """``("append", "first_us")`` -> ``"append first"`` (the unit has its own column)."""
    parts = list(path)
    if parts and _unit(path) and _unit(path) != "x":
        words = parts[-1].split("_")
        if len(words) > 1:
            parts[-1] = "_".join(words[:-1])
    return " ".join(part.replace("_", " ") for part in parts)


def rows_from_main(
    workload: str,
    main: Callable[..., Any],
    ctx: Context,
    *,
    note: str = "",
    labels: Mapping[str, tuple[str, str]] | None = None,
) -> list[Row]:
    """Call ``main(quick=ctx.quick)`` once per repetition; one row per returned number.

    ``labels`` maps a top-level key to its (metric, unit); other keys are named
    from their path and unit suffix. Labelled keys come first, in ``labels`` order.
    """
    labels = labels or {}
    runs: list[dict[tuple[str, ...], float]] = []
    captured = ""
    for k in range(ctx.repetitions):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            result = main(quick=ctx.quick)
        captured = out.getvalue()
        runs.append(dict(_leaves(result)))
        ctx.log(f"{workload} rep {k + 1} done")
    common = [p for p in runs[0] if all(p in r for r in runs)]
    order = {key: n for n, key in enumerate(labels)}
    paths = sorted(
        common, key=lambda p: order.get(p[0], len(order)) if len(p) == 1 else len(order)
    )
    parameters: list[str] = []
    measured: list[tuple[tuple[str, ...], tuple[float, ...]]] = []
    for path in paths:
        samples = tuple(r[path] for r in runs)
        if len(path) == 1 and path[0] in labels:
            measured.append((path, samples))
        elif (
            all(s.is_integer() and s == samples[0] for s in samples)
            and _unit(path) == ""
        ):
            parameters.append(f"{_label(path)}={samples[0]:,.0f}")
        elif all(math.isfinite(s) for s in samples):
            measured.append((path, samples))
    notes = "; ".join(part for part in (note, ", ".join(parameters)) if part)
    rows = [
        Row(
            workload=workload,
            metric=labels[path[0]][0]
            if len(path) == 1 and path[0] in labels
            else _label(path),
            unit=labels[path[0]][1]
            if len(path) == 1 and path[0] in labels
            else _unit(path),
            samples=samples,
            note=notes if n == 0 else "",
            detail={"output_last_repetition": captured} if n == 0 and captured else {},
        )
        for n, (path, samples) in enumerate(measured)
    ]
    if not rows:
        rows.append(
            Row(
                workload=workload,
                metric="-",
                status="error: main() returned no figures",
            )
        )
    return rows
