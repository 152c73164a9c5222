# mypy: disable-error-code="arg-type, unused-ignore"
"""Session.create (ids, headers, seeds), Session.restore and Session.fork."""

from __future__ import annotations

import uuid
from typing import Any

import attrs
import pytest

from dsh_trio import user_message
from dsh_trio.errors import (
    ForkBoundaryError,
    InvalidSessionIdError,
    SessionCorruptError,
    SessionFormatError,
)
from dsh_trio.session import Session
from dsh_trio.values import (
    AssistantAttemptData,
    AssistantMessage,
    AssistantMessageData,
    Completed,
    EndSeed,
    MessageId,
    ModelSource,
    SessionEvent,
    SessionHeader,
    SessionId,
    StepEnd,
    StepStart,
    SurfaceReplace,
    TextBlock,
    TextChunksRecord,
    ToolCallChunksRecord,
    TurnEnd,
    TurnStart,
)


def ev(seq: int, type_: str, data: Any, **kw: Any) -> SessionEvent:
    return SessionEvent(seq=seq, time=100 + seq, type=type_, data=data, **kw)


def turn_log() -> list[SessionEvent]:
    return [
        ev(0, "turn/start", TurnStart(1)),
        ev(1, "step/start", StepStart(1, 1)),
        ev(2, "user/message", user_message("q", id="u"), surface_op="append"),
        ev(
            3,
            "assistant/message",
            AssistantMessageData(
                turn=1,
                step=1,
                message=AssistantMessage(
                    id=MessageId("a"),
                    content=(TextBlock("hi"),),
                    source=ModelSource("p", "m"),
                ),
                stream=(TextChunksRecord(100, 0, (1,), ("h", "i")),),
            ),
            surface_op="append",
        ),
        ev(4, "step/end", StepEnd(1, 1)),
        ev(5, "turn/end", TurnEnd(1, Completed())),
    ]


# --------------------------------------------------------------------------- create


def test_create_mints_a_uuid_and_builds_the_header() -> None:
    session = Session.create(clock=lambda: 42)
    uuid.UUID(session.id)
    assert session.header == SessionHeader(
        version=3, id=session.id, created_at=42, is_seeded=False
    )
    assert len(session.events) == 0


def test_create_records_cwd_and_lineage() -> None:
    session = Session.create("c", cwd="/work", parent_session="p", clock=lambda: 1)
    assert session.header.cwd == "/work"
    assert session.header.parent_session == "p"


@pytest.mark.parametrize("bad", ["", 3, b"id"])
def test_create_refuses_bad_ids(bad: Any) -> None:
    with pytest.raises(InvalidSessionIdError):
        Session.create(bad)


def test_create_with_a_header() -> None:
    header = SessionHeader(id=SessionId("h"), created_at=5, delegation_depth=2)
    session = Session.create(header=header, seed=[], cwd="/x")
    assert session.id == "h"
    assert session.header == attrs.evolve(header, cwd="/x", is_seeded=True)
    with pytest.raises(InvalidSessionIdError, match="does not match"):
        Session.create("other", header=header)


def test_empty_seed_gets_an_end_seed_marker() -> None:
    session = Session.create("s", seed=[], clock=lambda: 9)
    assert session.header.is_seeded
    assert [(e.seq, e.type, e.data, e.time) for e in session.events] == [
        (0, "session/end-seed", EndSeed(), 9)
    ]


def test_seed_is_kept_and_closed_without_publishing() -> None:
    session = Session.create("s", seed=turn_log(), clock=lambda: 9)
    assert list(session.events)[:6] == turn_log()
    assert session.events[6].type == "session/end-seed"
    assert session.events[6].data == EndSeed()
    assert session.surface == (2, 3)
    assert session.last_turn == 1 and session.open_turn is None
    assert [m.id for m in session.derive_messages()] == ["u", "a"]


def test_seed_already_closed_is_not_closed_again() -> None:
    seed = [*turn_log(), ev(6, "session/end-seed", EndSeed())]
    assert len(Session.create("s", seed=seed).events) == 7


def test_inherited_seed_is_tagged_even_after_an_untagged_marker() -> None:
    seed = [*turn_log(), ev(6, "session/end-seed", EndSeed())]
    session = Session.create("s", seed=seed, inherited=True)
    assert [e.data for e in session.events[6:]] == [EndSeed(), EndSeed(inherited=True)]


@pytest.mark.parametrize(
    ("mutate", "seq", "expected"),
    [
        (lambda log: log[1:], 0, "contiguous from seq 0"),
        (lambda log: [log[0], *log[2:]], 1, "found seq 2 at position 1"),
        (
            lambda log: [*log[:2], attrs.evolve(log[2], surface_op=None), *log[3:]],
            2,
            "must carry surface_op",
        ),
        (
            lambda log: [
                *log[:3],
                attrs.evolve(log[3], source_event_seqs=(2,)),
                *log[4:],
            ],
            3,
            "may not carry source_event_seqs",
        ),
        (
            lambda log: [*log[:1], attrs.evolve(log[1], time=1.5), *log[2:]],
            1,
            "time must be a safe integer",
        ),
        (
            lambda log: [attrs.evolve(log[0], data=TurnStart("x")), *log[1:]],
            0,
            "data.turn",
        ),  # type: ignore[arg-type]
        (
            lambda log: [*log[:4], attrs.evolve(log[4], data={"turn": 1}), *log[5:]],
            4,
            "step",
        ),
        (
            lambda log: [
                *log[:5],
                attrs.evolve(log[5], data={"x": float("nan")}, type="plugin/x"),
            ],
            5,
            "data.x",
        ),
        (
            lambda log: [
                *log,
                ev(
                    6,
                    "user/message",
                    user_message("s"),
                    surface_op=SurfaceReplace(2, 9),
                    source_event_seqs=(2,),
                ),
            ],
            6,
            "end_seq 9",
        ),
        (lambda log: [*log[:2], "not an event", *log[3:]], 2, "must be a SessionEvent"),
    ],
)
def test_malformed_seed_is_refused(mutate: Any, seq: int, expected: str) -> None:
    with pytest.raises(SessionCorruptError) as info:
        Session.create("s", seed=mutate(turn_log()))
    assert info.value.seq == seq
    assert expected in str(info.value)
    assert "seed" in str(info.value)


