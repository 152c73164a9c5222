"""What an idle agent keeps: shared empty stores until first use, no per-agent closures.

An agent that never ran a turn keeps its session's surface, derived history and line
stores as shared empty values (never mutated), made its own by the first event that
needs them; a scoped listener is one registration object, its own disposer; the
inbox asks its agent whether it takes input instead of keeping a bound method. These
tests hold the structure to that and the answers to what they were.
"""

from __future__ import annotations

import gc
import sys
import weakref
from typing import Any

import pytest
import trio

import dsh_trio as dsh
from dsh_trio import user_message
from dsh_trio.errors import AgentDisposedError
from dsh_trio.events import EventBus
from dsh_trio.loop._inbox import Inbox
from dsh_trio.session import Session, _history, _surface
from dsh_trio.session._compact import DecodedEvents
from dsh_trio.session._history import HistoryFold
from dsh_trio.session._surface import Surface
from dsh_trio.testing import ScriptedModel, reply
from dsh_trio.values import (
    InboxTarget,
    MessageId,
    SurfaceReplace,
    SystemMessage,
    SystemMessageData,
    TurnStart,
)

OPTIONS = dsh.AgentOptions(provider="scripted", model="m")


def _untouched_answers(session: Session) -> tuple[Any, ...]:
    return (
        session.surface,
        session.replace_generation,
        list(session.derive_messages()),
        len(session.events),
        session.last_turn,
        session.open_turn,
        session.request_header(),
        session.request_context(),
        session.next_seq,
    )


def _shares_empty_stores(session: Session) -> bool:
    surface = session._surface
    return (
        surface.nodes is _surface._NO_NODES
        and session._history._items is _history._NO_ITEMS
    )


def _shared_stores_are_empty() -> bool:
    return not (_surface._NO_NODES or _history._NO_ITEMS)


# --------------------------------------------------------------------------- sessions


def test_a_fresh_session_shares_the_empty_stores_and_answers_as_empty() -> None:
    one, two = Session.create("one"), Session.create("two")
    assert _shares_empty_stores(one) and _shares_empty_stores(two)
    assert _untouched_answers(one) == ((), 0, [], 0, 0, None, None, None, 0)
    assert one.derive_messages() == [] and len(one.derive_messages()) == 0
    # Reading does not make stores.
    assert _shares_empty_stores(one)


def test_off_surface_events_keep_the_shared_stores() -> None:
    session = Session.create("s")
    session.append("turn/start", TurnStart(1))
    assert session.last_turn == session.open_turn == 1
    assert session.surface == () and list(session.derive_messages()) == []
    assert _shares_empty_stores(session)
    assert _shared_stores_are_empty()


def test_the_first_surface_event_makes_the_sessions_own_stores() -> None:
    session, idle = Session.create("s"), Session.create("idle")
    session.append("user/message", user_message("a", id="u1"), surface_op="append")
    assert session._surface.nodes is not _surface._NO_NODES
    assert session.surface == (0,)
    assert [m.id for m in session.derive_messages()] == ["u1"]
    assert session._history._items is not _history._NO_ITEMS
    # The other session and the shared stores are untouched.
    assert _shares_empty_stores(idle)
    assert _shared_stores_are_empty()
    assert _untouched_answers(idle) == _untouched_answers(Session.create("fresh"))


def test_a_replace_starts_a_new_fold_and_earlier_snapshots_stay() -> None:
    session = Session.create("s")
    for k in range(3):
        session.append(
            "user/message", user_message(str(k), id=f"u{k}"), surface_op="append"
        )
    before = session.derive_messages()
    session.append(
        "user/message",
        user_message("sum", id="sum"),
        surface_op=SurfaceReplace(0, 2),
        source_event_seqs=[0, 1, 2],
    )
    after = session.derive_messages()
    assert [m.id for m in before] == ["u0", "u1", "u2"]
    assert [m.id for m in after] == ["sum"]
    assert session.surface == (3,) and session.replace_generation == 1
    assert _shared_stores_are_empty()


