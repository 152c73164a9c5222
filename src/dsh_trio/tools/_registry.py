"""The tool registry and the step's call scheduler.

The scheduler runs the tool calls of one committed assistant message. Calls are
taken in model order and grouped: a run of parallel-safe calls forms a group whose
bodies overlap in a bounded pool; any other call (exclusive, unknown, or with
invalid arguments) is a barrier of its own. ``tool/call`` is appended when a call
starts; ``tool/result`` events are committed strictly in model order, each followed
by the contexts its call deferred. A cancelled turn still closes every call it
started, and gives each unstarted call a skipped pair.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import attrs
import trio

from ..errors import AgentCancelled, ToolArgumentsError, ToolDefinitionError
from ..values import (
    ContentBlock,
    DataShapeError,
    InboxTarget,
    JsonValue,
    TextBlock,
    ToolCallBlock,
    ToolCallData,
    ToolErrorInfo,
    ToolResultBlock,
    ToolResultData,
    ToolSource,
    UserMessage,
    check_json,
    check_typed,
    new_message_id,
)
from ._schema import parse_arguments
from ._tool import Tool, ToolContext, ToolResult, _to_content

if TYPE_CHECKING:
    from ..loop import Agent, CancelSignal

__all__ = ["ToolRegistry", "execute_tool_calls"]

_ABORTED_TEXT = "Error: tool call aborted"
_SKIPPED_TEXT = "Error: tool call aborted before dispatch"
_ABORTED_INFO = ToolErrorInfo("AbortError", "ABORTED")
_SKIPPED_INFO = ToolErrorInfo("AbortError", "ABORTED_BEFORE_DISPATCH")


# --------------------------------------------------------------------------- outcomes


@attrs.frozen
class _Outcome:
    """A settled call, before it is committed."""

    content: tuple[ContentBlock, ...]
    is_error: bool
    error: ToolErrorInfo | None = None
    meta: JsonValue = attrs.field(default=None, hash=False)
    contexts: tuple[UserMessage, ...] = ()
    concluded: bool = False


def _error(
    text: str, info: ToolErrorInfo | None, contexts: tuple[UserMessage, ...] = ()
) -> _Outcome:
    return _Outcome(
        content=(TextBlock(text),), is_error=True, error=info, contexts=contexts
    )


def _aborted(contexts: tuple[UserMessage, ...]) -> _Outcome:
    return _error(_ABORTED_TEXT, _ABORTED_INFO, contexts)


def _failure(exc: Exception, contexts: tuple[UserMessage, ...]) -> _Outcome:
    code = getattr(exc, "code", None)
    text = str(exc) or type(exc).__name__
    return _error(
        f"Error: {text}",
        ToolErrorInfo(
            type(exc).__name__, code if isinstance(code, str) and code else "TOOL_ERROR"
        ),
        contexts,
    )


def _invalid_output(
    tool: Tool, why: str, contexts: tuple[UserMessage, ...]
) -> _Outcome:
    return _error(
        f"Error: tool {tool.name!r} returned an invalid result: {why}",
        ToolErrorInfo("ToolOutputError", "INVALID_TOOL_OUTPUT"),
        contexts,
    )


def _settle(tool: Tool, ctx: ToolContext, value: object) -> _Outcome:
    """Turn what a body returned into an outcome (invalid output → an error outcome)."""
    contexts = ctx.deferred
    meta: JsonValue = None
    is_error = False
    try:
        if isinstance(value, ToolResult):
            content, is_error = value.content, value.is_error
            if type(is_error) is not bool:
                raise TypeError(f"ToolResult.is_error must be a bool, got {is_error!r}")
            meta = check_json(value.meta, "meta")
        else:
            content = _to_content(value)  # type: ignore[arg-type]
        check_typed(ToolResultBlock, ToolResultBlock(ctx.call_id, content, is_error))
    except TypeError as exc:
        return _invalid_output(tool, str(exc), contexts)
    except DataShapeError as exc:
        return _invalid_output(tool, exc.describe("result"), contexts)
    return _Outcome(
        content=content,
        is_error=is_error,
        meta=meta,
        contexts=contexts,
        concluded=ctx.concludes_turn and not is_error,
    )


async def _invoke(tool: Tool, ctx: ToolContext, kwargs: dict[str, object]) -> _Outcome:
    """Run the body of one call; every ``Exception`` it raises becomes an error outcome."""
    try:
        if tool._takes_context:
            value = await tool.fn(ctx, **kwargs)
        else:
            value = await tool.fn(**kwargs)
    except AgentCancelled as exc:
        if ctx.signal.cancelled:
            return _aborted(ctx.deferred)  # noqa: ASYNC910  # private: the scheduler around it checkpoints
        return _failure(exc, ctx.deferred)  # noqa: ASYNC910  # private: the scheduler around it checkpoints
    except Exception as exc:  # a failing body is a result, not a crash
        return _failure(exc, ctx.deferred)  # noqa: ASYNC910  # private: the scheduler around it checkpoints
    return _settle(tool, ctx, value)


def _cancellation_only(exc: BaseException) -> bool:
    """Whether ``exc`` is a ``Cancelled``, or a group holding nothing else."""
    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return all(_cancellation_only(e) for e in exc.exceptions)
    return False


def _failures(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, trio.Cancelled):
        return []
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in _failures(e)]
    return [exc]


# --------------------------------------------------------------------------- one run


@attrs.define(eq=False)
class _Call:
    """The scheduling state of one call."""

    block: ToolCallBlock
    prepared: bool = False
    tool: Tool | None = None
    kwargs: dict[str, object] = attrs.field(factory=dict)
    rejected: _Outcome | None = None  # unknown tool or invalid arguments: no body runs
    call_seq: int = -1
    settled: bool = False
    outcome: _Outcome | None = None


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
    # A body escaped with a BaseException: start and commit nothing more.
    failed: bool = False
    changed: trio.Event = attrs.field(factory=trio.Event)

    async def run(self) -> bool:
        cancelled: BaseExceptionGroup[BaseException] | None = None
        try:
            async with trio.open_nursery() as nursery:
                await self._schedule(nursery)
        except BaseExceptionGroup as group:
            if not _cancellation_only(group):
                failures = _failures(group)
                if len(failures) == 1:
                    raise failures[0] from None
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

    # ------------------------------------------------------------------ scheduling

    def _aborted(self) -> bool:
        # The turn's signal, or any enclosing cancellation (the owner shutting down);
        # after a failure, the nursery's own cancellation also stops the scheduler.
        return (
            self.failed
            or self.signal.cancelled
            or trio.current_effective_deadline() == -math.inf
        )

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
            call.rejected = _error(
                f"Error: unknown tool {block.name!r}",
                ToolErrorInfo("UnknownToolError", "UNKNOWN_TOOL"),
            )
            return
        call.tool = found
        try:
            call.kwargs = found._arguments.convert(
                parse_arguments(block.arguments, found.name), found.name
            )
        except ToolArgumentsError as exc:
            call.rejected = _error(
                f"Error: invalid arguments for tool {found.name!r}: {exc}",
                ToolErrorInfo("ToolArgumentsError", "INVALID_ARGS"),
            )

    def _parallel(self, call: _Call) -> bool:
        self._prepare(call)
        return (
            call.rejected is None and call.tool is not None and call.tool.parallel_safe
        )

    def _append_call(self, call: _Call) -> None:
        block = call.block
        event = self.agent.session.append(
            "tool/call",
            ToolCallData(
                turn=self.turn,
                step=self.step,
                call_id=block.id,
                name=block.name,
                arguments=block.arguments,
            ),
        )
        call.call_seq = event.seq
        self.started += 1

    def _start(self, call: _Call, nursery: trio.Nursery) -> None:
        self._prepare(call)
        self._append_call(call)
        if call.rejected is not None or call.tool is None:
            call.outcome = call.rejected
            call.settled = True
            return
        ctx = ToolContext(
            agent=self.agent,
            call_id=call.block.id,
            signal=self.signal,
            turn=self.turn,
            step=self.step,
        )
        self.in_flight += 1
        nursery.start_soon(
            self._body,
            call,
            call.tool,
            ctx,
            name=f"tool {call.tool.name} ({call.block.id})",
        )

    async def _body(self, call: _Call, tool: Tool, ctx: ToolContext) -> None:
        try:
            call.outcome = await _invoke(tool, ctx, call.kwargs)
        except BaseException as exc:
            if _cancellation_only(exc):
                call.outcome = _aborted(ctx.deferred)
            else:
                self.failed = True
            raise
        finally:
            ctx._close()
            call.settled = True
            self.in_flight -= 1
            self.changed.set()

    # ------------------------------------------------------------------ committing

    def _commit_ready(self) -> None:
        calls = self.calls
        while (
            not self.failed
            and self.committed < self.started
            and calls[self.committed].settled
        ):
            self._commit(calls[self.committed])

    def _commit(self, call: _Call) -> None:
        outcome = call.outcome if call.outcome is not None else _aborted(())
        if not outcome.is_error and self._aborted():
            # A body that finished after the abort: its work is not reported as done.
            outcome = _aborted(outcome.contexts)
        self._append_result(call, outcome)
        self.committed += 1
        inbox = self.agent.inbox
        for message in outcome.contexts:
            inbox.append(InboxTarget.NEXT_STEP, message)
        if outcome.concluded:
            self.concluded = True

    def _append_result(self, call: _Call, outcome: _Outcome) -> None:
        call_id = call.block.id
        self.agent.session.append(
            "tool/result",
            ToolResultData(
                turn=self.turn,
                step=self.step,
                message=UserMessage(
                    id=new_message_id(),
                    content=(
                        ToolResultBlock(
                            call_id, outcome.content, is_error=outcome.is_error
                        ),
                    ),
                    source=ToolSource(call_id),
                ),
                error=outcome.error,
                meta=outcome.meta,
            ),
            surface_op="append",
            source_event_seqs=(call.call_seq,),
        )

    def _close_out(self) -> None:
        """After an abort: commit every started call, then skip the rest (synchronous)."""
        calls = self.calls
        while self.committed < self.started:
            self._commit(calls[self.committed])
        for call in calls[self.started :]:
            self._append_call(call)
            self._append_result(call, _error(_SKIPPED_TEXT, _SKIPPED_INFO))
            self.committed += 1


async def execute_tool_calls(
    registry: ToolRegistry,
    agent: Agent,
    *,
    turn: int,
    step: int,
    calls: Sequence[ToolCallBlock],
    signal: CancelSignal,
) -> bool:
    """Run the tool calls of one assistant message against ``registry``.

    See :meth:`ToolRegistry.execute`.
    """
    run = _Run(
        registry=registry,
        agent=agent,
        turn=turn,
        step=step,
        signal=signal,
        calls=[_Call(block) for block in calls],
    )
    return await run.run()


# --------------------------------------------------------------------------- registry


def _check_cap(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"max_parallel_tool_calls must be a positive int, got {value!r}"
        )
    return value


class ToolRegistry:
    """The tools a runtime offers, and the scheduler that runs their calls.

    Registration is synchronous. The schemas a request carries are sorted by tool
    name, so registration order never reaches the model.

    Example::

        registry = ToolRegistry(max_parallel_tool_calls=4)
        unregister = registry.register(read_file)
        ...
        unregister()

    Args:
        max_parallel_tool_calls: how many parallel-safe bodies may run at once.

    Raises:
        ValueError: ``max_parallel_tool_calls`` is not a positive int.
    """

    __slots__ = ("_max_parallel", "_schemas", "_tools")

    def __init__(self, max_parallel_tool_calls: int = 10) -> None:
        self._max_parallel = _check_cap(max_parallel_tool_calls)
        self._tools: dict[str, Tool] = {}
        self._schemas: tuple[JsonValue, ...] | None = None

    def __repr__(self) -> str:
        return f"<ToolRegistry tools={list(self.names())} max_parallel_tool_calls={self._max_parallel}>"

    @property
    def max_parallel_tool_calls(self) -> int:
        """The bound of the parallel pool; read when each parallel group starts."""
        return self._max_parallel

    @max_parallel_tool_calls.setter
    def max_parallel_tool_calls(self, value: int) -> None:
        self._max_parallel = _check_cap(value)

    @trio.lowlevel.enable_ki_protection
    def register(self, tool: Tool) -> Callable[[], None]:
        """Make ``tool`` callable by models; return its disposer.

        Synchronous. The disposer removes the tool if it is still the one
        registered under its name; calling it again does nothing.

        Raises:
            ToolDefinitionError: ``tool`` is not a :class:`Tool` (decorate the
                function with ``@tool``), or its name is taken.
        """
        if not isinstance(tool, Tool):
            raise ToolDefinitionError(
                f"expected a Tool (decorate the function with @tool), got {tool!r:.80}"
            )
        if tool.name in self._tools:
            raise ToolDefinitionError(
                f"a tool named {tool.name!r} is already registered"
            )
        self._tools[tool.name] = tool
        self._schemas = None

        @trio.lowlevel.enable_ki_protection
        def unregister() -> None:
            if self._tools.get(tool.name) is tool:
                del self._tools[tool.name]
                self._schemas = None

        return unregister

    def get(self, name: str) -> Tool | None:
        """The tool registered under ``name``, or ``None``."""
        return self._tools.get(name)

    def names(self) -> tuple[str, ...]:
        """The registered tool names, sorted."""
        return tuple(sorted(self._tools))

    def schemas(self, agent: Agent) -> tuple[JsonValue, ...]:
        """The JSON schemas of the tools visible to ``agent``, sorted by name."""
        schemas = self._schemas
        if schemas is None:
            schemas = self._schemas = tuple(
                self._tools[name].schema for name in sorted(self._tools)
            )
        return schemas

    async def execute(
        self,
        agent: Agent,
        *,
        turn: int,
        step: int,
        calls: Sequence[ToolCallBlock],
        signal: CancelSignal,
    ) -> bool:
        """Run the calls of one assistant message, logging ``tool/call``/``tool/result``.

        Blocks until every call has its result. Calls run in model order: a run of
        parallel-safe calls overlaps in a pool of at most ``max_parallel_tool_calls``
        bodies; any other call runs alone. ``tool/call`` is appended as a call
        starts, results are committed in model order, and the contexts a call
        deferred enter the agent's next-step inbox right after its result. An
        unknown tool, invalid arguments or a failing body yield error results.

        Cancellation: when the turn is cancelled, running bodies are cancelled;
        each started call still gets a result (``ABORTED``, or its error), each
        unstarted call gets a ``tool/call`` plus an ``ABORTED_BEFORE_DISPATCH``
        result, and then :class:`trio.Cancelled` propagates.

        Returns:
            True if a call's successful result concluded the turn.
        """
        return await execute_tool_calls(
            self, agent, turn=turn, step=step, calls=calls, signal=signal
        )
