"""A runtime holding many agents raises the collector's thresholds, and puts them back.

The raise is process-wide state, so every way out of the runtime (the block ending,
raising, being cancelled) must restore what was there before; and because nothing is
frozen, a disposed agent must still be freed by the collector while they are raised.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest
import trio

import dsh_trio as dsh
from dsh_trio.nursery._collector import (
    MANY_AGENTS,
    RUNTIME_THRESHOLDS,
    RuntimeCollector,
)
from dsh_trio.testing import ScriptedModel, reply

OPTIONS = dsh.AgentOptions(provider="scripted", model="m")
CPYTHON = (700, 10, 10)


_made: list[RuntimeCollector] = []


def _collector(many: int) -> RuntimeCollector:
    """A collector the test's teardown closes (a failed test leaves nothing held)."""
    made = RuntimeCollector(many=many)
    _made.append(made)
    return made


@pytest.fixture(autouse=True)
def _restore_collector() -> Iterator[None]:
    before = gc.get_threshold()
    gc.set_threshold(*CPYTHON)
    yield
    while _made:
        _made.pop().close()
    gc.set_threshold(*before)


def _models() -> dict[str, ScriptedModel]:
    return {"scripted": ScriptedModel(default=reply("hi"))}


async def _create_many(runtime: dsh.Runtime, n: int) -> list[dsh.AgentHandle]:
    return [await runtime.agents.create(options=OPTIONS) for _ in range(n)]


# ---------------------------------------------------------------- the policy


def test_it_raises_from_many_agents_and_puts_back_below_half() -> None:
    collector = RuntimeCollector(many=4, thresholds=(9_000, 30, 90))
    _made.append(collector)
    collector.added(3)
    assert gc.get_threshold() == CPYTHON and not collector.holding
    collector.added(4)
    assert gc.get_threshold() == (9_000, 30, 90) and collector.holding
    collector.removed(3)
    collector.removed(2)  # half of many: still held (no flapping at the edge)
    assert gc.get_threshold() == (9_000, 30, 90)
    collector.removed(1)
    assert gc.get_threshold() == CPYTHON and not collector.holding
    collector.close()  # nothing held: nothing changes
    assert gc.get_threshold() == CPYTHON


def test_once_closed_it_raises_them_no_more() -> None:
    collector = _collector(many=1)
    collector.added(1)
    collector.close()
    assert gc.get_threshold() == CPYTHON
    collector.added(2)  # the runtime is disposing its agents
    assert gc.get_threshold() == CPYTHON and not collector.holding


def _full_collections() -> int:
    return int(gc.get_stats()[2]["collections"])


def test_a_quarter_of_the_live_agents_disposed_runs_a_full_collection() -> None:
    collector = _collector(many=8)
    collector.added(8)
    full = _full_collections()
    collector.removed(7)  # one disposed: less than a quarter of 7
    assert _full_collections() == full
    collector.removed(6)  # two: a quarter of 6 and more
    assert _full_collections() == full + 1
    collector.removed(5)  # counted from the last full collection again
    assert _full_collections() == full + 1
    collector.close()


def test_a_full_collection_meanwhile_starts_the_count_again() -> None:
    collector = _collector(many=8)
    collector.added(8)
    collector.removed(7)
    gc.collect()  # the application's, or CPython's own
    full = _full_collections()
    collector.removed(6)  # the first disposal since that collection
    assert _full_collections() == full
    collector.close()


def test_it_only_raises_and_keeps_a_higher_setting_of_the_application() -> None:
    gc.set_threshold(50_000, 5, 200)
    collector = RuntimeCollector(many=1, thresholds=(10_000, 20, 100))
    _made.append(collector)
    collector.added(1)
    assert gc.get_threshold() == (50_000, 20, 200)
    collector.close()
    assert gc.get_threshold() == (50_000, 5, 200)