def test_a_surface_is_its_own_fold() -> None:
    session = Session.create("s")
    assert session._history is session._surface
    assert isinstance(session._surface, HistoryFold)
    assert not hasattr(session._surface, "__dict__")
    surface = Surface(DecodedEvents())
    assert list(surface.snapshot()) == [] and surface._items is _history._NO_ITEMS
    # An empty system message keeps its node but folds to no message.
    session.append(
        "system/message",
        SystemMessageData(
            turn=1, step=1, message=SystemMessage(id=MessageId("s"), content=())
        ),
        surface_op="append",
    )
    assert session.surface == (0,) and list(session.derive_messages()) == []
    assert _shared_stores_are_empty()


def test_copying_a_surface_shares_only_empty_stores() -> None:
    events = DecodedEvents()
    empty = Surface(events).copy(events)
    assert empty.nodes is _surface._NO_NODES
    session = Session.create("s")
    session.append("user/message", user_message("a", id="u1"), surface_op="append")
    copy = session._surface.copy(session._events)
    assert list(copy.nodes) == [0] and copy.nodes is not session._surface.nodes


def test_the_session_id_is_the_headers() -> None:
    session = Session.create("s1")
    assert session.id == session.header.id == "s1"
    assert "s1" in repr(session)
    assert not hasattr(session, "__dict__")
    assert weakref.ref(session)() is session


def test_a_restored_session_reads_as_the_original() -> None:
    original = Session.create("s")
    original.append("turn/start", TurnStart(1))
    original.append("user/message", user_message("a", id="u1"), surface_op="append")
    restored = Session.restore(original.header, list(original.events))
    assert restored.id == "s"
    assert _untouched_answers(restored) == _untouched_answers(original)
    empty = Session.restore(Session.create("e").header, [])
    assert _shares_empty_stores(empty)
    assert _untouched_answers(empty) == _untouched_answers(Session.create("e"))


# --------------------------------------------------------------------------- line stores


def test_reads_across_blocks_decode_through_the_block_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dsh_trio.session import _compact

    monkeypatch.setattr(_compact, "BLOCK_LINES", 2)
    events = DecodedEvents()
    for turn in range(1, 6):
        line = f'{{"type":"turn/start","seq":{turn - 1},"time":1,"data":{{"turn":{turn}}}}}'
        events.append_line(line.encode())
    assert events._store is not _compact._NO_STORE
    assert events._store.cached is _compact._NO_CACHE
    order = [0, 3, 1, 2, 4, 0, 1]
    assert [events[i].data for i in order] == [TurnStart(i + 1) for i in order]
    assert events._store.cached[0] in (0, 1)
    assert [e.data for e in events] == [TurnStart(t) for t in range(1, 6)]
    newest_first = [e.seq for e in events.of_types(["turn/start"], reverse=True)]
    assert newest_first == [4, 3, 2, 1, 0]
    twin = events.share()
    assert twin._store is not events._store and twin == events
    live = DecodedEvents()
    assert live._store is _compact._NO_STORE  # a live sequence keeps no stores
    store = _compact._NO_STORE
    assert store.cached == (sys.maxsize, []) and store.cached is _compact._NO_CACHE
    assert not (store.blocks or store.lines or store.recent or store.types)
    assert not (store.chunks or store.starts)
    assert not store.type_codes


# --------------------------------------------------------------------------- the bus


def test_a_registration_is_its_own_idempotent_disposer() -> None:
    bus = EventBus()
    heard: list[tuple[str, object]] = []

    def first(payload: object) -> None:
        heard.append(("first", payload))

    def second(payload: object) -> None:
        heard.append(("second", payload))

    d1 = bus.on("x", first)
    d2 = bus.on("x", first)  # the same callable twice: two registrations
    d3 = bus.on("x", second, prepend=True)
    assert bus._listeners["x"] == (d3, d1, d2)
    bus.emit("x", 1)
    assert heard == [("second", 1), ("first", 1), ("first", 1)]
    d1()
    d1()  # idempotent
    bus.emit("x", 2)
    assert heard[3:] == [("second", 2), ("first", 2)]
    d3()
    d2()
    assert not bus.has_listeners("x") and "x" not in bus.listened
    d2()
    bus.emit("x", 3)
    assert len(heard) == 5


