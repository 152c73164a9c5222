"""The step's call scheduler: one committed assistant message's tool calls, run and logged.

Calls are taken in model order and grouped: a run of parallel-safe calls forms a group
whose bodies overlap in a bounded pool; any other call (exclusive, unknown, or with
invalid arguments) is a barrier of its own. ``tool/call`` is appended when a call
starts; ``tool/result`` events are committed strictly in model order, each followed by
the contexts its call deferred. A cancelled turn still closes every call it started,
and gives each unstarted call a skipped pair. So does a failure inside the
scheduler or a body escaping with a ``BaseException``: every call of the message has
a result in the history before the failure propagates.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING

import attrs
import trio

from ..errors import ToolArgumentsError
from ..values import (
    MAX_SAFE_INTEGER,
    InboxTarget,
    ToolCallBlock,
    ToolErrorInfo,
)
from ._arguments import parse_arguments
from ._outcome import (
    Outcome,
    _settle,
    _settle_plain,
    aborted,
    crashed,
    error_outcome,
    invoke,
    raised,
    skipped,
)
from ._records import append_call, append_result
from ._specs import clip
from ._tool import Tool, ToolContext

if TYPE_CHECKING:
    from ..loop import Agent, CancelSignal
    from ._registry import ToolRegistry

__all__ = ["execute_tool_calls"]

logger = logging.getLogger("dsh_trio")

_INVALID_ARGS = ToolErrorInfo("ToolArgumentsError", "INVALID_ARGS")


def _cancellation_only(exc: BaseException) -> bool:
    """Whether ``exc`` is a ``Cancelled``, or a group holding nothing else."""
    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return all(_cancellation_only(e) for e in exc.exceptions)
    return False


def _failures(exc: BaseException) -> list[BaseException]:
    """The leaves of ``exc`` that are not ``Cancelled``."""
    if isinstance(exc, trio.Cancelled):
        return []
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in _failures(e)]
    return [exc]


def _scope_cancelled() -> bool:
    """Whether a scope around the current task is cancelled (``Cancelled`` is due).

    Reads the task's cancel status (what ``trio.lowlevel.checkpoint_if_cancelled``
    tests) instead of walking every enclosing deadline; with a trio that has no
    such status, the effective deadline tells.
    """
    status = getattr(trio.lowlevel.current_task(), "_cancel_status", None)
    cancelled = getattr(status, "effectively_cancelled", None)
    if cancelled.__class__ is bool:
        return cancelled is True
    return trio.current_effective_deadline() == -math.inf


@attrs.define(eq=False)
class _Call:
    """The scheduling state of one call."""

    block: ToolCallBlock
    prepared: bool = False
    tool: Tool | None = None
    kwargs: dict[str, object] = attrs.field(factory=dict)
    rejected: Outcome | None = None  # unknown tool or invalid arguments: no body runs
    call_seq: int = -1
    settled: bool = False
    outcome: Outcome | None = None


@attrs.define(eq=False)
class _Run:
    """The scheduler state of one ``execute``: calls ``[:committed]`` have results,
    ``[:started]`` have their ``tool/call``, ``in_flight`` bodies are running."""

    registry: ToolRegistry
    agent: Agent
    turn: int
    step: int
    signal: CancelSignal
    calls: list[_Call]
    started: int = 0
    committed: int = 0
    in_flight: int = 0
    concluded: bool = False
    # The scheduler failed (a body escaped with a BaseException, or an append
    # raised): start nothing more; the failure path closes every call out.
    failed: bool = False
    # Set when a pooled body settles; made by the pooled path (one call needs none).
    changed: trio.Event = attrs.field(init=False)

    def run(self) -> Awaitable[bool]:
        """The run of every call: one call in this task, more in a pool."""
        if len(self.calls) == 1:
            return self._run_one()
        return self._run_pooled()

    async def _run_pooled(self) -> bool:
        """Calls in model order, parallel-safe groups overlapping in a nursery."""
        self.changed = trio.Event()
        cancelled: BaseExceptionGroup[BaseException] | None = None
        try:
            async with trio.open_nursery() as nursery:
                await self._schedule(nursery)
        except BaseExceptionGroup as group:
            if not _cancellation_only(group):
                self.failed = True
                self._close_out_after_failure()
                leaves = _failures(group)
                if len(leaves) == 1:
                    raise leaves[0] from None
                raise
            cancelled = group
        if cancelled is not None or self._aborted():
            self._close_out()
            # The turn's scope is still cancelled: this raises a plain Cancelled for
            # the driver rather than the nursery's group of them.
            await trio.lowlevel.checkpoint()
            if cancelled is not None:
                raise cancelled
            return False
        await trio.lowlevel.checkpoint()
        return self.concluded

    async def _run_one(self) -> bool:
        """One call (the common case): its body runs in this task, with no nursery.

        Outcomes, events and failures are those of the pooled path: a body escaping
        with a non-cancellation ``BaseException`` closes the call out and propagates
        (as the nursery's single leaf would); a cancellation closes it out and
        propagates. The body is awaited right here (no ``_body`` frame), and a
        body without a context parameter gets no :class:`ToolContext` made.
        """
        call = self.calls[0]
        cancelled = self._cancelled()
        if not cancelled:
            try:
                self._start(call, None)
                tool = call.tool
                if not call.settled and tool is not None:
                    # A body without a context parameter gets none made: it can
                    # defer nothing and conclude nothing, so its outcome needs none
                    # (the rare outcomes that read one get a fresh one).
                    ctx = self._context(call) if tool._takes_context else None
                    try:
                        if ctx is None:
                            value = await tool.fn(**call.kwargs)
                        else:
                            value = await tool.fn(ctx, **call.kwargs)
                    except Exception as exc:
                        call.outcome = raised(self._given(call, ctx), exc)
                    except BaseException as exc:
                        self._broken(call, tool, self._given(call, ctx), exc)
                        raise
                    else:
                        outcome = (
                            _settle_plain(call.block.id, value) if ctx is None else None
                        )
                        if outcome is None:
                            outcome = _settle(tool, self._given(call, ctx), value)
                        call.outcome = outcome
                    finally:
                        if ctx is not None:
                            ctx._close()
                        call.settled = True
                        self.in_flight -= 1
                    cancelled = self._cancelled()  # once: the commit reads it too
                self._commit(call, cancelled)
            except BaseException as exc:
                if _cancellation_only(exc):
                    self._close_out()
                    raise
                self.failed = True
                self._close_out_after_failure()
                raise exc from None
        if cancelled:
            self._close_out()
            await trio.lowlevel.checkpoint()  # the turn's scope is cancelled: raises
            return False
        await trio.lowlevel.checkpoint()
        return self.concluded

    # ------------------------------------------------------------------ scheduling

    def _aborted(self) -> bool:
        # After a failure, the nursery's own cancellation also stops the scheduler.
        return self.failed or self._cancelled()

    def _cancelled(self) -> bool:
        # The turn's signal, or any enclosing cancellation (the owner shutting down).
        return self.signal.cause is not None or _scope_cancelled()

    async def _schedule(self, nursery: trio.Nursery) -> None:  # noqa: ASYNC910  # private: the scheduler around it checkpoints
        calls = self.calls
        n = len(calls)
        while self.started < n:
            if self._aborted():
                return  # noqa: ASYNC910  # private: the scheduler around it checkpoints
            if not self._parallel(calls[self.started]):
                self._start(calls[self.started], nursery)
                self._commit_ready()
                while self.committed < self.started:
                    if self._aborted():
                        return
                    await self._wait()
                    self._commit_ready()
                continue
            cap = self.registry.max_parallel_tool_calls
            while True:
                while (
                    self.started < n
                    and self.in_flight < cap
                    and not self._aborted()
                    and self._parallel(calls[self.started])
                ):
                    self._start(calls[self.started], nursery)
                    self._commit_ready()
                if self._aborted():
                    return
                group_open = self.started < n and self._parallel(calls[self.started])
                if not group_open and self.committed == self.started:
                    break
                await self._wait()
                self._commit_ready()

    async def _wait(self) -> None:
        await self.changed.wait()
        self.changed = trio.Event()

    def _prepare(self, call: _Call) -> None:
        if call.prepared:
            return
        call.prepared = True
        block = call.block
        found = self.registry.get(block.name)
        if found is None:
            call.rejected = error_outcome(
                f"Error: unknown tool {clip(repr(block.name), 120)}",
                ToolErrorInfo("UnknownToolError", "UNKNOWN_TOOL"),
            )
            return
        call.tool = found
        # The arguments are the model's text: whatever is wrong with them (not JSON,
        # too deep, not matching the signature, or a check that fails outright) is
        # an INVALID_ARGS result for the model, never a failure of the step.
        try:
            call.kwargs = found._arguments.convert(
                parse_arguments(block.arguments, found.name), found.name
            )
        except ToolArgumentsError as exc:
            call.rejected = error_outcome(
                f"Error: invalid arguments for tool {found.name!r}: {exc}",
                _INVALID_ARGS,
            )
        except Exception as exc:
            call.rejected = error_outcome(
                f"Error: invalid arguments for tool {found.name!r}: checking them "
                f"failed with {type(exc).__name__}: {clip(str(exc), 200)}",
                _INVALID_ARGS,
            )

    def _parallel(self, call: _Call) -> bool:
        self._prepare(call)
        return (
            call.rejected is None and call.tool is not None and call.tool.parallel_safe
        )

    def _append_call(self, call: _Call) -> None:
        event = append_call(self.agent.session, self.turn, self.step, call.block)
        call.call_seq = event.seq
        self.started += 1

    def _start(self, call: _Call, nursery: trio.Nursery | None) -> None:
        """Append the call's ``tool/call`` and start its body in ``nursery``.

        A refused call is settled at once. With no nursery the caller runs the body.
        """
        self._prepare(call)
        self._append_call(call)
        if call.rejected is not None or call.tool is None:
            call.outcome = call.rejected
            call.settled = True
            return
        self.in_flight += 1
        if nursery is not None:
            nursery.start_soon(
                self._body,
                call,
                call.tool,
                self._context(call),
                name=f"tool {call.tool.name} ({call.block.id})",
            )

    def _context(self, call: _Call) -> ToolContext:
        return ToolContext(
            agent=self.agent,
            call_id=call.block.id,
            signal=self.signal,
            turn=self.turn,
            step=self.step,
        )

    def _given(self, call: _Call, ctx: ToolContext | None) -> ToolContext:
        """``ctx``, or for a body given none, a fresh context (nothing deferred)."""
        return self._context(call) if ctx is None else ctx

    async def _body(self, call: _Call, tool: Tool, ctx: ToolContext) -> None:
        try:
            call.outcome = await invoke(tool, ctx, call.kwargs)
        except BaseException as exc:
            self._broken(call, tool, ctx, exc)
            raise
        finally:
            ctx._close()
            call.settled = True
            self.in_flight -= 1
            self.changed.set()

    def _broken(
        self, call: _Call, tool: Tool, ctx: ToolContext, exc: BaseException
    ) -> None:
        """Settle ``call``, whose body escaped with ``exc`` (a ``BaseException``)."""
        if _cancellation_only(exc):
            call.outcome = aborted(ctx.deferred)
        else:
            call.outcome = crashed(tool.name, exc, ctx.deferred)
            self.failed = True

    # ------------------------------------------------------------------ committing

    def _commit_ready(self, cancelled: bool | None = None) -> None:
        calls = self.calls
        while (
            not self.failed
            and self.committed < self.started
            and calls[self.committed].settled
        ):
            self._commit(calls[self.committed], cancelled)

    def _commit(self, call: _Call, cancelled: bool | None = None) -> None:
        """Append ``call``'s result; ``cancelled`` is :meth:`_cancelled` if known."""
        outcome = call.outcome if call.outcome is not None else aborted(())
        if not outcome.is_error and (
            self._cancelled() if cancelled is None else cancelled
        ):
            # A body that finished after the abort: its work is not reported as done.
            outcome = aborted(outcome.contexts)
        self._append_result(call, outcome)
        self.committed += 1
        inbox = self.agent.inbox
        for message in outcome.contexts:
            inbox.append(InboxTarget.NEXT_STEP, message)
        if outcome.concluded:
            self.concluded = True

    def _append_result(self, call: _Call, outcome: Outcome) -> None:
        append_result(
            self.agent.session,
            self.turn,
            self.step,
            call.block.id,
            call.call_seq,
            outcome,
            outcome.checked and outcome.error is None and self._safe_position(call),
        )

    def _safe_position(self, call: _Call) -> bool:
        """Whether the turn and step are safe ints and the call has its ``tool/call``."""
        turn, step = self.turn, self.step
        return (
            turn.__class__ is int
            and step.__class__ is int
            and 0 <= turn <= MAX_SAFE_INTEGER
            and 0 <= step <= MAX_SAFE_INTEGER
            and call.call_seq.__class__ is int
            and call.call_seq >= 0
        )

    def _close_out_after_failure(self) -> None:
        """After a failure: :meth:`_close_out`, unless the session refuses the appends.

        The failure that got here propagates either way; a second one from the close
        out (the session refusing, e.g. the append that failed in the first place) is
        logged, not raised over it. The driver answers what is still unanswered.
        """
        try:
            self._close_out()
        except Exception:
            logger.warning(
                "agent %s: turn %d step %d: could not record results for every "
                "tool call after a failure",
                self.agent.id,
                self.turn,
                self.step,
                exc_info=True,
            )

    def _close_out(self) -> None:
        """After an abort: commit every started call, then skip the rest (synchronous)."""
        calls = self.calls
        while self.committed < self.started:
            self._commit(calls[self.committed])
        for call in calls[self.started :]:
            self._append_call(call)
            self._append_result(call, skipped())
            self.committed += 1


def execute_tool_calls(
    registry: ToolRegistry,
    agent: Agent,
    *,
    turn: int,
    step: int,
    calls: Sequence[ToolCallBlock],
    signal: CancelSignal,
) -> Awaitable[bool]:
    """The run of the tool calls of one assistant message against ``registry``.

    Synchronous: returns the awaitable of the run itself (awaiting it is what
    :meth:`ToolRegistry.execute` does), so no frame of its own stays suspended
    while the calls run.
    """
    run = _Run(
        registry=registry,
        agent=agent,
        turn=turn,
        step=step,
        signal=signal,
        calls=[_Call(block) for block in calls],
    )
    return run.run()
