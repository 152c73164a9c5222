"""P2 (part): load+resume of a 100,000-event log, with and without the JSON accelerator.

The log (P2's realistic turns of 8 events, the last turn left open) is generated once;
then, alternating in one process, repetition after repetition:

* **load+resume** (``load_session``: read, check, admit, write the crash closers) with
  ``msgspec`` (the ``dsh-trio[speed]`` extra: the common line checked by one typed
  decode, the others parsed by ``msgspec``) and with the standard library alone; wall
  and CPU seconds (target: 1 s);
* **parse only**: the log's lines through each parser (µs per line), and through the
  typed check;
* **reading the restored log back**: a restored log keeps its events as compressed
  lines and decodes them when read, so the first ``derive_messages()`` after a resume
  and one full pass over ``session.events`` are timed too (what the compact storage
  costs a reader).

Without ``msgspec`` installed the accelerated rows are skipped. ``benchmarks.p2_resume``
adds these rows to P2. Run alone: ``python -m benchmarks.p2_accelerator [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from ._harness import Context, Row, Target, skipped, timed

__all__ = ["rows"]

NAME = "P2"


def _set_accelerator(on: bool, saved: Any) -> None:
    """Load with ``msgspec`` (the typed check of the common line, ``msgspec`` parsing
    the others) or with the standard library alone; ``saved`` is what :func:`_saved`
    returned."""
    from dsh_trio.values import _jsonline, _typed_lines

    fast_decode, typed = saved
    _jsonline._fast_decode = fast_decode if on else None
    _typed_lines._check = typed if on else None


def _saved() -> tuple[Any, Any]:
    """The accelerators in use: the ``msgspec`` line parser and the typed check."""
    from dsh_trio.values import _jsonline, typed_line_check

    return _jsonline._fast_decode, typed_line_check()  # built now, if at all


async def _load(root: Path) -> tuple[int, int, Any]:
    from dsh_trio.persistence import JsonlPersistence, load_session

    with timed() as t:
        session, writer = await load_session(JsonlPersistence(root), "long")
    await writer.close()
    return t.cpu_ns, t.wall_ns, session


def _read_back(session: Any) -> tuple[float, float]:
    """(first derive_messages, one pass over the events), CPU seconds."""
    with timed() as derive:
        session.derive_messages()
    with timed() as scan:
        for _ in session.events:
            pass
    return derive.cpu_ns / 1e9, scan.cpu_ns / 1e9


def _parse_us(lines: list[bytes], parse: Any) -> float:
    start = time.process_time()
    for line in lines:
        parse(line)
    return (time.process_time() - start) / len(lines) * 1e6


def measure(
    *, events: int, repetitions: int, ctx: Context | None
) -> dict[bool | str, Any]:
    """Generate the log and run every measurement ``repetitions`` times."""
    from dsh_trio.values import parse_json_line, parse_json_line_stdlib

    from .p2_resume import write_long_log

    saved = _saved()
    modes = [True, False] if saved[0] is not None else [False]
    tmp = Path(tempfile.mkdtemp(prefix="dsh-p2-accel-"))
    # Keyed by parser (True: msgspec, False: stdlib) and by figure name.
    out: dict[bool | str, Any] = {
        m: {"cpu": [], "wall": [], "parse": []} for m in modes
    }
    out["derive"], out["iterate"], out["typed"] = [], [], []
    try:
        path = write_long_log(tmp, "long", events)
        size = path.stat().st_size
        lines = path.read_bytes().split(b"\n")[1:-1]
        os.sync()  # the generated file's pages: not the first load's fsync to pay
        for k in range(repetitions):
            for on in modes if k % 2 == 0 else modes[::-1]:
                _set_accelerator(on, saved)
                try:
                    cpu, wall, session = trio.run(_load, tmp)
                    out[on]["parse"].append(
                        _parse_us(
                            lines, parse_json_line if on else parse_json_line_stdlib
                        )
                    )
                finally:
                    _set_accelerator(True, saved)
                    os.truncate(path, size)  # drop the closers: the same log each time
                out[on]["cpu"].append(cpu / 1e9)
                out[on]["wall"].append(wall / 1e9)
                if on and saved[1] is not None:
                    out["typed"].append(_parse_us(lines, saved[1]))
                if on is modes[0]:
                    derive, iterate = _read_back(session)
                    out["derive"].append(derive)
                    out["iterate"].append(iterate)
                del session
            if ctx is not None:
                ctx.log(
                    f"P2 100k load+resume rep {k + 1}: "
                    + ", ".join(
                        f"{'msgspec' if m else 'stdlib'} {out[m]['wall'][-1]:.2f} s"
                        for m in modes
                    )
                )
        out["events"] = events
        out["log_mb"] = size / 1e6
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def rows(ctx: Context) -> list[Row]:
    """The rows: load+resume and parse cost per parser, and the read-back costs."""
    events = ctx.size(100_000, 10_000)
    m = measure(events=events, repetitions=ctx.repetitions, ctx=ctx)
    described = f"{m['events']:,} events, {m['log_mb']:.0f} MB log, in process"
    target = Target(bar=1) if not ctx.quick else None
    out: list[Row] = []
    for on, label in ((True, "msgspec"), (False, "stdlib json")):
        if on not in m:
            out.append(
                skipped(
                    NAME,
                    "msgspec is not installed (pip install 'dsh-trio[speed]')",
                    metric=f"{m['events'] // 1000}k-event load+resume, {label}, wall",
                )
            )
            continue
        out += [
            Row(
                workload=NAME,
                metric=f"{m['events'] // 1000}k-event load+resume, {label}, wall",
                unit="s",
                samples=tuple(m[on]["wall"]),
                target=target,
                note=described,
            ),
            Row(
                workload=NAME,
                metric=f"{m['events'] // 1000}k-event load+resume, {label}, CPU",
                unit="s",
                samples=tuple(m[on]["cpu"]),
            ),
            Row(
                workload=NAME,
                metric=f"parse one line, {label}",
                unit="µs",
                samples=tuple(m[on]["parse"]),
            ),
        ]
    if m["typed"]:
        out.append(
            Row(
                workload=NAME,
                metric="typed check of one line, msgspec",
                unit="µs",
                samples=tuple(m["typed"]),
                note="what a load pays instead of parsing and decoding the common line",
            )
        )
    out += [
        Row(
            workload=NAME,
            metric="first derive_messages() after resume",
            unit="s",
            samples=tuple(m["derive"]),
            note="CPU; the surface's events decoded from their lines",
        ),
        Row(
            workload=NAME,
            metric="one pass over session.events",
            unit="s",
            samples=tuple(m["iterate"]),
            note="CPU; every event decoded from its line",
        ),
    ]
    return out


def main(argv: list[str] | None = None) -> None:
    """Run alone (``--quick`` for the small size) and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    ctx = Context(quick=args.quick, repetitions=3)
    for row in rows(ctx):
        value = f"{row.median:>10.3f}" if row.measured else f"{row.status:>10}"
        print(f"{row.metric:<45} {value} {row.unit:<3} {row.note}")


if __name__ == "__main__":
    main()
