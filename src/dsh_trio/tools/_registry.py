"""The tool registry: the tools a runtime offers, by name."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import trio

from ..errors import ToolDefinitionError
from ..values import JsonValue, ToolCallBlock
from ._scheduler import execute_tool_calls
from ._tool import Tool

if TYPE_CHECKING:
    from ..loop import Agent, CancelSignal

__all__ = ["ToolRegistry"]


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

    A registry made with ``base=`` layers its own tools over the base's (a preset
    generation over the runtime's): lookups and schemas see both, its own tools
    shadow base tools of the same name, and the parallel bound is the base's.

    Args:
        max_parallel_tool_calls: how many parallel-safe bodies may run at once.
        base: a registry whose tools this one also offers.

    Raises:
        ValueError: ``max_parallel_tool_calls`` is not a positive int.
    """

    __slots__ = ("_base", "_base_schemas", "_max_parallel", "_schemas", "_tools")

    def __init__(
        self, max_parallel_tool_calls: int = 10, *, base: ToolRegistry | None = None
    ) -> None:
        self._max_parallel = _check_cap(max_parallel_tool_calls)
        self._tools: dict[str, Tool] = {}
        self._schemas: tuple[JsonValue, ...] | None = None
        self._base = base
        # The base's schemas the merged ``_schemas`` were built from.
        self._base_schemas: tuple[JsonValue, ...] | None = None

    def __repr__(self) -> str:
        return f"<ToolRegistry tools={list(self.names())} max_parallel_tool_calls={self._max_parallel}>"

    @property
    def max_parallel_tool_calls(self) -> int:
        """The bound of the parallel pool; read when each parallel group starts."""
        if self._base is not None:
            return self._base.max_parallel_tool_calls
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
        """The tool registered under ``name`` (here, else in the base), or ``None``."""
        found = self._tools.get(name)
        if found is None and self._base is not None:
            return self._base.get(name)
        return found

    def names(self) -> tuple[str, ...]:
        """The registered tool names (the base's too), sorted."""
        if self._base is None:
            return tuple(sorted(self._tools))
        return tuple(sorted({*self._tools, *self._base.names()}))

    def schemas(self, agent: Agent) -> tuple[JsonValue, ...]:
        """The JSON schemas of the tools visible to ``agent``, sorted by name."""
        base = self._base
        if base is None:
            schemas = self._schemas
            if schemas is None:
                schemas = self._schemas = tuple(
                    self._tools[name].schema for name in sorted(self._tools)
                )
            return schemas
        below = base.schemas(agent)
        if self._schemas is None or self._base_schemas is not below:
            self._base_schemas = below
            self._schemas = tuple(
                tool.schema for tool in (self.get(n) for n in self.names()) if tool
            )
        return self._schemas

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
        unknown tool, invalid arguments (``INVALID_ARGS``: whatever the text, see
        :func:`tool`) or a failing body yield error results.

        Cancellation: when the turn is cancelled, running bodies are cancelled;
        each started call still gets a result (``ABORTED``, or its error), each
        unstarted call gets a ``tool/call`` plus an ``ABORTED_BEFORE_DISPATCH``
        result, and then :class:`trio.Cancelled` propagates. So with a failure: a
        body escaping with a ``BaseException`` gets a ``TOOL_ERROR`` result, the
        other calls as above, and then the exception propagates.

        Returns:
            True if a call's successful result concluded the turn.
        """
        return await execute_tool_calls(
            self, agent, turn=turn, step=step, calls=calls, signal=signal
        )