def test_a_scoped_registration_is_dropped_from_the_resolution_cache() -> None:
    class Scope:
        pass

    bus = EventBus()
    scope = Scope()
    heard: list[object] = []
    dispose = bus.on("x", heard.append, scope=scope)
    bus.emit("x", 1, scope=scope)
    assert "x" in bus._cache
    dispose()
    assert "x" not in bus._cache
    bus.emit("x", 2, scope=scope)
    assert heard == [1]


# --------------------------------------------------------------------------- agents


async def test_an_idle_agent_keeps_shared_stores_and_no_bound_methods() -> None:
    async with dsh.open_runtime(models={"scripted": ScriptedModel()}) as runtime:
        handles = [await runtime.agents.create(options=OPTIONS) for _ in range(3)]
        heard: list[object] = []
        for handle in handles:
            agent = handle.agent
            dispose = agent.scope.on("agent/assistant-stream", heard.append)
            entries = runtime.events._listeners["agent/assistant-stream"]
            assert entries[-1] is dispose  # one object: registration and disposer
            assert _shares_empty_stores(agent.session)
            assert agent.inbox._alive is None  # asks the agent, keeps no method
            assert not hasattr(handle, "__dict__")
            assert weakref.ref(handle)() is handle
            assert runtime.agents._entry_of(agent).agent is agent
            assert runtime.agents.handle_of(agent) is handle
        assert _shared_stores_are_empty()
        for handle in handles:
            await handle.dispose()
        assert "agent/assistant-stream" not in runtime.events.listened


async def test_a_disposed_agents_inbox_still_refuses_input() -> None:
    async with dsh.open_runtime(models={"scripted": ScriptedModel()}) as runtime:
        handle = await runtime.agents.create(options=OPTIONS)
        inbox = handle.agent.inbox
        inbox.append(InboxTarget.NEXT_TURN, user_message("kept", id="m1"))
        inbox.remove("m1")
        await handle.dispose()
        with pytest.raises(AgentDisposedError, match="is disposed"):
            inbox.append(InboxTarget.NEXT_TURN, user_message("late", id="m2"))
        with pytest.raises(AgentDisposedError):
            inbox.clear()
        await trio.lowlevel.checkpoint()


def test_a_standalone_inbox_checks_with_its_callable() -> None:
    calls: list[str] = []

    def refuse() -> None:
        calls.append("checked")
        raise RuntimeError("closed")

    inbox = Inbox(Session.create("s"), check_alive=refuse)
    with pytest.raises(RuntimeError, match="closed"):
        inbox.append(InboxTarget.NEXT_STEP, user_message("a", id="m1"))
    assert calls == ["checked"] and inbox.next_step == ()
    open_inbox = Inbox(Session.create("t"))  # the default takes every input
    open_inbox.append(InboxTarget.NEXT_STEP, user_message("a", id="m1"))
    assert [m.id for m in open_inbox.next_step] == ["m1"]


async def test_the_first_turn_gives_the_agent_its_own_stores() -> None:
    model = ScriptedModel()
    async with dsh.open_runtime(models={"scripted": model}) as runtime:
        idle = (await runtime.agents.create(options=OPTIONS)).agent
        busy = (await runtime.agents.create(options=OPTIONS)).agent
        before = _untouched_answers(idle.session)
        model.push(reply("hello"))
        await busy.run("hi")
        assert not _shares_empty_stores(busy.session)
        assert len(busy.session.derive_messages()) == 2
        assert _shares_empty_stores(idle.session)
        assert _shared_stores_are_empty()
        gc.collect()
        assert _untouched_answers(idle.session) == before