def test_seed_json_shapes_are_structured() -> None:
    seed = [
        ev(0, "turn/start", {"turn": 3}),
        ev(1, "turn/end", {"turn": 3, "reason": {"kind": "completed"}}),
    ]
    session = Session.create("s", seed=seed)
    assert session.events[0].data == TurnStart(3)
    assert session.last_turn == 3


# --------------------------------------------------------------------------- restore


def test_restore_rebuilds_state_without_listeners() -> None:
    header = SessionHeader(id=SessionId("r"), created_at=1)
    log = turn_log()
    session = Session.restore(header, log, clock=lambda: 500)
    assert session.header is header
    assert list(session.events) == log
    assert session.surface == (2, 3)
    assert session.next_seq == 6
    assert session.append("turn/start", TurnStart(2)).seq == 6
    assert session.last_turn == 2


def test_restore_refuses_foreign_versions() -> None:
    header = SessionHeader(version=4, id=SessionId("r"), created_at=1)
    with pytest.raises(SessionFormatError) as info:
        Session.restore(header, [])
    assert info.value.version == 4


@pytest.mark.parametrize(
    ("stream", "expected"),
    [
        ((TextChunksRecord(1, 0, (1, 2), ("a", "b")),), "dt"),
        ((TextChunksRecord(1, 0, (), ()),), "texts must not be empty"),
        ((TextChunksRecord(2**53 - 2, 0, (5,), ("a", "b")),), "safe integer"),
        (
            (ToolCallChunksRecord(1, 0, (), "", ("{",)),),
            "id must be a non-empty call id",
        ),
        ((ToolCallChunksRecord(1, 0, (), "c", ("{",), ""),), "name must be non-empty"),
    ],
)
@pytest.mark.parametrize("attempt", [False, True])
def test_restore_expands_every_stream(
    stream: Any, expected: str, attempt: bool
) -> None:
    log = turn_log()
    if attempt:
        bad = ev(
            3, "assistant/attempt", AssistantAttemptData(turn=1, step=1, stream=stream)
        )
    else:
        data = log[3].data
        assert isinstance(data, AssistantMessageData)
        bad = attrs.evolve(log[3], data=attrs.evolve(data, stream=stream))
    log[3] = bad
    with pytest.raises(SessionCorruptError) as info:
        Session.restore(SessionHeader(id=SessionId("r"), created_at=1), log)
    assert info.value.seq == 3
    assert expected in str(info.value)


def test_restore_calls_expand_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    from dsh_trio.session import _admission

    seen: list[Any] = []

    def spy(records: Any) -> list[Any]:
        seen.append(records)
        return []

    monkeypatch.setattr(_admission, "expand_stream", spy)
    Session.restore(SessionHeader(id=SessionId("r"), created_at=1), turn_log())
    assert seen == [turn_log()[3].data_as(AssistantMessageData).stream]


# --------------------------------------------------------------------------- fork


def test_fork_default_boundary_refused_inside_open_turn() -> None:
    parent = Session.create("p")
    parent.append("turn/start", TurnStart(1))
    with pytest.raises(ForkBoundaryError, match="inside open turn 1") as info:
        parent.fork()
    assert info.value.boundary == 0


def test_fork_at_a_boundary() -> None:
    parent = Session.create("p", cwd="/w", clock=lambda: 3)
    for event in turn_log():
        parent.append(event.type, event.data, surface_op=event.surface_op)
    parent.append("turn/start", TurnStart(2))
    child = parent.fork(5, "c")
    assert child.header.parent_session == "p"
    assert child.header.cwd == "/w"
    assert child.header.is_seeded
    assert [e.type for e in child.events] == [e.type for e in parent.events[:6]] + [
        "session/end-seed"
    ]
    assert child.events[-1].data == EndSeed(inherited=True)
    assert child.derive_messages() == parent.derive_messages()
    assert child.last_turn == 1 and child.open_turn is None
    assert len(parent.events) == 7  # unchanged
    # the child continues numbering and lives on its own
    child.append("turn/start", TurnStart(2))
    assert len(parent.events) == 7


@pytest.mark.parametrize("boundary", [-1, 6, 99, "2", 1.0])
def test_fork_boundary_must_exist(boundary: Any) -> None:
    parent = Session.create("p")
    for event in turn_log():
        parent.append(event.type, event.data, surface_op=event.surface_op)
    with pytest.raises(ForkBoundaryError, match="not an existing seq"):
        parent.fork(boundary)


@pytest.mark.parametrize("boundary", [0, 1, 2, 3, 4])
def test_fork_boundary_inside_a_turn_is_refused(boundary: int) -> None:
    parent = Session.create("p")
    for event in turn_log():
        parent.append(event.type, event.data, surface_op=event.surface_op)
    with pytest.raises(ForkBoundaryError, match="inside open turn 1"):
        parent.fork(boundary)


def test_fork_of_an_empty_session_holds_only_the_marker() -> None:
    child = Session.create("p").fork()
    assert [(e.type, e.data) for e in child.events] == [
        ("session/end-seed", EndSeed(inherited=True))
    ]
    assert child.header.parent_session == "p"
