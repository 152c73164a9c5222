# mypy: disable-error-code="arg-type, unused-ignore"
"""Session.append: seq/time, data validation, listeners, reentrancy, derived state."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from dsh_trio import user_message
from dsh_trio.errors import InvalidEventError, SessionReentrancyError
from dsh_trio.session import Session
from dsh_trio.values import (
    Aborted,
    AdapterDefaults,
    AssistantMessage,
    AssistantMessageData,
    CallConfig,
    Completed,
    EndSeed,
    EpochHeader,
    HookCancel,
    InboxSplice,
    InboxTarget,
    MessageId,
    ModelSource,
    RequestContextData,
    RequestHeaderData,
    SessionEvent,
    StepStart,
    TextBlock,
    TextChunksRecord,
    ToolCallData,
    ToolResultBlock,
    ToolResultData,
    ToolSource,
    TurnEnd,
    TurnStart,
    UserMessage,
)

from ..support import ticking_clock


@pytest.fixture
def session() -> Session:
    return Session.create("s", clock=ticking_clock(1_001))


def assistant(text: str = "hi", *, id: str = "a1") -> AssistantMessageData:
    return AssistantMessageData(
        turn=1,
        step=1,
        message=AssistantMessage(
            id=MessageId(id),
            content=(TextBlock(text),) if text else (),
            source=ModelSource("p", "m"),
        ),
        stream=(TextChunksRecord(5, 0, (), (text or "x",)),),
    )


def snapshot(s: Session) -> tuple[Any, ...]:
    return (
        tuple(s.events),
        s.surface,
        s.derive_messages(),
        s.next_seq,
        s.replace_generation,
    )


# --------------------------------------------------------------------------- basics


def test_append_assigns_contiguous_seq_and_clock_time(session: Session) -> None:
    a = session.append("turn/start", TurnStart(1))
    b = session.append("step/start", StepStart(1, 1))
    c = session.append("plugin/note", {"x": [1, "two"]})
    assert [e.seq for e in (a, b, c)] == [0, 1, 2]
    # created_at took the first tick
    assert session.header.created_at == 1_001
    assert [e.time for e in (a, b, c)] == [1_002, 1_003, 1_004]
    assert list(session.events) == [a, b, c]
    assert session.events[1] is b
    assert session.next_seq == 3


def test_default_clock_is_epoch_milliseconds() -> None:
    import time

    before = time.time_ns() // 1_000_000
    event = Session.create().append("turn/start", TurnStart(1))
    after = time.time_ns() // 1_000_000
    assert before <= event.time <= after


def test_events_view_is_read_only_and_live(session: Session) -> None:
    view = session.events
    assert len(view) == 0
    session.append("turn/start", TurnStart(1))
    assert len(view) == 1 and view is session.events
    assert view[0:1] == (view[0],)
    assert view == [view[0]]
    with pytest.raises(TypeError):
        view[0] = view[0]  # type: ignore[index]
    assert not hasattr(view, "append")


def test_json_shape_of_known_type_is_structured(session: Session) -> None:
    event = session.append("turn/start", {"turn": 4})
    assert event.data == TurnStart(4)
    event = session.append(
        "user/message",
        {
            "role": "user",
            "id": "m",
            "content": [{"type": "text", "text": "x"}],
            "source": {"kind": "user"},
        },
        surface_op="append",
    )
    assert event.data == user_message("x", id="m")


def test_unknown_type_data_is_copied(session: Session) -> None:
    data: dict[str, Any] = {"a": [1, {"b": None}]}
    event = session.append("plugin/thing", data)
    data["a"].append(2)
    assert event.data == {"a": [1, {"b": None}]}


def test_returned_event_is_the_logged_one(session: Session) -> None:
    event = session.append("turn/start", TurnStart(1))
    assert session.events[-1] is event
    assert isinstance(event, SessionEvent)


def test_data_as_gives_the_data_typed_or_names_the_mismatch(session: Session) -> None:
    start = session.append("turn/start", TurnStart(3))
    data = start.data_as(TurnStart)
    assert data is start.data
    assert data.turn == 3
    with pytest.raises(
        TypeError,
        match=r'^session event 0 \("turn/start"\) holds TurnStart data, not TurnEnd$',
    ):
        start.data_as(TurnEnd)
    plugin = session.append("plugin/thing", {"a": 1})
    assert plugin.data_as(dict) == {"a": 1}
    with pytest.raises(TypeError, match=r'event 1 \("plugin/thing"\) holds dict data'):
        plugin.data_as(TurnStart)


# --------------------------------------------------------------------------- refusals


class Opaque:
    pass


def cyclic() -> list[Any]:
    value: list[Any] = []
    value.append(value)
    return value


@pytest.mark.parametrize(
    ("data", "where"),
    [
        ({"x": float("nan")}, "data.x"),
        ({"x": float("inf")}, "data.x"),
        ({"x": -0.0}, "data.x"),
        ({"x": {1, 2}}, "data.x"),
        ({"x": Opaque()}, "data.x"),
        ({"x": cyclic()}, "data.x"),
        ({"x": [0, 2**53]}, "data.x[1]"),
        ({"x": {3: "y"}}, "data.x"),
        ({"x": b"bytes"}, "data.x"),
        ({"x": "\ud800"}, "data.x"),
    ],
)
def test_non_json_data_is_refused_naming_where(
    session: Session, data: Any, where: str
) -> None:
    session.append("turn/start", TurnStart(1))
    before = snapshot(session)
    with pytest.raises(InvalidEventError) as info:
        session.append("plugin/thing", data)
    message = str(info.value)
    assert where in message
    assert '"plugin/thing"' in message and "seq 1" in message
    assert info.value.seq == 1 and info.value.type == "plugin/thing"
    assert snapshot(session) == before


def _bad_typed() -> list[tuple[str, object, dict[str, Any], str]]:
    ok_user = user_message("x", id="m")
    return [
        ("turn/start", TurnStart("1"), {}, "data.turn must be an int"),  # type: ignore[arg-type]
        ("turn/start", TurnStart(True), {}, "data.turn must be an int"),
        (
            "turn/start",
            TurnStart(2**60),
            {},
            "data.turn is an integer outside the safe range",
        ),
        ("turn/start", StepStart(1, 1), {}, "expected TurnStart"),
        ("turn/start", {"turn": "1"}, {}, "turn"),
        ("turn/start", {"turn": 1, "extra": 2}, {}, "extra"),
        ("turn/end", TurnEnd(1, "completed"), {}, "data.reason must be"),  # type: ignore[arg-type]
        (
            "turn/end",
            TurnEnd(1, Aborted(HookCancel(5))),
            {},
            "data.reason.reason.reason must be a str",
        ),  # type: ignore[arg-type]
        (
            "user/message",
            attrs.evolve(ok_user, content=[TextBlock("x")]),
            {"surface_op": "append"},
            "data.content must be a tuple",
        ),
        (
            "user/message",
            attrs.evolve(ok_user, content=(TextBlock(3),)),  # type: ignore[arg-type]
            {"surface_op": "append"},
            "data.content[0].text must be a str",
        ),
        (
            "user/message",
            attrs.evolve(ok_user, id=MessageId("")),
            {"surface_op": "append"},
            "data.id must be a non-empty message id",
        ),
        (
            "user/message",
            attrs.evolve(ok_user, content=(TextBlock("\udc80"),)),
            {"surface_op": "append"},
            "data.content[0].text contains a lone surrogate",
        ),
        (
            "assistant/message",
            attrs.evolve(assistant(), interrupted=False),
            {"surface_op": "append"},
            "data.interrupted must be True or None",
        ),
        (
            "assistant/message",
            attrs.evolve(assistant(), stream=(TextChunksRecord(5, 0, (1,), ("a",)),)),
            {"surface_op": "append"},
            "data.stream[0].dt must have one entry fewer",
        ),
        (
            "assistant/message",
            attrs.evolve(
                assistant(),
                message=attrs.evolve(assistant().message, source=ToolSource("c")),
            ),
            {"surface_op": "append"},
            "data.message.source must be a ModelSource, got ToolSource",
        ),
        (
            "tool/result",
            ToolResultData(turn=1, step=1, message=ok_user),
            {"surface_op": "append"},
            "data.message.source must be a ToolSource",
        ),
        (
            "tool/result",
            ToolResultData(
                turn=1,
                step=1,
                message=UserMessage(
                    id=MessageId("r"),
                    content=(ToolResultBlock("other", (TextBlock("x"),)),),
                    source=ToolSource("c1"),
                ),
            ),
            {"surface_op": "append"},
            "data.message.content[0].tool_call_id must name the call 'c1'",
        ),
        (
            "tool/result",
            ToolResultData(
                turn=1,
                step=1,
                message=UserMessage(
                    id=MessageId("r"),
                    content=(ToolResultBlock("c1", ()),),
                    source=ToolSource("c1"),
                ),
                meta={"k": float("nan")},
            ),
            {"surface_op": "append"},
            "data.meta.k is not a finite number",
        ),
        (
            "request/header",
            RequestHeaderData(
                header=EpochHeader(config=CallConfig(provider="", model="m")),
                reason="initial",
            ),
            {},
            "data.header.config.provider must be a non-empty provider",
        ),
        (
            "request/header",
            RequestHeaderData(
                header=EpochHeader(
                    config=CallConfig(provider="p", model="m"), tools=()
                ),
                reason="initial",
            ),
            {},
            "data.header.tools must be omitted",
        ),
        (
            "request/header",
            RequestHeaderData(
                header=EpochHeader(
                    config=CallConfig(provider="p", model="m"),
                    adapter_defaults=AdapterDefaults(),
                ),
                reason="initial",
            ),
            {},
            "data.header.adapter_defaults must be omitted",
        ),
        (
            "request/header",
            RequestHeaderData(
                header=EpochHeader(config=CallConfig(provider="p", model="m")),
                reason="fallback",
            ),  # type: ignore[arg-type]
            {},
            "data.reason must be one of",
        ),
        ("session/end-seed", EndSeed(False), {}, "data.inherited must be True or None"),
        (
            "agent/inbox/spliced",
            InboxSplice(target="nowhere", start=0),  # type: ignore[arg-type]
            {},
            "data.target must be one of",
        ),
        (
            "tool/call",
            ToolCallData(turn=1, step=1, call_id="c", name="n", arguments=None),  # type: ignore[arg-type]
            {},
            "data.arguments must be a str",
        ),
    ]


@pytest.mark.parametrize(("type_", "data", "kwargs", "expected"), _bad_typed())
def test_badly_typed_data_is_refused(
    session: Session, type_: str, data: object, kwargs: dict[str, Any], expected: str
) -> None:
    before = snapshot(session)
    with pytest.raises(InvalidEventError) as info:
        session.append(type_, data, **kwargs)
    assert expected in str(info.value)
    assert info.value.seq == 0
    assert snapshot(session) == before


@pytest.mark.parametrize("type_", ["", None, 3])
def test_type_must_be_a_non_empty_str(session: Session, type_: Any) -> None:
    with pytest.raises(InvalidEventError, match="type must be a non-empty str"):
        session.append(type_, {})
    assert len(session.events) == 0


def test_inbox_target_accepts_plain_strings(session: Session) -> None:
    event = session.append(
        "agent/inbox/spliced",
        InboxSplice(target="next-step", start=0),  # type: ignore[arg-type]
    )
    assert event.data_as(InboxSplice).target == InboxTarget.NEXT_STEP


def test_clock_must_return_epoch_milliseconds() -> None:
    session = Session.create("s", clock=lambda: 1)
    bad = Session.restore(session.header, [], clock=lambda: 1.5)  # type: ignore[arg-type,return-value]
    with pytest.raises(InvalidEventError, match="clock"):
        bad.append("turn/start", TurnStart(1))
    assert len(bad.events) == 0


# --------------------------------------------------------------------------- derived state


def test_turn_bookkeeping(session: Session) -> None:
    assert (session.last_turn, session.open_turn) == (0, None)
    session.append("turn/start", TurnStart(1))
    assert (session.last_turn, session.open_turn) == (1, 1)
    session.append("turn/end", TurnEnd(1, Completed()))
    assert (session.last_turn, session.open_turn) == (1, None)
    session.append("turn/start", TurnStart(2))
    assert (session.last_turn, session.open_turn) == (2, 2)


def test_request_header_and_context_track_the_latest(session: Session) -> None:
    assert session.request_header() is None and session.request_context() is None
    h1 = EpochHeader(config=CallConfig(provider="p", model="m1"))
    h2 = EpochHeader(
        config=CallConfig(provider="p", model="m2"), tools=({"name": "t"},)
    )
    session.append("request/header", RequestHeaderData(header=h1, reason="initial"))
    session.append("request/context", RequestContextData(provider="p", model="m1"))
    assert session.request_header() == h1
    session.append("request/header", RequestHeaderData(header=h2, reason="change"))
    ctx = RequestContextData(provider="p", model="m2", context_window=1000)
    session.append("request/context", ctx)
    assert session.request_header() == h2
    assert session.request_context() == ctx


# --------------------------------------------------------------------------- listeners


def test_listeners_run_in_order_after_commit(session: Session) -> None:
    seen: list[tuple[str, int, int]] = []

    def first(event: SessionEvent) -> None:
        seen.append(("first", event.seq, len(session.events)))

    def second(event: SessionEvent) -> None:
        seen.append(("second", event.seq, len(session.events)))

    session.subscribe(first)
    session.subscribe(second)
    session.append("turn/start", TurnStart(1))
    assert seen == [("first", 0, 1), ("second", 0, 1)]


def test_disposer_is_idempotent_and_exact(session: Session) -> None:
    seen: list[int] = []

    def listener(event: SessionEvent) -> None:
        seen.append(event.seq)

    dispose_a = session.subscribe(listener)
    session.subscribe(listener)
    session.append("turn/start", TurnStart(1))
    assert seen == [0, 0]
    dispose_a()
    dispose_a()
    session.append("turn/end", TurnEnd(1, Completed()))
    assert seen == [0, 0, 1]


def test_failing_listener_is_contained_and_logged(
    session: Session, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[int] = []

    def broken(event: SessionEvent) -> None:
        raise RuntimeError("boom")

    session.subscribe(broken)
    session.subscribe(lambda e: seen.append(e.seq))
    with caplog.at_level(logging.ERROR, logger="dsh_trio"):
        event = session.append("turn/start", TurnStart(1))
    assert event.seq == 0 and seen == [0]
    assert any("boom" in (r.exc_text or "") or r.exc_info for r in caplog.records)
    assert caplog.records[0].name == "dsh_trio"


def test_reentrant_append_from_listener_fails_and_appends_nothing(
    session: Session, caplog: pytest.LogCaptureFixture
) -> None:
    errors: list[BaseException] = []

    def reenter(event: SessionEvent) -> None:
        if event.seq == 0:
            try:
                session.append("plugin/echo", {})
            except SessionReentrancyError as exc:
                errors.append(exc)
                raise

    after: list[int] = []
    session.subscribe(reenter)
    session.subscribe(lambda e: after.append(len(session.events)))
    with caplog.at_level(logging.ERROR, logger="dsh_trio"):
        session.append("turn/start", TurnStart(1))
    assert len(errors) == 1
    assert "reenter" in str(errors[0])
    assert [e.type for e in session.events] == ["turn/start"]
    assert after == [1]
    assert any(
        r.exc_info and r.exc_info[0] is SessionReentrancyError for r in caplog.records
    )
    # Publication is over: appends work again.
    session.append("turn/end", TurnEnd(1, Completed()))
    assert len(session.events) == 2


def test_base_exception_from_listener_propagates_and_resets(session: Session) -> None:
    class Stop(BaseException):
        pass

    def stop(event: SessionEvent) -> None:
        raise Stop

    dispose = session.subscribe(stop)
    with pytest.raises(Stop):
        session.append("turn/start", TurnStart(1))
    assert len(session.events) == 1  # committed before listeners ran
    dispose()
    session.append("turn/end", TurnEnd(1, Completed()))


def test_invalid_append_publishes_nothing(session: Session) -> None:
    seen: list[SessionEvent] = []
    session.subscribe(seen.append)
    with pytest.raises(InvalidEventError):
        session.append("user/message", user_message("x"))
    assert seen == []


def iter_types(s: Session) -> Iterator[str]:
    return (e.type for e in s.events)
