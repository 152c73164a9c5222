"""A live session with a log keeps its settled events as the lines its writer wrote.

Every reader gives back exactly what was appended; a long session's retained heap
grows by well under the values' bytes per turn.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

import dsh_trio as dsh
from dsh_trio.persistence import JsonlPersistence, load_session
from dsh_trio.persistence._recorder import SessionRecorder
from dsh_trio.session import Session
from dsh_trio.session._compact import DecodedEvents
from dsh_trio.session._line_chunks import CHUNK_LINES
from dsh_trio.testing import ScriptedModel, reply
from dsh_trio.values import SessionEvent

OPTIONS = dsh.AgentOptions(provider="scripted", model="m")
#: Text a log line escapes: quotes, a line break, non-ASCII, an emoji.
TEXT = 'ünï "quoted"\nline 😀'


def _same(got: object, want: object) -> None:
    assert got == want
    if isinstance(want, SessionEvent):
        assert isinstance(got, SessionEvent)
        assert type(got.data) is type(want.data)


def _assert_reads_back(session: Session, seen: list[SessionEvent]) -> None:
    """Every reader of ``session`` gives the events exactly as they were appended."""
    events = session.events
    assert len(events) == len(seen) == session.next_seq
    for got, want in zip(list(events), seen, strict=True):
        _same(got, want)
    for i, want in enumerate(seen):
        _same(events[i], want)
        _same(events[i - len(seen)], want)
    assert events[3:-2] == tuple(seen[3:-2])
    assert events[::7] == tuple(seen[::7])
    assert list(reversed(events)) == seen[::-1]
    wanted = ("turn/start", "assistant/message")
    assert list(events.of_types(*wanted)) == [e for e in seen if e.type in wanted]
    assert list(events.of_types(*wanted, reverse=True)) == [
        e for e in reversed(seen) if e.type in wanted
    ]
    plain = Session.restore(session.header, seen)
    assert list(session.derive_messages()) == list(plain.derive_messages())
    assert session.surface == plain.surface
    boundary = [e.seq for e in seen if e.type == "turn/end"][len(seen) // 40]
    child = list(session.fork(boundary, "child").events)
    assert child[:-1] == seen[: boundary + 1]  # then the fork's end-seed marker
    assert child[-1].type == "session/end-seed" and len(child) == boundary + 2


async def _turns(agent: dsh.Agent, model: ScriptedModel, n: int) -> None:
    for i in range(n):
        agent.followup(dsh.user_message(f"q{i} {TEXT}"))
        await agent.when_idle()
        model.requests.clear()


async def test_a_live_session_with_a_log_keeps_its_past_as_the_written_lines(
    tmp_path: Path,
) -> None:
    model = ScriptedModel(default=reply(TEXT))
    persistence = JsonlPersistence(tmp_path)
    async with dsh.open_runtime(
        models={"scripted": model}, persistence=persistence
    ) as runtime:
        handle = await runtime.agents.create("s1", options=OPTIONS)
        agent = handle.agent
        seen: list[SessionEvent] = list(agent.session.events)
        agent.session.subscribe(seen.append)
        await _turns(agent, model, 40)
        await agent.flush()
        held: DecodedEvents = agent.session._events
        # Settled as the writer's chunks: all but the last chunk's worth and the
        # previous and current turn.
        assert len(held._store.chunks) >= 3
        assert held.compact_count > len(seen) - 2 * CHUNK_LINES
        _assert_reads_back(agent.session, seen)
        await handle.dispose()
        # Resumed: a restored session goes on settling what it appends.
        handle = await runtime.agents.resume("s1", options=OPTIONS)
        agent = handle.agent
        resumed_at = agent.session.next_seq
        seen = list(agent.session.events)
        agent.session.subscribe(seen.append)
        await _turns(agent, model, 40)
        await agent.flush()
        assert agent.session._events.compact_count > resumed_at + CHUNK_LINES
        _assert_reads_back(agent.session, seen)
        await handle.dispose()
    stored, writer = await load_session(JsonlPersistence(tmp_path), "s1")
    await writer.close()
    assert list(stored.events) == seen


async def test_an_event_without_a_faithful_line_stops_the_settling(
    tmp_path: Path,
) -> None:
    model = ScriptedModel(default=reply("fine"))
    async with dsh.open_runtime(
        models={"scripted": model}, persistence=JsonlPersistence(tmp_path)
    ) as runtime:
        handle = await runtime.agents.create("s1", options=OPTIONS)
        agent = handle.agent
        seen: list[SessionEvent] = list(agent.session.events)
        agent.session.subscribe(seen.append)
        await _turns(agent, model, 3)
        odd = agent.session.append("app/undeclared", {"k": 1})
        await _turns(agent, model, 30)
        await agent.flush()
        # Settled up to the undeclared event (a log reader refuses its line), at
        # most a chunk short of it; it and everything after it stay values.
        compact = agent.session._events.compact_count
        assert compact <= odd.seq < compact + CHUNK_LINES
        _assert_reads_back(agent.session, seen)
        await handle.dispose()


def _no_lines(self: SessionRecorder) -> None:
    return None


@pytest.mark.parametrize("settling", [True, False], ids=["settling", "off"])
async def test_a_long_live_sessions_retained_heap_per_turn_is_bounded(
    settling: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not settling:  # the recorder no longer hands the written lines over
        monkeypatch.setattr(SessionRecorder, "_hand_lines", _no_lines)
    model = ScriptedModel(default=reply("x" * 100))
    traced: Callable[[], int] = lambda: tracemalloc.get_traced_memory()[0]  # noqa: E731
    async with dsh.open_runtime(
        models={"scripted": model},
        persistence=JsonlPersistence(tmp_path, durability="none"),
    ) as runtime:
        handle = await runtime.agents.create("long", options=OPTIONS)
        agent = handle.agent
        tracemalloc.start()
        try:
            await _turns(agent, model, 200)
            await agent.flush()
            await trio.testing.wait_all_tasks_blocked()
            gc.collect()
            before = traced()
            await _turns(agent, model, 200)
            await agent.flush()
            await trio.testing.wait_all_tasks_blocked()
            gc.collect()
            per_turn = (traced() - before) / 200
        finally:
            tracemalloc.stop()
        await handle.dispose()
    if settling:
        assert per_turn < 1024, per_turn
    else:  # every event kept as a value
        assert per_turn > 2048, per_turn
