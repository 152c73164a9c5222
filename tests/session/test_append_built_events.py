"""Appended events are plain ``SessionEvent`` values, whichever append built them."""

from __future__ import annotations

import attrs

from dsh_trio.session import Session
from dsh_trio.values import (
    Completed,
    MessageId,
    PluginSource,
    RequestContextData,
    SessionEvent,
    StepEnd,
    StepStart,
    SurfaceReplace,
    SystemMessage,
    SystemMessageData,
    TextBlock,
    TurnEnd,
    TurnStart,
    UserMessage,
    UserSource,
)


def _message(text: str, id: str) -> UserMessage:
    return UserMessage(
        id=MessageId(id), content=(TextBlock(text),), source=UserSource()
    )


def _rebuilt(event: SessionEvent) -> SessionEvent:
    return SessionEvent(**attrs.asdict(event, recurse=False))


def test_appended_events_equal_the_values_their_constructor_builds() -> None:
    session = Session.create(clock=lambda: 1_700_000_000_000)
    events = [
        session.append("turn/start", TurnStart(1)),
        session.append_trusted("step/start", StepStart(1, 1)),
        session.append("user/message", _message("a", "m1"), surface_op="append"),
        session.append_trusted(
            "user/message",
            _message("b", "m2"),
            surface_op=SurfaceReplace(2, 2),
            source_event_seqs=(2,),
        ),
        session.append("x/custom", {"k": [1, 2]}),
    ]
    for event in events:
        rebuilt = _rebuilt(event)
        assert event == rebuilt and hash(event) == hash(rebuilt)
        assert repr(event) == repr(rebuilt)
        assert event.ignorable is False
    assert [e.seq for e in events] == [0, 1, 2, 3, 4]
    assert events[3].source_event_seqs == (2,)
    assert session.surface == (3,)


def test_only_marker_events_move_the_markers() -> None:
    session = Session.create()
    session.append_trusted("turn/start", TurnStart(4))
    session.append_trusted("step/start", StepStart(4, 1))
    assert (session.last_turn, session.open_turn) == (4, 4)
    context = RequestContextData(provider="p", model="m")
    session.append_trusted("request/context", context)
    assert session.request_context() == context
    session.append_trusted("turn/end", TurnEnd(4, Completed()))
    assert (session.last_turn, session.open_turn) == (4, None)


def _prompt_mark(session: Session) -> int:
    # The seq the prompt projections read up to (see ``Session._admit``).
    return session._prompt_seq


def test_a_loaded_log_is_admitted_by_the_rule_its_appends_followed() -> None:
    """The surface, the markers and the prompt mark a log's appends left are what
    loading the same events (restored, or as a seed) leaves."""
    session = Session.create(clock=lambda: 1_700_000_000_000)
    prompt = SystemMessage(id=MessageId("s1"), content=(TextBlock("be brief"),))
    session.append("turn/start", TurnStart(1))
    session.append_trusted("step/start", StepStart(1, 1))
    session.append_trusted(
        "system/message",
        SystemMessageData(turn=1, step=1, message=prompt),
        surface_op="append",
    )
    session.append("user/message", _message("a", "m1"), surface_op="append")
    session.append_trusted(
        "request/context", RequestContextData(provider="p", model="m")
    )
    plugin = UserMessage(
        id=MessageId("m2"), content=(TextBlock("ctx"),), source=PluginSource("p")
    )
    session.append_trusted("user/message", plugin, surface_op="append")
    session.append(
        "user/message",
        _message("b", "m3"),
        surface_op=SurfaceReplace(3, 3),
        source_event_seqs=(3,),
    )
    session.append("user/message", _message("c", "m4"), surface_op="append")
    session.append_trusted("step/end", StepEnd(1, 1))
    session.append_trusted("turn/end", TurnEnd(1, Completed()))
    session.append_trusted("turn/start", TurnStart(2))
    events = list(session.events)
    restored = Session.restore(session.header, events)
    seeded = Session.create(seed=events)
    for loaded in (restored, seeded):
        assert loaded.surface == session.surface == (2, 6, 5, 7)
        assert loaded.replace_generation == session.replace_generation == 1
        assert (loaded.last_turn, loaded.open_turn) == (2, 2)
        assert loaded.request_context() == session.request_context()
        assert list(loaded.derive_messages()) == list(session.derive_messages())
        assert _prompt_mark(loaded) == _prompt_mark(session) == 5
    assert list(restored.events) == events
