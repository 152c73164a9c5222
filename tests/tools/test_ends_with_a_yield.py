"""``ToolRegistry.execute`` returns right after a checkpoint that follows its last
append: the driver's next step boundary relies on that yield (see
``loop._driver._boundary``)."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from dsh_trio.tools import ToolContext, ToolRegistry, tool

from .conftest import FakeAgent, call, describe, drive


@tool(parallel_safe=True)
async def instant(ctx: ToolContext) -> str:
    return "done"  # no await: the body itself never yields


@pytest.mark.parametrize("count", [1, 3])
async def test_the_last_thing_execute_does_is_a_checkpoint(
    agent: FakeAgent, monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    registry = ToolRegistry(max_parallel_tool_calls=4)
    registry.register(instant)
    seen: list[int] = []
    original = trio.lowlevel.checkpoint

    async def checkpoint() -> Any:
        seen.append(len(agent.session.events))
        await original()

    monkeypatch.setattr(trio.lowlevel, "checkpoint", checkpoint)
    calls = [call(f"c{i}", "instant") for i in range(count)]
    await drive(registry, agent, calls)
    assert describe(agent).count("call c0") == 1
    assert len(agent.session.events) == 2 * count
    assert seen and seen[-1] == len(agent.session.events)
