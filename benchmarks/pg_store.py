"""P1-pg: the PostgreSQL session store beside JSONL (P1): appends per durability, load+resume.

On a throwaway local cluster (initdb + pg_ctl on a Unix socket, fsync on, as the
tests start one from ``tests/persistence/postgres/_cluster.py``), measures:

* events/s appended through :class:`SessionRecorder` + :class:`PostgresPersistence`
  with durability ``"turn"``, ``"always"`` and ``"none"``, in the same realistic
  turns of 8 events as P1 (``benchmarks/jsonl_append.py``), each batch one
  transaction; and, writing each turn before the next (one transaction per turn,
  as one agent's turns go), the turn batches per second one session commits;
* the time to load and resume (crash closers included) a session of 100,000 events
  (10,000 with ``--quick``).

When no server can start here, the workload prints one row saying why.
Run: ``python -m benchmarks --only P1,P1-pg``.
"""

from __future__ import annotations

import importlib.util
import time
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import trio

from ._harness import Context, Row, skipped
from .jsonl_append import EVENTS_PER_TURN, append_turn

__all__ = ["run"]

NAME = "P1-pg"
_CLUSTER = (
    Path(__file__).resolve().parent.parent
    / "tests"
    / "persistence"
    / "postgres"
    / "_cluster.py"
)


def _cluster_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_dsh_pg_cluster", _CLUSTER)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(_CLUSTER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def _append_rate(
    dsn: str, durability: Any, turns: int, *, one_by_one: bool
) -> float:
    """Events/s for ``turns`` turns through a recorder; or, ``one_by_one``, batches/s.

    ``one_by_one`` waits for each turn's batch to be written before the next turn
    (one transaction per turn, as a single agent's turns go): the commit latency
    bound. Otherwise the appender runs ahead and the recorder batches what queued.
    """
    from dsh_trio.persistence import SessionRecorder, persist_new_session
    from dsh_trio.persistence.postgres import PostgresPersistence
    from dsh_trio.session import Session

    store = PostgresPersistence(dsn, durability=durability)
    session = Session.create(f"bench-{durability}-{time.monotonic_ns()}", cwd="/bench")
    async with trio.open_nursery() as nursery:
        writer = await persist_new_session(store, session)
        recorder = SessionRecorder(
            session, writer, durability=durability, spawn=nursery.start_soon
        )
        start = time.perf_counter()
        for turn in range(1, turns + 1):
            append_turn(session, turn)
            if one_by_one:
                await recorder.wait_written()
            else:
                await trio.lowlevel.checkpoint()
        await recorder.aclose()
        elapsed = time.perf_counter() - start
    await store.aclose()
    return (turns if one_by_one else session.next_seq) / elapsed


async def _load_time(dsn: str, events: int) -> float:
    """Seconds to load and resume a long session (an interrupted turn to close)."""
    from dsh_trio.persistence import load_session, persist_new_session
    from dsh_trio.persistence.postgres import PostgresPersistence
    from dsh_trio.session import Session

    store = PostgresPersistence(dsn)
    sid = f"bench-long-{time.monotonic_ns()}"
    session = Session.create(sid, cwd="/bench")
    turns = events // EVENTS_PER_TURN
    for turn in range(1, turns):
        append_turn(session, turn)
    append_turn(session, turns, close=False)
    writer = await persist_new_session(store, session)
    await writer.close()
    start = time.perf_counter()
    _, writer = await load_session(store, sid)
    elapsed = time.perf_counter() - start
    await writer.close()
    await store.aclose()
    return elapsed


def run(ctx: Context) -> list[Row]:
    """Start a cluster, measure each figure ``ctx.repetitions`` times, stop it."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return [
            skipped(NAME, "psycopg is not installed (pip install 'dsh-trio[postgres]')")
        ]
    try:
        cluster_mod = _cluster_module()
    except FileNotFoundError:
        return [skipped(NAME, f"{_CLUSTER} is not present")]
    try:
        cluster = cluster_mod.start_cluster(fast=False)
    except cluster_mod.ClusterUnavailable as exc:
        return [skipped(NAME, f"no PostgreSQL server can start here: {exc}")]
    turns = ctx.size(2000, 100)
    long_events = ctx.size(100_000, 10_000)
    samples: dict[str, list[float]] = {}
    try:
        dsn = cluster.new_database()
        for rep in range(ctx.repetitions):
            for durability in ("turn", "always", "none"):
                rate = trio.run(
                    partial(_append_rate, one_by_one=False), dsn, durability, turns
                )
                batches = trio.run(
                    partial(_append_rate, one_by_one=True), dsn, durability, turns // 4
                )
                samples.setdefault(f"append {durability}", []).append(rate)
                samples.setdefault(f"batches {durability}", []).append(batches)
            samples.setdefault("load", []).append(
                trio.run(_load_time, dsn, long_events)
            )
            ctx.log(f"{NAME} rep {rep + 1} done")
    finally:
        cluster.stop()
    rows: list[Row] = []
    for durability in ("turn", "always", "none"):
        rows.append(
            Row(
                workload=NAME,
                metric=f"append events/s, durability={durability}",
                unit="events/s",
                samples=tuple(samples[f"append {durability}"]),
                note=f"{turns} turns of 8 events, local server, fsync on"
                if durability == "turn"
                else "",
            )
        )
        rows.append(
            Row(
                workload=NAME,
                metric=f"turn batches/s one at a time, durability={durability}",
                unit="batches/s",
                samples=tuple(samples[f"batches {durability}"]),
            )
        )
    rows.append(
        Row(
            workload=NAME,
            metric="load+resume of the long session",
            unit="s",
            samples=tuple(samples["load"]),
            note=f"{long_events:,} events",
        )
    )
    return rows
