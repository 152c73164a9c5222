"""``ModelSelection``: its fields by position, as the public contract writes them."""

from __future__ import annotations

import attrs
import pytest

from dsh_trio.composition import ModelSelection


def test_fields_are_taken_by_position() -> None:
    selection = ModelSelection("deepseek", "deepseek-v4-flash")
    assert (selection.provider, selection.model) == ("deepseek", "deepseek-v4-flash")
    assert selection.reasoning_effort is None
    assert ModelSelection("deepseek", "deepseek-v4-pro", "high").reasoning_effort == (
        "high"
    )


def test_positions_and_names_give_equal_selections() -> None:
    by_name = ModelSelection(
        provider="deepseek", model="deepseek-v4-pro", reasoning_effort="max"
    )
    assert ModelSelection("deepseek", "deepseek-v4-pro", "max") == by_name
    assert ModelSelection(
        "deepseek", model="deepseek-v4-pro", reasoning_effort="max"
    ) == (by_name)
    assert attrs.evolve(by_name, reasoning_effort=None) == ModelSelection(
        "deepseek", "deepseek-v4-pro"
    )


def test_positional_fields_are_checked_as_named_ones() -> None:
    with pytest.raises(
        ValueError, match=r"ModelSelection\.provider must be a non-blank"
    ):
        ModelSelection(" ", "m")
    with pytest.raises(ValueError, match="reasoning_effort"):
        ModelSelection("p", "m", "")
    with pytest.raises(TypeError):
        ModelSelection("p", "m", None, "extra")  # type: ignore[call-arg]
