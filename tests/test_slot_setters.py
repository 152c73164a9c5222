"""``values.slot_setters``: building frozen values field by field."""

from __future__ import annotations

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
            ("p", "m", (), (), None, None, 0.5, None, "s"),
            ModelRequest(
                provider="p",
                model="m",
                messages=(),
                temperature=0.5,
                session_id=SessionId("s"),
            ),
        ),
    ]
    for cls, args, want in cases:
        got: object = builder(cls)(*args)
        assert type(got) is cls
        assert got == want
        assert repr(got) == repr(want)
