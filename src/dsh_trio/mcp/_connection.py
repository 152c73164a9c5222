"""One connection to an MCP server, on the official ``mcp`` SDK (imported here only).

:mod:`._open` imports this module when a server is opened, so importing ``dsh_trio``
never imports the SDK. A :class:`Connection` wraps the SDK's ``Client``: it lists the
server's tools, makes them :class:`~dsh_trio.tools.Tool` values, and runs their calls,
turning what the server answers into tool results and every way a call can fail into
an :class:`~dsh_trio.errors.McpError` (which the tool scheduler records as the call's
error result). Text from the server or its transport that reaches an error passes
through :meth:`Connection.clean`: the connection's header values are redacted.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from os import PathLike
from typing import Final

import httpx2
import mcp_types
import trio
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CONNECTION_CLOSED

from ..errors import McpError, ToolDefinitionError
from ..llm import redact_all, repair_unicode
from ..tools import Tool, ToolContext, ToolResult
from ..values import JsonValue, TextBlock

__all__ = [
    "Connection",
    "client_for_command",
    "client_for_url",
    "describe",
    "http_client",
]

#: The most pages of a tool list read before the server is taken to be looping.
PAGE_CAP: Final = 1000
#: The longest text of an exception an error message quotes.
_QUOTE: Final = 1000
#: The timeouts of an HTTP connection (seconds), the SDK's: a response may take
#: long to start (a tool at work), and an event stream may idle.
_HTTP_TIMEOUT: Final = 30.0
_HTTP_READ_TIMEOUT: Final = 300.0


def client_for_command(
    command: Sequence[str],
    env: Mapping[str, str] | None,
    cwd: str | PathLike[str] | None,
) -> Client:
    """A client that starts ``command`` and speaks MCP over its stdin/stdout."""
    params = StdioServerParameters(
        command=command[0],
        args=list(command[1:]),
        env=dict(env) if env is not None else None,
        cwd=os.fspath(cwd) if cwd is not None else None,
    )
    return Client(params, cache=None)


class _AnsweredTransport(httpx2.AsyncBaseTransport):
    """An HTTP transport whose failed ``POST`` exchanges are answered, not raised.

    The SDK's streamable-HTTP client runs each request's ``POST`` in a task of the
    connection's task group: a ``POST`` that gets no response at all (the server
    died, the connection was refused or reset) would raise there, end the
    connection's task group and cancel the whole ``open_http`` block. Here such a
    failure becomes a ``502`` response carrying a JSON-RPC "connection closed"
    error saying what happened, which the SDK hands to the request's caller: the
    call fails, nothing else does.
    """

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            return await self._inner.handle_async_request(request)
        except httpx2.TransportError as exc:
            if request.method != "POST":
                raise
            error = {"code": CONNECTION_CLOSED, "message": describe(exc)}
            body = {"jsonrpc": "2.0", "id": None, "error": error}
        await trio.lowlevel.checkpoint()
        return httpx2.Response(502, json=body, request=request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def http_client(headers: Mapping[str, str] | None) -> httpx2.AsyncClient:
    """The HTTP client of a streamable-HTTP connection: the SDK's timeouts, ``headers``
    on every request, and failed exchanges answered (see :class:`_AnsweredTransport`)."""
    return httpx2.AsyncClient(
        headers=dict(headers) if headers else None,
        timeout=httpx2.Timeout(_HTTP_TIMEOUT, read=_HTTP_READ_TIMEOUT),
        transport=_AnsweredTransport(httpx2.AsyncHTTPTransport()),
    )


def client_for_url(url: str, client: httpx2.AsyncClient) -> Client:
    """A client that speaks MCP to ``url`` over streamable HTTP, through ``client``."""
    return Client(streamable_http_client(url, http_client=client), cache=None)


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in _leaves(e)]
    return [exc]


def describe(exc: BaseException) -> str:
    """``Type: text`` for each leaf of ``exc`` (a group's leaves joined by ``; ``)."""
    parts = []
    for leaf in _leaves(exc):
        text = str(leaf)
        if len(text) > _QUOTE:
            text = text[:_QUOTE] + "..."
        parts.append(f"{type(leaf).__name__}: {text}" if text else type(leaf).__name__)
    return "; ".join(parts)


def _text(block: object) -> str:
    """A content block as text: text as is, anything else described in brackets.

    Typed ``object``: a kind of block a later SDK adds is described by its type.
    """
    if isinstance(block, mcp_types.TextContent):
        return block.text
    if isinstance(block, mcp_types.ImageContent):
        return f"[image: {block.mime_type}]"
    if isinstance(block, mcp_types.AudioContent):
        return f"[audio: {block.mime_type}]"
    if isinstance(block, mcp_types.ResourceLink):
        return f"[resource link: {block.uri}]"
    if isinstance(block, mcp_types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, mcp_types.TextResourceContents):
            return resource.text
        mime = resource.mime_type or "application/octet-stream"
        return f"[resource: {resource.uri} ({mime})]"
    kind = getattr(block, "type", type(block).__name__)
    return f"[{kind}]"


class Connection:
    """An entered SDK ``Client`` and what calls through it need."""

    __slots__ = ("client", "closed", "label", "secrets")

    def __init__(self, client: Client, label: str, secrets: tuple[str, ...]) -> None:
        self.client = client
        self.label = label
        self.secrets = secrets
        self.closed = False

    def ended(self) -> bool:
        """Whether the server's block has ended (read afresh after an ``await``)."""
        return self.closed

    def clean(self, text: str) -> str:
        """``text`` safe to show: valid Unicode, the connection's secrets redacted."""
        return redact_all(repair_unicode(text), self.secrets)

    async def list_tools(self) -> list[mcp_types.Tool]:
        """Every tool the server lists, following its pages.

        Raises:
            McpError: the listing failed, or did not end after :data:`PAGE_CAP` pages.
        """
        listed: list[mcp_types.Tool] = []
        cursor: str | None = None
        try:
            for _ in range(PAGE_CAP):
                page = await self.client.list_tools(cursor=cursor)
                listed += page.tools
                cursor = page.next_cursor
                if cursor is None:
                    return listed
        except Exception as exc:
            raise McpError(
                self.clean(
                    f"MCP server {self.label}: listing its tools failed: {describe(exc)}"
                ),
                code="MCP_ERROR",
            ) from None
        raise McpError(
            f"MCP server {self.label}: its tool list did not end after {PAGE_CAP} pages",
            code="MCP_ERROR",
        )

    def make_tools(
        self, listed: Sequence[mcp_types.Tool], prefix: str
    ) -> tuple[Tool, ...]:
        """The listed tools as dsh_trio tools named ``prefix + name``.

        Raises:
            ToolDefinitionError: a prefixed name is not 1-64 letters, digits, ``_``
                or ``-``, or a schema is not lossless JSON.
        """
        tools = []
        for remote in listed:
            try:
                tools.append(self._make_tool(remote, prefix))
            except ToolDefinitionError as exc:
                raise ToolDefinitionError(
                    f"MCP server {self.label}: {exc} (the server lists it as {remote.name!r})"
                ) from None
        return tuple(tools)

    def _make_tool(self, remote: mcp_types.Tool, prefix: str) -> Tool:
        name = remote.name

        async def call(ctx: ToolContext, arguments: dict[str, JsonValue]) -> ToolResult:
            return await self.call(name, arguments)

        annotations = remote.annotations
        description = remote.description or remote.title or ""
        if not description and annotations is not None and annotations.title:
            description = annotations.title
        return Tool.from_json_schema(
            prefix + name,
            remote.input_schema,
            call,
            description=description,
            parallel_safe=bool(annotations is not None and annotations.read_only_hint),
        )

    async def call(self, name: str, arguments: dict[str, JsonValue]) -> ToolResult:
        """Call tool ``name``; the server's result as a tool result.

        Raises:
            McpError: the block has ended, the connection closed, the server
                answered with a JSON-RPC error or with no valid result.
        """
        where = f"MCP server {self.label}, tool {name!r}"
        if self.closed:
            raise McpError(
                f"{where}: the server's block has ended (its connection is closed)",
                code="MCP_CLOSED",
            )
        try:
            result = await self.client.call_tool(name, arguments)
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                raise McpError(
                    self.clean(
                        f"{where}: the connection closed before the call ended "
                        f"(the server may have exited): {exc.message}"
                    ),
                    code="MCP_DISCONNECTED",
                ) from None
            raise McpError(
                self.clean(f"{where}: JSON-RPC error {exc.code}: {exc.message}"),
                code="MCP_ERROR",
            ) from None
        except Exception as exc:
            code = "MCP_CLOSED" if self.ended() else "MCP_ERROR"
            raise McpError(self.clean(f"{where}: {describe(exc)}"), code=code) from None
        return self._result(result)

    def _result(self, result: mcp_types.CallToolResult) -> ToolResult:
        texts = [_text(block) for block in result.content]
        if not texts and result.structured_content is not None:
            texts = [json.dumps(result.structured_content, ensure_ascii=False)]
        if result.is_error:
            texts = [self.clean(text) for text in texts]
        else:
            texts = [repair_unicode(text) for text in texts]
        return ToolResult(
            tuple(TextBlock(text) for text in texts) or (TextBlock(""),),
            is_error=result.is_error,
        )
