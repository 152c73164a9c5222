"""``agent_collector``: the opt-in collector setting for many live agents, undone on exit."""

from __future__ import annotations

import gc

import pytest

from dsh_trio.nursery import agent_collector


class _Kept:
    """A tracked object that stays alive through the block."""


@pytest.fixture(autouse=True)
def _restore_collector() -> object:
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


def test_it_freezes_and_tunes_inside_and_restores_on_exit() -> None:
    gc.set_threshold(700, 10, 10)
    kept = _Kept()
    with agent_collector((5_000, 7, 9)) as collector:
        assert gc.get_threshold() == (5_000, 7, 9)
        assert gc.get_freeze_count() > 0
        later = _Kept()
        frozen = gc.get_freeze_count()
        assert collector.freeze() >= frozen  # ``later`` too, on demand
        assert later is not kept
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


def test_it_restores_when_the_block_raises() -> None:
    gc.set_threshold(800, 11, 12)
    with pytest.raises(KeyError), agent_collector(freeze=True):
        raise KeyError("boom")
    assert gc.get_threshold() == (800, 11, 12)
    assert gc.get_freeze_count() == 0


def test_without_freeze_nothing_is_frozen() -> None:
    with agent_collector(freeze=False):
        assert gc.get_freeze_count() == 0
        assert gc.get_threshold() == (10_000, 20, 100)


@pytest.mark.parametrize("bad", [(0, 10, 10), (700, 10), (700.0, 10, 10)])
def test_bad_thresholds_are_refused_with_what_was_given(bad: object) -> None:
    before = gc.get_threshold()
    with pytest.raises(ValueError, match="three positive ints"), agent_collector(bad):  # type: ignore[arg-type]
        pass
    assert gc.get_threshold() == before
