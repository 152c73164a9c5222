"""P2: resuming a long session log and listing many logs, costs that must not follow the file.

* **resume**: ``load_session`` of a 500,000-event log (20,000 with ``--quick``) whose
  last turn a crash left open, in a fresh process per repetition: wall time, CPU time
  and the process's peak resident set (targets: 10 s and 200 MB). The log is streamed
  (read in blocks; each event decoded, checked and admitted as it is read, and kept as
  its compressed line, not as a value); the crash closers are written, and
  the file is cut back to its original size before the next repetition.
* **load+resume of 100,000 events** with and without the ``msgspec`` accelerator,
  and what reading a restored log back costs (:mod:`benchmarks.p2_accelerator`).
* **listing**: what ``dsh-trio sessions`` does over 1,000 logs of 1 MB each (50 of
  100 KB with ``--quick``): every header, and a small window at the end of each log
  for the last turn and prompt (target: 1 s, wall, warm page cache).

The logs are generated in a temporary directory: realistic turns of 8 events (the
P1 turn: inbox splice, turn and step markers, the prompt, the route, an assistant
reply with its compact stream record, the closers).

Run alone: ``python -m benchmarks.p2_resume [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import trio

from ._harness import Context, Row, Target

__all__ = ["run", "write_log", "write_long_log"]

NAME = "P2"
MB: Final = 1_000_000
EVENTS_PER_TURN: Final = 8


# --------------------------------------------------------------------------- the logs


def _turn_template() -> list[dict[str, Any]]:
    """The JSON lines of one P1 turn (turn 1, seqs from 0)."""
    from dsh_trio.session import Session
    from dsh_trio.values import event_to_json

    from .jsonl_append import append_turn

    session = Session.create("template", cwd="/bench")
    append_turn(session, 1)
    return [event_to_json(ev) for ev in session.events]


def _header_line(session_id: str) -> bytes:
    from dsh_trio.persistence._jsonl_lines import encode_header
    from dsh_trio.values import SessionHeader, SessionId

    return encode_header(
        SessionHeader(
            id=SessionId(session_id), created_at=1_800_000_000_000, cwd="/bench"
        )
    )


def _body_lines(events: int, *, open_last: bool) -> Iterator[str]:
    """``events`` event lines (whole turns; the last one left open if asked)."""
    template = _turn_template()
    dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
    turns = max(events // EVENTS_PER_TURN, 1)
    seq = 0
    for turn in range(1, turns + 1):
        events_here = template[:-1] if open_last and turn == turns else template
        for event in events_here:
            line = dict(event, seq=seq, time=1_800_000_000_000 + seq)
            data = event["data"]
            if isinstance(data, dict) and "turn" in data:
                line["data"] = dict(data, turn=turn)
            yield dumps(line) + "\n"
            seq += 1


def _body(events: int, *, open_last: bool) -> bytes:
    return "".join(_body_lines(events, open_last=open_last)).encode("utf-8")


def _log_path(root: Path, session_id: str) -> Path:
    from dsh_trio.persistence._jsonl_paths import (
        LOG_FILE_NAME,
        encode_session_id,
        project_dir_name,
    )

    directory = root / project_dir_name("/bench") / encode_session_id(session_id)
    directory.mkdir(parents=True, exist_ok=True)
    return directory / LOG_FILE_NAME


def write_log(root: Path, session_id: str, body: bytes) -> Path:
    """Store ``body`` under ``session_id`` in the JSONL layout; the log's path."""
    path = _log_path(root, session_id)
    path.write_bytes(_header_line(session_id) + body)
    return path


def write_long_log(root: Path, session_id: str, events: int) -> Path:
    """Store a log of ``events`` events, its last turn open, written as generated."""
    path = _log_path(root, session_id)
    with path.open("wb") as f:
        f.write(_header_line(session_id))
        batch: list[str] = []
        for line in _body_lines(events, open_last=True):
            batch.append(line)
            if len(batch) == 10_000:
                f.write("".join(batch).encode("utf-8"))
                batch.clear()
        f.write("".join(batch).encode("utf-8"))
    return path


# --------------------------------------------------------------------------- resume