def test_collection_turned_off_by_threshold_stays_off() -> None:
    gc.set_threshold(0, 10, 10)
    collector = _collector(many=1)
    collector.added(1)
    assert gc.get_threshold() == (0, 10, 10)
    collector.close()
    assert gc.get_threshold() == (0, 10, 10)


def test_thresholds_the_application_sets_meanwhile_stay() -> None:
    collector = _collector(many=1)
    collector.added(1)
    gc.set_threshold(1_234, 5, 6)
    collector.close()
    assert gc.get_threshold() == (1_234, 5, 6)


def test_several_runtimes_share_it_and_the_last_to_let_go_restores() -> None:
    first, second = _collector(many=1), _collector(many=1)
    first.added(1)
    second.added(1)
    first.close()
    assert gc.get_threshold() == RUNTIME_THRESHOLDS  # the second still holds it
    second.close()
    assert gc.get_threshold() == CPYTHON


# ---------------------------------------------------------------- in a runtime


async def test_a_runtime_with_many_agents_raises_and_restores_on_exit() -> None:
    async with dsh.open_runtime(models=_models()) as runtime:
        handles = await _create_many(runtime, MANY_AGENTS - 1)
        assert gc.get_threshold() == CPYTHON
        handles += await _create_many(runtime, 1)
        assert gc.get_threshold() == RUNTIME_THRESHOLDS
        for handle in handles[: MANY_AGENTS // 2 + 1]:
            await handle.dispose()
        assert gc.get_threshold() == CPYTHON  # fewer than half as many live
        await _create_many(runtime, MANY_AGENTS // 2 + 1)
        assert gc.get_threshold() == RUNTIME_THRESHOLDS
    assert gc.get_threshold() == CPYTHON


async def test_the_thresholds_are_restored_when_the_block_raises() -> None:
    with pytest.RaisesGroup(pytest.RaisesExc(KeyError, match="boom")):
        async with dsh.open_runtime(models=_models()) as runtime:
            await _create_many(runtime, MANY_AGENTS)
            assert gc.get_threshold() == RUNTIME_THRESHOLDS
            raise KeyError("boom")
    assert gc.get_threshold() == CPYTHON


async def test_the_thresholds_are_restored_when_the_block_is_cancelled() -> None:
    with trio.CancelScope() as scope:
        async with dsh.open_runtime(models=_models()) as runtime:
            await _create_many(runtime, MANY_AGENTS)
            assert gc.get_threshold() == RUNTIME_THRESHOLDS
            scope.cancel()
            await trio.sleep_forever()
    assert scope.cancelled_caught
    assert gc.get_threshold() == CPYTHON


async def test_a_disposed_agent_is_collected_while_they_are_raised() -> None:
    async with dsh.open_runtime(models=_models()) as runtime:
        handles = await _create_many(runtime, MANY_AGENTS)
        gone = handles.pop()
        agent = gone.agent
        agent.followup(dsh.user_message("hello"))
        await agent.when_idle()
        assert gc.get_threshold() == RUNTIME_THRESHOLDS
        ref = weakref.ref(agent)
        session_ref = weakref.ref(agent.session)
        await gone.dispose()
        del gone, agent
        gc.collect()
        assert ref() is None
        assert session_ref() is None
        assert gc.get_freeze_count() == 0  # nothing is hidden from the collector


async def test_the_runtime_frees_disposed_agents_without_being_asked() -> None:
    live = MANY_AGENTS + MANY_AGENTS // 5
    async with dsh.open_runtime(models=_models()) as runtime:
        handles = await _create_many(runtime, live)
        assert gc.get_threshold() == RUNTIME_THRESHOLDS
        first = weakref.ref(handles[0].agent)
        await handles.pop(0).dispose()
        assert first() is not None  # a cycle: refcounts alone do not free it
        # Disposed since: d; live now: live - d; a quarter: 4 d >= live - d.
        for _ in range(live // 5 - 1):
            await handles.pop(0).dispose()
        assert gc.get_threshold() == RUNTIME_THRESHOLDS
        assert first() is None  # collected by the runtime
