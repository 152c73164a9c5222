"""Appended events are plain ``SessionEvent`` values, whichever append built them."""

from __future__ import annotations

import attrs

from dsh_trio.session import Session
from dsh_trio.values import (
    Completed,
    MessageId,
    RequestContextData,
    SessionEvent,
    StepStart,
    SurfaceReplace,
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
        session._append_trusted("step/start", StepStart(1, 1)),
        session.append("user/message", _message("a", "m1"), surface_op="append"),
        session._append_trusted(
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
    session._append_trusted("turn/start", TurnStart(4))
    session._append_trusted("step/start", StepStart(4, 1))
    assert (session.last_turn, session.open_turn) == (4, 4)
    context = RequestContextData(provider="p", model="m")
    session._append_trusted("request/context", context)
    assert session.request_context() == context
    session._append_trusted("turn/end", TurnEnd(4, Completed()))
    assert (session.last_turn, session.open_turn) == (4, None)