def _peak_rss() -> int:
    """This process's peak resident set in bytes (``VmHWM``; ``ru_maxrss`` would
    count the parent's peak from before the ``exec``)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _resume_child(root: str, session_id: str) -> dict[str, float]:
    """In a fresh process: load the session once; time, CPU and peak RSS."""
    from dsh_trio.persistence import JsonlPersistence, load_session

    base = _peak_rss()

    async def main() -> tuple[float, float, int]:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        session, writer = await load_session(JsonlPersistence(root), session_id)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        await writer.close()
        return wall, cpu, session.next_seq

    wall, cpu, events = trio.run(main)
    peak = _peak_rss()
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_rss_mb": peak / MB,
        "base_rss_mb": base / MB,
        "events": events,
    }


def _resume_once(root: Path, session_id: str, path: Path, size: int) -> dict[str, Any]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.p2_resume",
            "--child",
            str(root),
            session_id,
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=str(Path(__file__).resolve().parent.parent),
    )
    os.truncate(path, size)  # drop the closers: every repetition loads the same log
    if proc.returncode != 0:
        raise RuntimeError(
            f"P2 resume child failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}"
        )
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


# --------------------------------------------------------------------------- listing


def _listing_once(root: Path) -> tuple[float, int]:
    from dsh_trio.cli._listing import list_sessions
    from dsh_trio.persistence import JsonlPersistence

    start = time.perf_counter()
    summaries = trio.run(list_sessions, JsonlPersistence(root))
    return time.perf_counter() - start, len(summaries)


# --------------------------------------------------------------------------- the workload


def measure(
    *, events: int, logs: int, log_bytes: int, repetitions: int, ctx: Context | None
) -> dict[str, Any]:
    """Generate the logs, run both measurements ``repetitions`` times; the samples."""
    tmp = Path(tempfile.mkdtemp(prefix="dsh-p2-"))
    try:
        big_root = tmp / "resume"
        path = write_long_log(big_root, "long", events)
        size = path.stat().st_size
        resumes = []
        for k in range(repetitions):
            resumes.append(_resume_once(big_root, "long", path, size))
            if ctx is not None:
                ctx.log(
                    f"P2 resume rep {k + 1}: {resumes[-1]['wall_s']:.2f} s, "
                    f"{resumes[-1]['peak_rss_mb']:.0f} MB peak"
                )
        shutil.rmtree(big_root)

        list_root = tmp / "listing"
        body = _body(log_bytes // 290, open_last=False)
        for n in range(logs):
            write_log(list_root, f"listed-{n:05d}", body)
        listings = []
        for _ in range(repetitions):
            seconds, listed = _listing_once(list_root)
            assert listed == logs, (listed, logs)
            listings.append(seconds)
        return {
            "events": resumes[0]["events"],
            "log_mb": size / MB,
            "resumes": resumes,
            "listing_s": listings,
            "listed_log_mb": (len(body) + len(_header_line("listed-00000"))) / MB,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(ctx: Context) -> list[Row]:
    """Resume of a long log and a 1,000-log listing, as table rows."""
    events = ctx.size(500_000, 20_000)
    logs = ctx.size(1_000, 50)
    log_bytes = ctx.size(1 * MB, 100_000)
    repetitions = min(ctx.repetitions, ctx.size(3, 2))
    m = measure(
        events=events,
        logs=logs,
        log_bytes=log_bytes,
        repetitions=repetitions,
        ctx=ctx,
    )
    resumes = m["resumes"]
    described = f"{m['events']:,} events, {m['log_mb']:.0f} MB log, fresh process"
    from .p2_accelerator import rows as accelerator_rows

    return [
        Row(
            workload=NAME,
            metric="resume of the long log, wall",
            unit="s",
            samples=tuple(r["wall_s"] for r in resumes),
            target=Target(bar=10) if not ctx.quick else None,
            note=described,
        ),
        Row(
            workload=NAME,
            metric="resume of the long log, CPU",
            unit="s",
            samples=tuple(r["cpu_s"] for r in resumes),
        ),
        Row(
            workload=NAME,
            metric="resume peak RSS (whole process)",
            unit="MB",
            samples=tuple(r["peak_rss_mb"] for r in resumes),
            target=Target(bar=200) if not ctx.quick else None,
            note=f"{resumes[0]['base_rss_mb']:.0f} MB before the load (interpreter, imports)",
        ),
        Row(
            workload=NAME,
            metric="dsh-trio sessions listing, wall",
            unit="s",
            samples=tuple(m["listing_s"]),
            target=Target(bar=1) if not ctx.quick else None,
            note=f"{logs:,} logs of {m['listed_log_mb']:.1f} MB; header + end window",
        ),
        *accelerator_rows(ctx),
    ]


def main(argv: list[str] | None = None) -> None:
    """Run alone (``--quick`` for the small sizes) and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--child", nargs=2, metavar=("ROOT", "ID"))
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_resume_child(*args.child)))
        return
    ctx = Context(quick=args.quick, repetitions=1)
    for row in run(ctx):
        print(f"{row.metric:<40} {row.median:>10.3f} {row.unit:<3} {row.note}")


if __name__ == "__main__":
    main()
