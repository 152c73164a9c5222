"""Disposal order by example: a parent is drained only after its children are disposed."""

from __future__ import annotations

import trio
import trio.testing

import dsh_trio as dsh
from dsh_trio.events import SessionEventAppended
from dsh_trio.testing import ScriptedModel, hang

OPTIONS = dsh.AgentOptions(provider="scripted", model="m")


async def test_disposing_a_parent_ends_its_childs_turn_before_its_own() -> None:
    model = ScriptedModel(default=hang("partial"))
    order: list[tuple[str, str]] = []
    disposed: list[str] = []
    async with dsh.open_runtime(models={"scripted": model}) as runtime:

        def on_event(e: SessionEventAppended) -> None:
            order.append((e.session.id, e.event.type))

        runtime.events.on("session/event", on_event)
        runtime.events.on("agent/disposed", lambda e: disposed.append(e.agent.id))
        parent = await runtime.agents.create("parent", options=OPTIONS)
        child = await runtime.agents.create(
            "child", options=OPTIONS, parent=parent.agent
        )
        parent.agent.followup(dsh.user_message("work"))
        child.agent.followup(dsh.user_message("work"))
        await trio.testing.wait_all_tasks_blocked()
        assert parent.agent.status is child.agent.status is dsh.AgentStatus.RUNNING
        mark = len(order)
        await parent.dispose()
        assert child.agent.disposed
    assert disposed == ["child", "parent"]
    ends = [sid for sid, kind in order[mark:] if kind == "turn/end"]
    assert ends == ["child", "parent"]  # the child's turn ended first
    first_of_parent = next(
        i for i, (sid, _) in enumerate(order[mark:]) if sid == "parent"
    )
    assert all(sid == "parent" for sid, _ in order[mark:][first_of_parent:])
