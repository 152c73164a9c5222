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
