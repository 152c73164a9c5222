"""Throughput of the session log's write path and the cost of loading a long log.

Measures, on a temporary directory:

* events/s appended through :class:`SessionRecorder` + :class:`JsonlPersistence`
  with durability ``"turn"`` and ``"always"``, in realistic turns of 8 events (the
  appender yields between turns, as an agent does while it waits for the model), and
  the longest the trio loop went without running (the write path must not stall it);
* the time to load and resume (crash closers included) a session of 100,000 events
  (10,000 with ``--quick``).

Run: ``python benchmarks/jsonl_append.py [--quick]``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import trio

from dsh_trio import user_message
from dsh_trio.persistence._jsonl import JsonlPersistence
from dsh_trio.persistence._persistence import Durability, load_session
from dsh_trio.persistence._recorder import SessionRecorder, persist_new_session
from dsh_trio.session import Session
from dsh_trio.values import (
    AssistantMessage,
    AssistantMessageData,
    BlockEnd,
    BlockStart,
    Completed,
    Finish,
    FinishReason,
    InboxSplice,
    InboxTarget,
    MessageId,
    ModelSource,
    RawChunkRecord,
    RequestContextData,
    StepEnd,
    StepStart,
    TextBlock,
    TextChunksRecord,
    TurnEnd,
    TurnStart,
    Usage,
)

EVENTS_PER_TURN = 8


def append_turn(session: Session, turn: int, *, close: bool = True) -> None:
    """Append one realistic turn: 8 events (7 if left open)."""
    message = user_message(f"question number {turn}: what is a nursery in trio?")
    session.append(
        "agent/inbox/spliced",
        InboxSplice(target=InboxTarget.NEXT_TURN, start=0, removed_count=1),
    )
    session.append("turn/start", TurnStart(turn))
    session.append("step/start", StepStart(turn, 1))
    session.append("user/message", message, surface_op="append")
    session.append("request/context", RequestContextData(provider="mock", model="mock"))
    now = 1_800_000_000_000 + turn
    text = "A nursery is a scope that owns the tasks started in it. " * 4
    session.append(
        "assistant/message",
        AssistantMessageData(
            turn=turn,
            step=1,
            message=AssistantMessage(
                id=MessageId(f"a{turn}"),
                content=(TextBlock(text),),
                source=ModelSource("mock", "mock"),
            ),
            stream=(
                RawChunkRecord(now, BlockStart(0, "text")),
                TextChunksRecord(now, 0, (1,) * 7, tuple(text[i::8] for i in range(8))),
                RawChunkRecord(now + 9, BlockEnd(0, TextBlock(text))),
                RawChunkRecord(now + 9, Usage(120, 60)),
                RawChunkRecord(now + 9, Finish(FinishReason("stop"))),
            ),
            usage=Usage(120, 60),
        ),
        surface_op="append",
    )
    session.append("step/end", StepEnd(turn, 1))
    if close:
        session.append("turn/end", TurnEnd(turn, Completed()))


async def _append_rate(
    root: Path, durability: Durability, turns: int
) -> tuple[float, float]:
    """(events/s, longest loop stall in ms) for ``turns`` turns through a recorder."""
    persistence = JsonlPersistence(root, durability=durability)
    session = Session.create(f"bench-{durability}", cwd="/bench")
    stall = 0.0
    done = False

    async def ticker() -> None:
        nonlocal stall
        last = time.perf_counter()
        while not done:
            await trio.lowlevel.checkpoint()
            now = time.perf_counter()
            stall = max(stall, now - last)
            last = now

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        writer = await persist_new_session(persistence, session)
        recorder = SessionRecorder(
            session, writer, durability=durability, spawn=nursery.start_soon
        )
        start = time.perf_counter()
        for turn in range(1, turns + 1):
            append_turn(session, turn)
            await trio.lowlevel.checkpoint()
        await recorder.aclose()
        elapsed = time.perf_counter() - start
        done = True
    return session.next_seq / elapsed, stall * 1000


async def _load_time(root: Path, events: int) -> tuple[float, int, int]:
    """(seconds, events loaded, file bytes) to load and resume a long session."""
    persistence = JsonlPersistence(root)
    session = Session.create("bench-long", cwd="/bench")
    turns = events // EVENTS_PER_TURN
    for turn in range(1, turns):
        append_turn(session, turn)
    append_turn(session, turns, close=False)  # the crash: closers to compute and write
    writer = await persist_new_session(persistence, session)
    await writer.close()
    size = (await trio.Path(persistence.path_for(session.header)).stat()).st_size
    start = time.perf_counter()
    loaded, writer = await load_session(JsonlPersistence(root), "bench-long")
    elapsed = time.perf_counter() - start
    await writer.close()
    return elapsed, loaded.next_seq, size


def main(quick: bool = False) -> dict[str, float]:
    """Run the benchmark, print a small table, and return the numbers."""
    turns = 250 if quick else 2000
    long_events = 10_000 if quick else 100_000
    results: dict[str, float] = {}
    tmp = Path(tempfile.mkdtemp(prefix="dsh-jsonl-bench-"))
    try:
        for durability in ("turn", "always"):
            rate, stall = trio.run(_append_rate, tmp / durability, durability, turns)
            results[f"append_events_per_s_{durability}"] = rate
            results[f"append_max_loop_stall_ms_{durability}"] = stall
        seconds, loaded, size = trio.run(_load_time, tmp / "long", long_events)
        results["load_resume_s"] = seconds
        results["load_resume_events"] = loaded
        results["load_resume_mb"] = size / 1e6
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"{'measure':<40} {'value':>14}")
    print("-" * 55)
    for durability in ("turn", "always"):
        print(
            f"{'append events/s, durability=' + durability:<40} "
            f"{results[f'append_events_per_s_{durability}']:>14,.0f}"
        )
        print(
            f"{'  longest loop stall (ms)':<40} "
            f"{results[f'append_max_loop_stall_ms_{durability}']:>14.2f}"
        )
    print(
        f"{f'load+resume {loaded:,} events (s)':<40} {results['load_resume_s']:>14.3f}"
    )
    print(f"{'  file size (MB)':<40} {results['load_resume_mb']:>14.1f}")
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller, faster run")
    main(quick=parser.parse_args().quick)
