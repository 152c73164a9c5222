"""The listener policy of an emit lives in one function, ``events.dispatch``: call each
listener, report one that raises or returns an awaitable, go on. Every emit path (the
bus, an emit target, a model attempt's live frames) reports through it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import attrs
import pytest

import dsh_trio as dsh
from dsh_trio.events import AssistantStream, EventBus, dispatch

from ..support import ChunkAdapter

NAME = "agent/assistant-stream"
RAISED = 'listener of event "{}" raised'
MISFIRED = 'listener of emit event "{}" returned an awaitable'


class Scope:
    """A dispatch scope."""


@attrs.frozen(eq=False)
class Payload:
    agent: object = None
    n: int = 0


def _policy_listeners(heard: list[object]) -> list[Callable[[Any], object]]:
    """A listener that raises, one that returns an awaitable, one that hears."""

    def boom(payload: object) -> None:
        raise RuntimeError("boom")

    def misfire(payload: object) -> object:
        async def later() -> None:
            pass

        return later()

    return [boom, misfire, heard.append]


def _reports(caplog: pytest.LogCaptureFixture) -> list[tuple[str, int, str, object]]:
    return [
        (
            r.getMessage().split(";")[0],
            r.levelno,
            r.funcName,
            r.exc_info[0] if r.exc_info else None,
        )
        for r in caplog.records
    ]


def test_dispatch_calls_each_listener_reports_failures_and_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    heard: list[object] = []
    with caplog.at_level(logging.ERROR, logger="dsh_trio"):
        dispatch("x/y", _policy_listeners(heard), "p")
    assert heard == ["p"]
    assert _reports(caplog) == [
        (RAISED.format("x/y"), logging.ERROR, "dispatch", RuntimeError),
        (MISFIRED.format("x/y"), logging.ERROR, "misfired", None),
    ]
    assert "RuntimeError: boom" in caplog.text  # with its traceback
    assert "was never awaited" not in caplog.text  # the awaitable was closed


def test_dispatch_lets_an_exception_outside_exception_through() -> None:
    heard: list[object] = []

    def interrupt(payload: object) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        dispatch("x/y", [interrupt, heard.append], "p")
    assert heard == []


def test_the_bus_and_an_emit_target_report_as_dispatch_does(
    caplog: pytest.LogCaptureFixture,
) -> None:
    heard: list[object] = []
    listeners = _policy_listeners(heard)
    with caplog.at_level(logging.ERROR, logger="dsh_trio"):
        dispatch(NAME, listeners, Payload())
    direct = _reports(caplog)
    caplog.clear()
    bus = EventBus()
    for listener in listeners:
        bus.on("custom", listener)  # an emit name that takes async callables too
    with caplog.at_level(logging.ERROR, logger="dsh_trio"):
        bus.emit("custom", Payload(n=1))
    by_bus = _reports(caplog)
    caplog.clear()
    scope = Scope()
    target = bus._target("custom", scope)
    with caplog.at_level(logging.ERROR, logger="dsh_trio"):
        target.emit(Payload(scope, 2))
    by_target = _reports(caplog)
    custom = [(m.replace(NAME, "custom"), *rest) for m, *rest in direct]
    assert by_bus == by_target == custom
    assert [p.n for p in heard if isinstance(p, Payload)] == [0, 1, 2]


async def test_every_live_frame_of_an_attempt_reports_through_dispatch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The start frame, chunks on both paths of an attempt (a delta that continues
    the text run, a first and a non-ASCII one) and the end frame."""
    chunks = (
        dsh.TextDelta(0, "a"),  # opens the run
        dsh.TextDelta(0, "b"),  # continues it
        dsh.TextDelta(0, "caf\u00e9"),  # needs the general path
        dsh.Finish(dsh.FinishReason("stop")),
    )
    heard: list[object] = []
    async with dsh.open_runtime(models={"p": ChunkAdapter(chunks)}) as runtime:
        handle = await runtime.agents.create(
            options=dsh.AgentOptions(provider="p", model="m")
        )
        for listener in _policy_listeners(heard):
            handle.agent.scope.on(NAME, listener)
        with caplog.at_level(logging.ERROR, logger="dsh_trio"):
            result = await handle.agent.run("hi")
        await handle.dispose()
    assert result.text == "abcaf\u00e9"
    frames = [p.frame for p in heard if isinstance(p, AssistantStream)]
    assert len(frames) == 1 + len(chunks) + 1
    one = [
        (RAISED.format(NAME), logging.ERROR, "dispatch", RuntimeError),
        (MISFIRED.format(NAME), logging.ERROR, "misfired", None),
    ]
    assert _reports(caplog) == one * len(frames)
    assert {r.module for r in caplog.records} == {"_dispatch"}
