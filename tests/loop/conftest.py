"""Shared helpers for the driver tests: a tracer of durable and live events."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

import dsh_trio as dsh
from dsh_trio.events import (
    AgentErrorEvent,
    AgentStatusChanged,
    AssistantStream,
    Committed,
    InboxClaimed,
    InboxDiscarded,
    InboxInserted,
    PreStep,
    SessionEventAppended,
    StreamChunkFrame,
    StreamEndFrame,
    StreamStartFrame,
    TurnStopping,
)
from dsh_trio.testing import ScriptedModel

OPTIONS = dsh.AgentOptions(provider="scripted", model="m")


def text_of(message: Any) -> str:
    return "".join(getattr(b, "text", "") for b in message.content)


def describe_event(ev: dsh.SessionEvent) -> str:
    d = ev.data
    t = ev.type
    if t == "agent/inbox/spliced":
        parts = [f"#{ev.seq} spliced {d.target.value}"]
        if d.removed_count:
            parts.append(f"removed={d.removed_count}")
        if d.inserted:
            parts.append("ins=[" + ",".join(text_of(m) for m in d.inserted) + "]")
        if d.outcome:
            parts.append(d.outcome)
        return " ".join(parts)
    if t in ("turn/start",):
        return f"#{ev.seq} turn/start {d.turn}"
    if t == "turn/end":
        reason = d.reason
        extra = ""
        if isinstance(reason, dsh.Aborted):
            extra = f" {reason.reason.kind}"
        if isinstance(reason, dsh.Errored):
            extra = f" {reason.error.code}"
        return f"#{ev.seq} turn/end {d.turn} {reason.TAG}{extra}"
    if t in ("step/start", "step/end"):
        return f"#{ev.seq} {t} {d.turn}/{d.step}"
    if t == "user/message":
        return f"#{ev.seq} user/message {text_of(d)}"
    if t == "system/message":
        return f"#{ev.seq} system/message {text_of(d.message)!r}"
    if t == "assistant/message":
        flag = " interrupted" if d.interrupted else ""
        return f"#{ev.seq} assistant/message {text_of(d.message)!r}{flag}"
    if t == "request/header":
        return f"#{ev.seq} request/header {d.reason}"
    if t == "tool/call":
        return f"#{ev.seq} tool/call {d.call_id}"
    if t == "tool/result":
        code = f" {d.error.code}" if d.error else ""
        return f"#{ev.seq} tool/result {d.message.source.call_id}{code}"
    return f"#{ev.seq} {t}"


class Tracer:
    """Records durable events (via session/event) and live events, in one order."""

    def __init__(self, runtime: dsh.Runtime, *, frames: bool = False) -> None:
        self.lines: list[str] = []
        bus = runtime.events
        bus.on("session/event", self._session)
        bus.on(
            "agent/inbox/inserted",
            lambda e: self.lines.append(f"~inserted {text_of(e.message)}"),
        )
        bus.on(
            "agent/inbox/claimed",
            lambda e: self.lines.append(f"~claimed {text_of(e.message)} t{e.turn}"),
        )
        bus.on(
            "agent/inbox/discarded",
            lambda e: self.lines.append(f"~discarded {text_of(e.message)}"),
        )
        bus.on("agent/status", lambda e: self.lines.append(f"~status {e.status.value}"))
        bus.on("agent/error", lambda e: self.lines.append(f"~error t{e.turn}s{e.step}"))
        bus.on("agent/pre-step", self._pre_step)
        bus.on("agent/turn-stopping", self._turn_stopping)
        if frames:
            bus.on("agent/assistant-stream", self._frame)

    def _session(self, e: SessionEventAppended) -> None:
        self.lines.append(describe_event(e.event))

    async def _pre_step(self, e: PreStep, next: Callable[[], Awaitable[Any]]) -> Any:
        self.lines.append(
            f"~pre-step t{e.turn}s{e.step} [{'|'.join(text_of(m) for m in e.messages)}]"
        )
        return await next()

    async def _turn_stopping(self, e: TurnStopping) -> None:
        self.lines.append(f"~turn-stopping t{e.turn}")

    def _frame(self, e: AssistantStream) -> None:
        f = e.frame
        if isinstance(f, StreamStartFrame):
            self.lines.append(f"~start r{f.revision}")
        elif isinstance(f, StreamChunkFrame):
            self.lines.append(f"~chunk r{f.revision} i{f.index}")
        elif isinstance(f, StreamEndFrame):
            o = f.outcome
            what = f"committed {o.seq}" if isinstance(o, Committed) else "abandoned"
            self.lines.append(f"~end r{f.revision} i{f.index} {what}")

    def durable(self) -> list[str]:
        return [line for line in self.lines if line.startswith("#")]

    def clear(self) -> None:
        self.lines.clear()


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel()


@pytest.fixture
async def runtime(model: ScriptedModel) -> AsyncIterator[dsh.Runtime]:
    async with dsh.open_runtime(
        models={"scripted": model}, system_prompt="You are terse."
    ) as rt:
        yield rt


@pytest.fixture
async def agent(runtime: dsh.Runtime) -> AsyncIterator[dsh.Agent]:
    handle = await runtime.agents.create("a1", options=OPTIONS)
    yield handle.agent
    await handle.dispose()


_ = (AgentErrorEvent, AgentStatusChanged, InboxClaimed, InboxDiscarded, InboxInserted)
