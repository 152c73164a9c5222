"""Tool definitions: the ``@tool`` decorator, ``Tool``, ``ToolContext`` and ``ToolResult``."""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, overload

import attrs

from ..errors import DuplicateMessageError, InvalidSpliceError, ToolDefinitionError
from ..values import (
    ContentBlock,
    ImageBlock,
    JsonValue,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    UserMessage,
    check_json,
    to_json,
)
from ._arguments import ArgumentsSpec, ObjectArguments
from ._schema import compile_parameter

if TYPE_CHECKING:
    from ..loop import Agent, CancelSignal

__all__ = ["Tool", "ToolBody", "ToolContext", "ToolResult", "ToolReturn", "tool"]

_BLOCK_TYPES = (TextBlock, ReasoningBlock, ImageBlock, ToolCallBlock, ToolResultBlock)
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _to_content(
    value: str | ContentBlock | Sequence[ContentBlock],
) -> tuple[ContentBlock, ...]:
    """Normalise tool output content: text → one text block, a block → a 1-tuple."""
    if isinstance(value, str):
        return (TextBlock(value),)
    if isinstance(value, _BLOCK_TYPES):
        return (value,)
    if isinstance(value, (list, tuple)):
        for i, block in enumerate(value):
            if not isinstance(block, _BLOCK_TYPES):
                raise TypeError(
                    f"content[{i}] must be a content block, got {type(block).__name__}"
                )
        return tuple(value)
    raise TypeError(
        f"content must be text, a content block or a sequence of content blocks, got {type(value).__name__}"
    )


@attrs.frozen
class ToolResult:
    """What a tool returns when plain text or blocks are not enough.

    Example::

        @tool
        async def lookup(ctx: ToolContext, key: str) -> ToolResult:
            \"\"\"Look a key up.\"\"\"
            if key not in TABLE:
                return ToolResult(f"no such key: {key}", is_error=True)
            return ToolResult(TABLE[key], meta={"hits": 1})

    Args:
        content: text (one text block), one content block, or a sequence of blocks.
        is_error: whether the model should read the result as a failure.
        meta: JSON facts for the session log (``tool/result`` ``meta``); never sent
            to the model.

    Raises:
        TypeError: ``content`` is none of the accepted shapes.
    """

    content: tuple[ContentBlock, ...] = attrs.field(converter=_to_content)
    is_error: bool = False
    meta: JsonValue = attrs.field(default=None, hash=False)


ToolReturn: TypeAlias = str | ContentBlock | Sequence[ContentBlock] | ToolResult
ToolBody: TypeAlias = Callable[..., Awaitable[Any]]


@attrs.define(eq=False)
class ToolContext:
    """Per-call facts and levers a tool body receives as its first argument.

    One context exists per call. Its methods are synchronous and never block; they
    may be called only while the call's body runs (afterwards they raise
    :class:`RuntimeError`).

    Attributes:
        agent: the agent whose model made the call.
        call_id: the id of the call (the model's tool-call id).
        signal: the turn's :class:`CancelSignal`; ``signal.cause`` says why the body
            was cancelled. Bodies need not poll it: what they await raises
            :class:`trio.Cancelled` once the turn is cancelled.
        turn: the turn the call belongs to.
        step: the step the call belongs to.
    """

    agent: Agent
    call_id: str
    signal: CancelSignal
    turn: int = 0
    step: int = 0
    _concluded: bool = attrs.field(default=False, init=False)
    _deferred: list[UserMessage] = attrs.field(factory=list, init=False)
    _closed: bool = attrs.field(default=False, init=False)

    @property
    def concludes_turn(self) -> bool:
        """Whether :meth:`conclude_turn` was called."""
        return self._concluded

    @property
    def deferred(self) -> tuple[UserMessage, ...]:
        """The messages given to :meth:`defer_context`, in order."""
        return tuple(self._deferred)

    def conclude_turn(self) -> None:
        """Ask that the turn end after this step instead of sending results back.

        Takes effect only if the call's result is a success. The turn still runs
        another step when the agent's next-step inbox holds anything then (steering,
        injected context, or contexts deferred by the step's calls).
        """
        self._check_open("conclude_turn")
        self._concluded = True

    def defer_context(self, message: UserMessage) -> None:
        """Queue ``message`` for the agent's next step, after this call's result.

        The message is accepted into the ``next-step`` inbox (a durable splice) once
        this call's ``tool/result`` is committed, in model call order; it reaches the
        model as a user message at the next step boundary.

        Raises:
            InvalidSpliceError: ``message`` is not a JSON-serialisable UserMessage.
            DuplicateMessageError: its id is already deferred by this call or
                pending in the agent's inbox.
        """
        self._check_open("defer_context")
        if type(message) is not UserMessage:
            raise InvalidSpliceError(
                f"defer_context takes a UserMessage, got {type(message).__name__}"
            )
        try:
            check_json(to_json(message), f"message {message.id!r}")
        except TypeError as exc:
            raise InvalidSpliceError(
                f"message {message.id!r} is not JSON-serialisable: {exc}"
            ) from exc
        if any(m.id == message.id for m in self._deferred):
            raise DuplicateMessageError(message.id)
        inbox = getattr(self.agent, "inbox", None)
        if inbox is not None and any(
            m.id == message.id for m in (*inbox.next_turn, *inbox.next_step)
        ):
            raise DuplicateMessageError(message.id)
        self._deferred.append(message)

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise RuntimeError(
                f"ToolContext.{what}() called after call {self.call_id!r} finished"
            )

    def _close(self) -> None:
        self._closed = True


