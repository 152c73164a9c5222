"""``values.slot_setters``: building frozen values field by field."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from dsh_trio.values import InboxSplice, StepStart, slot_setters


def test_a_value_built_by_its_setters_equals_the_constructed_one() -> None:
    set_turn, set_step = slot_setters(StepStart, "turn", "step")
    start = object.__new__(StepStart)
    set_turn(start, 3)
    set_step(start, 4)
    assert start == StepStart(3, 4)
    assert hash(start) == hash(StepStart(3, 4))


def test_fields_must_be_named_completely_and_in_order() -> None:
    with pytest.raises(TypeError, match="has the fields"):
        slot_setters(StepStart, "step", "turn")
    with pytest.raises(TypeError, match="has the fields"):
        slot_setters(InboxSplice, "target", "start")


def test_a_class_with_a_validator_is_refused() -> None:
    @attrs.frozen
    class Checked:
        n: int = attrs.field(validator=attrs.validators.instance_of(int))

    with pytest.raises(TypeError, match="validator or a converter"):
        slot_setters(Checked, "n")


def test_builders_build_what_the_constructors_build() -> None:
    from dsh_trio.events import Committed, StreamEndFrame, StreamStartFrame
    from dsh_trio.llm import ModelRequest
    from dsh_trio.values import (
        AssistantMessage,
        AssistantMessageData,
        Completed,
        MessageId,
        ModelSource,
        RawChunkRecord,
        SessionId,
        StepEnd,
        TextBlock,
        TurnEnd,
        TurnStart,
        Usage,
        builder,
    )

    message = AssistantMessage(
        id=MessageId("m"), content=(TextBlock("x"),), source=ModelSource("p", "m")
    )
    cases: list[tuple[type, tuple[object, ...], object]] = [
        (StepStart, (1, 2), StepStart(1, 2)),
        (StepEnd, (1, 2), StepEnd(1, 2)),
        (TurnStart, (3,), TurnStart(3)),
        (TurnEnd, (3, Completed()), TurnEnd(3, Completed())),
        (ModelSource, ("p", "m", {"a": 1}), ModelSource("p", "m", {"a": 1})),
        (RawChunkRecord, (5, Usage(1, 2)), RawChunkRecord(5, Usage(1, 2))),
        (Committed, ("assistant/message", 4), Committed("assistant/message", 4)),
        (StreamStartFrame, ("a:1", 1, 2, 3), StreamStartFrame("a:1", 1, 2, 3)),
        (
            StreamEndFrame,
            ("a:1", 2, 0, Committed("x", 1)),
            StreamEndFrame("a:1", 2, 0, Committed("x", 1)),
        ),
        (
            AssistantMessageData,
            (1, 1, message, (), None, True),
            AssistantMessageData(
                turn=1, step=1, message=message, stream=(), usage=None, interrupted=True
            ),
        ),
        (
            ModelRequest,
            ("p", "m", (), (), None, None, 0.5, None, "s", False),
            ModelRequest(
                provider="p",
                model="m",
                messages=(),
                temperature=0.5,
                session_id=SessionId("s"),
                thinking=False,
            ),
        ),
    ]
    from dsh_trio.events import StreamChunkFrame
    from dsh_trio.loop._payloads import AssistantStream
    from dsh_trio.values import (
        SessionEvent,
        SurfaceReplace,
        TextDelta,
        UserMessage,
        UserSource,
    )

    frame = StreamChunkFrame("a:1", 3, 0, 1_700_000_000_000, TextDelta(0, "x"))
    agent: Any = object()  # a payload only carries its agent
    user = UserMessage(
        id=MessageId("u"), content=(TextBlock("x"),), source=UserSource()
    )
    cases += [
        (
            SessionEvent,
            (4, 5, "turn/start", TurnStart(1), None, None, False),
            SessionEvent(seq=4, time=5, type="turn/start", data=TurnStart(1)),
        ),
        (
            SessionEvent,
            (4, 5, "user/message", user, SurfaceReplace(1, 2), (1, 2), True),
            SessionEvent(
                seq=4,
                time=5,
                type="user/message",
                data=user,
                surface_op=SurfaceReplace(1, 2),
                source_event_seqs=(1, 2),
                ignorable=True,
            ),
        ),
        (
            StreamChunkFrame,
            ("a:1", 3, 0, 1_700_000_000_000, TextDelta(0, "x")),
            frame,
        ),
    ]
    # A payload compares by identity: compared by its fields.
    chunk_payload = builder(AssistantStream, nested={"frame": StreamChunkFrame})
    for payload in (
        builder(AssistantStream)(agent, frame),
        chunk_payload(agent, "a:1", 3, 0, 1_700_000_000_000, TextDelta(0, "x")),
    ):
        assert type(payload) is AssistantStream
        assert type(payload.frame) is StreamChunkFrame
        assert (payload.agent, payload.frame) == (agent, frame)
        assert repr(payload) == repr(AssistantStream(agent, frame))
    for cls, args, want in cases:
        got: object = builder(cls)(*args)
        assert type(got) is cls
        assert got == want
        assert repr(got) == repr(want)
        assert hash(got) == hash(want)


def test_a_value_built_on_its_twin_equals_the_constructed_one() -> None:
    from dsh_trio.values import twin

    mutable = twin(StepStart)
    assert mutable is not None
    start = object.__new__(mutable)
    start.turn, start.step = 3, 4
    start.__class__ = StepStart
    assert type(start) is StepStart
    assert start == StepStart(3, 4)
    assert hash(start) == hash(StepStart(3, 4))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        start.turn = 5  # type: ignore[misc]  # frozen once it is a StepStart


def test_the_values_every_turn_builds_have_twins() -> None:
    """The runtime builds these on every turn, chunk or append: each must take the
    twin path of ``builder`` (no ``__weakref__`` slot, slots straight on ``object``),
    or every turn pays a setter call per field again."""
    from dsh_trio.events import (
        Committed,
        StreamChunkFrame,
        StreamEndFrame,
        StreamStartFrame,
    )
    from dsh_trio.llm import ModelRequest
    from dsh_trio.loop._payloads import AssistantStream
    from dsh_trio.loop._phase import Running
    from dsh_trio.tools._outcome import Outcome
    from dsh_trio.values import (
        AssistantMessage,
        AssistantMessageData,
        InboxSplice,
        ModelSource,
        RawChunkRecord,
        SessionEvent,
        StepEnd,
        TextBlock,
        TextChunksRecord,
        ToolCallChunksRecord,
        ToolCallData,
        ToolResultBlock,
        ToolResultData,
        ToolSource,
        TurnEnd,
        TurnStart,
        UserMessage,
        twin,
    )

    hot = [
        SessionEvent, TurnStart, StepStart, StepEnd, TurnEnd, InboxSplice,
        AssistantMessageData, AssistantMessage, ModelSource, RawChunkRecord,
        TextChunksRecord, ToolCallChunksRecord, ToolCallData, ToolResultData,
        ToolResultBlock, ToolSource, TextBlock, UserMessage, StreamStartFrame,
        StreamChunkFrame, StreamEndFrame, Committed, AssistantStream, Running,
        ModelRequest, Outcome,
    ]  # fmt: skip
    assert [cls.__name__ for cls in hot if twin(cls) is None] == []


def test_builder_falls_back_to_setters_without_a_twin() -> None:
    from dsh_trio.values import builder, twin

    @attrs.frozen  # a ``__weakref__`` slot: no other class can share its layout
    class Weak:
        a: int
        b: str

    @attrs.frozen(weakref_slot=False)
    class Base:
        a: int

    @attrs.frozen(weakref_slot=False)
    class Derived(Base):
        b: str

    assert twin(Weak) is None
    assert twin(Derived) is None
    assert builder(Weak)(1, "x") == Weak(1, "x")
    assert type(builder(Derived)(1, "x")) is Derived
    assert builder(Derived)(1, "x") == Derived(1, "x")
    with pytest.raises(TypeError, match="validator or a converter"):

        @attrs.frozen(weakref_slot=False)
        class Checked:
            n: int = attrs.field(validator=attrs.validators.instance_of(int))

        twin(Checked)


def test_a_builder_may_take_a_field_as_its_converter_gives_it() -> None:
    """``converted``: the caller passes the field as the converter would make it."""
    from dsh_trio.values import (
        Enter,
        MessageId,
        TextBlock,
        UserMessage,
        UserSource,
        builder,
    )

    message = UserMessage(
        id=MessageId("m"), content=(TextBlock("x"),), source=UserSource()
    )
    enter = builder(Enter, converted=("messages",))
    built = enter((message,), False)
    assert type(built) is Enter
    assert built == Enter([message]) and hash(built) == hash(Enter([message]))
    assert repr(built) == repr(Enter([message]))
    with pytest.raises(TypeError, match="validator or a converter"):
        builder(Enter)  # the converter would be skipped unannounced
    with pytest.raises(TypeError, match="no field with a converter named"):
        builder(Enter, converted=("starts_request_series",))


def test_a_builder_builds_a_nested_value_from_its_fields() -> None:
    from dsh_trio.values import Errored, LlmFailure, TurnEnd, builder

    @attrs.frozen  # no twin: built with its setters
    class Pair:
        left: object
        right: object

    failure = LlmFailure(message="boom", code="SERVER")
    end = builder(TurnEnd, nested={"reason": Errored})
    assert end(3, failure) == TurnEnd(3, Errored(failure))
    assert type(end(3, failure).reason) is Errored
    pairs = builder(Pair, nested={"right": Pair})
    assert pairs(1, 2, 3) == Pair(1, Pair(2, 3))
    with pytest.raises(TypeError, match="no field named"):
        builder(TurnEnd, nested={"cause": Errored})
