"""The machine's fixtures around the runtime: the model desk and the runtime host.

:class:`ModelDesk` is a scripted model whose every request waits until the test
answers it; :class:`RuntimeHost` keeps one ``open_runtime`` block open in a task of
a :class:`~dsh_trio.testing.GuestLoop`; :func:`release_one` lets go of whatever
holds an agent while the machine waits for idleness.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing
from typing import Any

import attrs
import trio

from ...llm import ModelRequest
from ...nursery import Runtime, open_runtime
from ...values import StreamChunk, UserCancel
from .._guest import GuestLoop
from .._script import (
    Gate,
    Script,
    custom,
    fail,
    gate,
    hang,
    max_tokens,
    reply,
    tool_calls,
)
from .._scripted import ScriptedModel
from .._strategies import Answer
from ._subject import Subject

__all__ = ["ModelDesk", "RuntimeHost", "release_one"]


@attrs.define(eq=False)
class _Request:
    """One model request the desk holds."""

    request: ModelRequest
    answered: trio.Event = attrs.field(factory=trio.Event)
    answer: Script | None = None
    hanging: bool = False
    gate: Gate | None = None
    gate_opened: bool = False


class _Crash:
    """A model stream that raises a plain exception (not an ``LlmError``) at once."""

    def __aiter__(self) -> _Crash:
        return self

    async def __anext__(self) -> StreamChunk:
        await trio.lowlevel.checkpoint()
        raise RuntimeError("the adapter crashed")


def _crash(request: ModelRequest) -> _Crash:
    return _Crash()


class ModelDesk:
    """A :class:`ScriptedModel` whose every request waits until the test answers it.

    Each request stops at the desk; :meth:`answer` gives the oldest unanswered one
    its script entry (a reply, tool calls, a failure, a hang, a :class:`Gate`...).
    All methods are synchronous and must run inside the trio run.
    """

    def __init__(self) -> None:
        self.model = ScriptedModel(default=custom(self._serve))
        self.active: list[_Request] = []
        self._calls = 0
        #: Called (inside the run) with each request as it reaches the model.
        self.on_request: Callable[[ModelRequest], None] | None = None

    async def _serve(self, request: ModelRequest) -> AsyncGenerator[StreamChunk, None]:
        held = _Request(request)
        if self.on_request is not None:
            self.on_request(request)
        self.active.append(held)
        try:
            await held.answered.wait()
            assert held.answer is not None
            async with aclosing(held.answer.stream(request)) as inner:
                async for chunk in inner:
                    # The consumer closes this stream (and so the inner one).
                    yield chunk  # noqa: ASYNC119
        finally:
            self.active.remove(held)

    @property
    def unanswered(self) -> list[_Request]:
        """Requests waiting for an answer, oldest first."""
        return [r for r in self.active if r.answer is None]

    def held_gate(self) -> _Request | None:
        """The oldest request whose stream waits at a gate nobody opened yet."""
        for r in self.active:
            if r.gate is not None and r.gate.reached.is_set() and not r.gate_opened:
                return r
        return None

    def hanging(self) -> list[_Request]:
        """Requests answered with a hang whose stream is still open."""
        return [r for r in self.active if r.hanging]

    def script_for(
        self, answer: Answer, tool_names: Sequence[str], arguments: Callable[[str], str]
    ) -> Script:
        """The script entry that plays ``answer``."""
        kind = answer.kind
        if kind == "reply":
            return reply(answer.text)
        if kind == "tool-calls":
            calls = []
            for i in range(max(answer.calls, 1)):
                self._calls += 1
                name = tool_names[i % len(tool_names)]
                calls.append((f"call-{self._calls}", name, arguments(name)))
            return tool_calls(*calls)
        if kind == "max-tokens":
            return max_tokens(answer.text)
        if kind == "fail":
            return fail(answer.code)
        if kind == "fail-in-band":
            return fail(answer.code, in_band=True)
        if kind == "raise":
            return custom(_crash)
        if kind == "hang":
            return hang(answer.text or None)
        return gate(reply(answer.text), after=answer.after)

    def answer(self, script: Script, *, hangs: bool = False) -> _Request:
        """Answer the oldest unanswered request with ``script``.

        Raises:
            LookupError: no request is waiting.
        """
        waiting = self.unanswered
        if not waiting:
            raise LookupError("no model request is waiting for an answer")
        held = waiting[0]
        held.answer = script
        held.hanging = hangs
        held.gate = script if isinstance(script, Gate) else None
        held.answered.set()
        return held

    def open_gate(self, fail_code: str | None = None) -> None:
        """Release the held gate, or fail it with ``fail_code``.

        Raises:
            LookupError: no stream waits at a gate.
        """
        held = self.held_gate()
        if held is None or held.gate is None:
            raise LookupError("no model stream waits at a gate")
        held.gate_opened = True
        if fail_code is None:
            held.gate.release()
        else:
            held.gate.fail(fail_code)


class RuntimeHost:
    """Keeps one ``open_runtime`` block open in a task of a :class:`GuestLoop`."""

    def __init__(self, loop: GuestLoop, **runtime_kwargs: Any) -> None:
        self._loop = loop
        self._kwargs = runtime_kwargs
        self._stop = trio.Event()
        self._stopped = trio.Event()
        self._task: trio.lowlevel.Task | None = None
        self.error: Exception | None = None
        self.runtime: Runtime | None = None

    def start(self) -> Runtime:
        """Open the runtime (in the loop) and return it.

        Raises:
            Exception: what opening the runtime raised.
        """
        return self._loop.call(self._start)

    async def _start(self) -> Runtime:
        ready = trio.Event()
        self._loop.nursery.start_soon(self._serve, ready)
        await ready.wait()
        if self.runtime is None:
            assert self.error is not None
            error, self.error = self.error, None
            raise error
        return self.runtime

    async def _serve(self, ready: trio.Event) -> None:  # noqa: ASYNC910  # a private task; the runtime block checkpoints
        self._task = trio.lowlevel.current_task()
        try:
            async with open_runtime(**self._kwargs) as runtime:
                self.runtime = runtime
                ready.set()
                await self._stop.wait()
        except Exception as exc:
            # Kept for start() and stop(): the rule that waits for them reports it.
            self.error = exc
        finally:
            ready.set()
            self._stopped.set()

    @property
    def running(self) -> bool:
        """Whether the ``open_runtime`` block is still open."""
        return self._task is not None and not self._stopped.is_set()

    def runtime_tasks(self) -> list[trio.lowlevel.Task]:
        """The tasks living in the runtime's nursery right now."""
        if not self.running or self._task is None:
            return []
        return [t for n in self._task.child_nurseries for t in n.child_tasks]

    def stop(self) -> None:
        """Leave the ``open_runtime`` block (disposing what is live) and wait for it.

        Raises:
            Exception: what leaving the block raised.
            Deadlock: leaving the block got stuck.
        """
        if self._task is not None and not self._stopped.is_set():
            self._loop.call(self._stop_now)
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    async def _stop_now(self) -> None:
        self._stop.set()
        await self._stopped.wait()


def release_one(desk: ModelDesk, subject: Subject) -> bool:
    """Release one thing that holds ``subject``'s agent (inside the run); whether there was one.

    In order: answer a waiting model request with a plain reply, open a held gate,
    release a blocked maintenance task, or cancel (``keep_inbox``) a turn stuck in
    a hanging stream.
    """
    if desk.unanswered:
        desk.answer(reply("done"))
        return True
    if desk.held_gate() is not None:
        desk.open_gate()
        return True
    blocked = subject.blocked_maintenance()
    if blocked is not None:
        blocked.released = True
        blocked.release.set()
        return True
    if desk.hanging() and subject.activity() is not None:
        subject.cancel(UserCancel(), True)
        return True
    return False