@attrs.frozen(kw_only=True, eq=False)
class Tool:
    """A tool the model can call: its model-facing schema and its async body.

    Made by :func:`tool`; register it with :meth:`ToolRegistry.register` or pass it
    to ``open_runtime(tools=...)``. Calling the tool object calls the body directly
    (``await my_tool(ctx, path="x")``), bypassing argument validation.

    Attributes:
        name: the name the model calls it by.
        description: the model-facing description.
        parameters: the JSON schema of the arguments object.
        parallel_safe: whether calls may run concurrently with other parallel-safe
            calls of the same step.
        fn: the body.
    """

    name: str
    description: str
    parameters: dict[str, JsonValue]
    parallel_safe: bool
    fn: ToolBody
    _arguments: ArgumentsSpec | ObjectArguments = attrs.field(repr=False)
    _takes_context: bool = attrs.field(repr=False)

    @classmethod
    def from_json_schema(
        cls,
        name: str,
        parameters: Mapping[str, JsonValue],
        fn: Callable[[ToolContext, dict[str, JsonValue]], Awaitable[ToolReturn]],
        *,
        description: str = "",
        parallel_safe: bool = False,
    ) -> Tool:
        """A tool whose arguments schema is given as JSON schema, not derived from a signature.

        For tools described elsewhere (an MCP server's, a schema from a file). The
        schema reaches the model as given (a private copy). The body is called as
        ``await fn(ctx, arguments=...)`` with the model's arguments as one JSON
        object, checked only for being an object (anything else is an
        ``INVALID_ARGS`` error result): checking them against the schema is the
        body's part. It returns what a ``@tool`` body returns.

        Example::

            async def weather(ctx: ToolContext, arguments: dict[str, JsonValue]) -> str:
                return await lookup(arguments["city"])

            forecast = Tool.from_json_schema(
                "weather",
                {"type": "object", "properties": {"city": {"type": "string"}},
                 "required": ["city"]},
                weather,
                description="The weather in a city.",
            )

        Args:
            name: the tool name: 1-64 letters, digits, ``_`` or ``-``.
            parameters: the JSON schema of the arguments object.
            fn: the ``async def`` body, taking the context and ``arguments``.
            description: the model-facing description.
            parallel_safe: whether calls may run concurrently with other
                parallel-safe calls of the same step.

        Raises:
            ToolDefinitionError: the name is not 1-64 letters, digits, ``_`` or
                ``-``, ``parameters`` is not a JSON object, ``fn`` is not an
                ``async def`` function, or ``description`` is not text.
        """
        label = f"tool {name!r}"
        if not _is_name(name):
            raise ToolDefinitionError(
                f"{label}: the name must be 1-64 letters, digits, '_' or '-'"
            )
        if not inspect.iscoroutinefunction(fn):
            raise ToolDefinitionError(
                f"{label}: the body must be an async def function"
            )
        if not isinstance(description, str):
            raise ToolDefinitionError(
                f"{label}: description must be a str, got {type(description).__name__}"
            )
        if not isinstance(parallel_safe, bool):
            raise ToolDefinitionError(
                f"{label}: parallel_safe must be a bool, got {parallel_safe!r}"
            )
        if not isinstance(parameters, Mapping):
            raise ToolDefinitionError(
                f"{label}: parameters must be a JSON schema object, got {type(parameters).__name__}"
            )
        try:
            schema = check_json(dict(parameters), "parameters")
        except TypeError as exc:
            raise ToolDefinitionError(f"{label}: {exc}") from None
        assert isinstance(schema, dict)
        return cls(
            name=name,
            description=description,
            parameters=schema,
            parallel_safe=parallel_safe,
            fn=fn,
            arguments=ObjectArguments(),
            takes_context=True,
        )

    @property
    def schema(self) -> dict[str, JsonValue]:
        """``{"name", "description", "parameters"}``: what a model request carries."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
        }

    def __call__(self, *args: Any, **kwargs: Any) -> Awaitable[Any]:
        return self.fn(*args, **kwargs)


@overload
def tool(fn: ToolBody, /) -> Tool: ...


@overload
def tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    parallel_safe: bool = False,
    description: str | None = None,
) -> Callable[[ToolBody], Tool]: ...


def tool(
    fn: ToolBody | None = None,
    /,
    *,
    name: str | None = None,
    parallel_safe: bool = False,
    description: str | None = None,
) -> Tool | Callable[[ToolBody], Tool]:
    """Turn an ``async def`` function into a :class:`Tool`.

    Usable bare (``@tool``) or with options (``@tool(parallel_safe=True)``). The body
    takes a :class:`ToolContext` as its first parameter (optional: a body without
    one gets none), then the model-facing parameters. Their annotations give the
    JSON schema: ``str``, ``int``, ``float``, ``bool``, ``None``, ``list[X]``,
    ``tuple[X, ...]``, ``dict[str, X]``, ``Literal[...]``, unions such as
    ``X | None``, and attrs classes (objects with their init fields as properties);
    ``Annotated[X, "text"]`` adds a property description. Parameters with a default
    are optional. The body returns text, a content block, a sequence of blocks, or
    a :class:`ToolResult`; an exception it raises becomes an error result.

    A call's arguments are the model's text, checked before the body runs: JSON
    whose arrays and objects nest at most 64 levels deep, integers of at most 4300
    digits, finite numbers, no lone surrogates, and then the signature. Anything
    else is an ``INVALID_ARGS`` error result saying what was wrong; the body does
    not run.

    Example::

        @tool(parallel_safe=True)
        async def read_file(ctx: ToolContext, path: str, limit: int = 100) -> str:
            \"\"\"Read a text file.\"\"\"
            ...

    Args:
        fn: the body (when used bare).
        name: the tool name; ``fn.__name__`` by default.
        parallel_safe: whether calls may run concurrently with other parallel-safe
            calls of the same step.
        description: the model-facing description; the cleaned docstring by default.

    Raises:
        ToolDefinitionError: the function is not ``async def``, the name is not
            1-64 letters, digits, ``_`` or ``-``, or a parameter cannot be described.
    """

    def decorate(body: ToolBody) -> Tool:
        return _make_tool(
            body, name=name, parallel_safe=parallel_safe, description=description
        )

    if fn is None:
        return decorate
    return decorate(fn)


def _make_tool(
    fn: ToolBody, *, name: str | None, parallel_safe: bool, description: str | None
) -> Tool:
    label = getattr(fn, "__qualname__", None) or repr(fn)
    if not inspect.iscoroutinefunction(fn):
        raise ToolDefinitionError(
            f"tool {label}: the body must be an async def function"
        )
    tool_name = name if name is not None else getattr(fn, "__name__", "")
    if not isinstance(tool_name, str) or not _NAME.fullmatch(tool_name):
        raise ToolDefinitionError(
            f"tool {label}: name {tool_name!r} must be 1-64 letters, digits, '_' or '-'"
        )
    if not isinstance(parallel_safe, bool):
        raise ToolDefinitionError(
            f"tool {tool_name!r}: parallel_safe must be a bool, got {parallel_safe!r}"
        )
    if description is None:
        doc = fn.__doc__
        description = inspect.cleandoc(doc) if doc else ""
    elif not isinstance(description, str):
        raise ToolDefinitionError(
            f"tool {tool_name!r}: description must be a str, got {type(description).__name__}"
        )
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:  # any resolution failure is a definition error
        raise ToolDefinitionError(
            f"tool {tool_name!r}: cannot resolve its annotations: {exc}"
        ) from exc
    spec, takes_context = _compile_signature(fn, tool_name, hints)
    return Tool(
        name=tool_name,
        description=description,
        parameters=spec.schema(),
        parallel_safe=parallel_safe,
        fn=fn,
        arguments=spec,
        takes_context=takes_context,
    )


def _compile_signature(
    fn: ToolBody, tool_name: str, hints: dict[str, Any]
) -> tuple[ArgumentsSpec, bool]:
    """The argument list of ``fn``, and whether it takes a leading ``ToolContext``."""
    params = list(inspect.signature(fn).parameters.values())
    takes_context = bool(params) and _is_context(hints.get(params[0].name))
    fields = []
    for param in params[1:] if takes_context else params:
        where = f"tool {tool_name!r}, parameter {param.name!r}"
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolDefinitionError(
                f"{where}: *args and **kwargs cannot be described as JSON properties"
            )
        if param.kind is param.POSITIONAL_ONLY:
            raise ToolDefinitionError(
                f"{where}: positional-only parameters cannot receive JSON properties"
            )
        if param.name not in hints:
            raise ToolDefinitionError(f"{where}: needs a type annotation")
        if _is_context(hints[param.name]):
            raise ToolDefinitionError(
                f"{where}: the ToolContext parameter must come first"
            )
        fields.append(
            compile_parameter(param.name, hints[param.name], param.default, where)
        )
    spec = ArgumentsSpec(tuple(fields))
    return spec, takes_context


def _is_name(name: object) -> bool:
    """Whether ``name`` is a tool name: 1-64 letters, digits, ``_`` or ``-``."""
    return isinstance(name, str) and _NAME.fullmatch(name) is not None


def _is_context(annotation: object) -> bool:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation is ToolContext
