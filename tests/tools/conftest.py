"""A fake agent (real Session, real Inbox, a CancelSignal) and a driver stand-in."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import pytest

from dsh_trio.loop import CancelSignal, Inbox
from dsh_trio.session import Session
from dsh_trio.tools import Tool, ToolRegistry
from dsh_trio.values import CancelCause, ToolCallBlock, ToolResultData


@attrs.define(eq=False)
class FakeAgent:
    """What the scheduler and tool bodies use of an agent."""

    session: Session
    inbox: Inbox
    id: str
    signal: CancelSignal
    cancels: list[CancelCause] = attrs.field(factory=list)

    def cancel(self, cause: CancelCause, *, keep_inbox: bool = False) -> None:
        self.cancels.append(cause)
        self.signal.cancel(cause)


def registry_of(*tools: Tool, cap: int = 10) -> ToolRegistry:
    """A registry holding ``tools``, at most ``cap`` calls in parallel."""
    registry = ToolRegistry(max_parallel_tool_calls=cap)
    for t in tools:
        registry.register(t)
    return registry


def make_agent(session_id: str = "s1") -> FakeAgent:
    session = Session.create(session_id)
    return FakeAgent(
        session=session, inbox=Inbox(session), id=session_id, signal=CancelSignal()
    )


@attrs.define
class Outcome:
    """What one emulated driver step saw: the return value or that it was cancelled."""

    concluded: bool | None = None
    cancelled: bool = False


async def drive(
    registry: ToolRegistry,
    agent: FakeAgent,
    calls: Sequence[ToolCallBlock],
    outcome: Outcome | None = None,
    *,
    turn: int = 1,
    step: int = 1,
) -> Outcome:
    """Run ``execute`` inside the turn's cancel scope, as the driver does."""
    out = outcome if outcome is not None else Outcome()
    with agent.signal.scope as scope:
        out.concluded = await registry.execute(
            agent,  # type: ignore[arg-type]
            turn=turn,
            step=step,
            calls=calls,
            signal=agent.signal,
        )
    out.cancelled = scope.cancelled_caught
    return out


def call(call_id: str, name: str, arguments: str = "{}") -> ToolCallBlock:
    return ToolCallBlock(call_id, name, arguments)


def text_of(blocks: Any) -> str:
    return "".join(getattr(b, "text", "") for b in blocks)


def describe(agent: FakeAgent, start: int = 0) -> list[str]:
    """The tool part of the log as short lines: ``call c1``, ``result c1 ok`` ..."""
    lines: list[str] = []
    for ev in agent.session.events[start:]:
        d = ev.data
        if ev.type == "tool/call":
            lines.append(f"call {d.call_id}")
        elif ev.type == "tool/result":
            assert isinstance(d, ToolResultData)
            code = (
                d.error.code
                if d.error is not None
                else ("error" if d.message.content[0].is_error else "ok")
            )
            lines.append(f"result {d.message.source.call_id} {code}")
        elif ev.type == "agent/inbox/spliced":
            names = ",".join(text_of(m.content) for m in d.inserted)
            lines.append(f"spliced {d.target.value} [{names}]")
        else:
            lines.append(ev.type)
    return lines


def results(agent: FakeAgent) -> dict[str, ToolResultData]:
    out: dict[str, ToolResultData] = {}
    for ev in agent.session.events:
        if ev.type == "tool/result":
            assert isinstance(ev.data, ToolResultData)
            out[ev.data.message.source.call_id] = ev.data
    return out


@pytest.fixture
def agent() -> FakeAgent:
    return make_agent()
