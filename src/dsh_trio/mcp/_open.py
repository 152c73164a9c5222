"""Opening MCP servers: :func:`open_stdio`, :func:`open_http` and :class:`MCPServer`.

Nothing here imports the ``mcp`` SDK at import time: :func:`_require_sdk` imports it
(and :mod:`._connection`, which uses it) when a server is opened.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import attrs

from ..errors import McpError
from ..llm import redact_all, repair_unicode, shown_url
from ..tools import Tool

if TYPE_CHECKING:
    from mcp import Client

__all__ = ["MCPServer", "open_http", "open_stdio"]

_HINT = (
    "dsh_trio.mcp needs the official MCP SDK (the `mcp` package): "
    "pip install 'dsh-trio[mcp]'"
)


def _require_sdk() -> None:
    """Import the SDK, or raise an ``ImportError`` naming the extra that installs it."""
    try:
        import mcp  # noqa: F401
        import mcp_types  # noqa: F401
    except ImportError as exc:
        raise ImportError(_HINT) from exc


@attrs.frozen(eq=False)
class MCPServer:
    """An open MCP server: its tools, ready to register like any other tool.

    Yielded by :func:`open_stdio` and :func:`open_http`; valid until their block
    ends. A call to one of its tools after that is an error result
    (``MCP_CLOSED``).

    Example::

        async with dsh.mcp.open_stdio(["python", "server.py"], prefix="files_") as server:
            async with dsh.open_runtime(models=models, tools=server.tools) as runtime:
                ...

    Attributes:
        tools: the server's tools, in the order it lists them: each named with the
            prefix, described by the server's description (else its title), and
            with the server's JSON input schema as its parameters, unchanged. A
            tool the server marks read-only (``readOnlyHint``) is parallel-safe.
        name: the name the server gives itself (``""`` if it gives none).
        instructions: the server's instructions for its use, if it gives any.
    """

    tools: tuple[Tool, ...]
    name: str
    instructions: str | None


def _wraps_only(exc: BaseException, inner: BaseException | None) -> bool:
    """Whether ``exc`` is ``inner``, or groups (nested) holding nothing else."""
    if exc is inner:
        return True
    if isinstance(exc, BaseExceptionGroup):
        return all(_wraps_only(e, inner) for e in exc.exceptions)
    return False


@asynccontextmanager
async def _serve(
    client: Client, label: str, secrets: tuple[str, ...], prefix: str
) -> AsyncIterator[MCPServer]:
    """Enter ``client``, list its tools, yield the server, close the client.

    The SDK runs its connection in task groups around the block, which wrap an
    exception raised inside it in exception groups; the block's own exception
    comes out bare.
    """
    from ._connection import Connection, describe

    connected = False
    inner: BaseException | None = None
    try:
        async with client:
            connected = True
            connection = Connection(client, label, secrets)
            try:
                listed = await connection.list_tools()
                tools = connection.make_tools(listed, prefix)
                info = client.server_info
                yield MCPServer(
                    tools=tools,
                    name=info.name if info is not None else "",
                    instructions=client.instructions,
                )
            except BaseException as exc:
                inner = exc
                raise
            finally:
                connection.closed = True
    except BaseException as exc:  # noqa: ASYNC103  # re-raised, or out of its groups below
        if not connected and isinstance(exc, Exception):
            text = (
                f"MCP server {label} could not be started or reached: {describe(exc)}"
            )
            safe = redact_all(repair_unicode(text), secrets)
            raise McpError(safe, code="MCP_UNAVAILABLE") from None  # noqa: ASYNC104  # an Exception: no Cancelled
        if not _wraps_only(exc, inner):
            raise
    if inner is not None:
        # The block's exception, out of the SDK's groups (raised here, outside the
        # handler, so its context is left as it was).
        raise inner


def _check_command(command: Sequence[str]) -> list[str]:
    if isinstance(command, (str, bytes)) or not isinstance(command, Sequence):
        raise TypeError(
            "open_stdio: command must be a sequence of strings such as "
            f"['python', 'server.py'], got {type(command).__name__}"
        )
    argv = list(command)
    for i, part in enumerate(argv):
        if not isinstance(part, str):
            raise TypeError(
                f"open_stdio: command[{i}] must be a str, got {type(part).__name__}"
            )
    if not argv or not argv[0]:
        raise ValueError("open_stdio: command must name the program to run first")
    return argv


def _check_strings(what: str, value: object) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(
            f"{what} must be a mapping of str to str, got {type(value).__name__}"
        )
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise TypeError(
                f"{what} must map str to str, got {type(key).__name__} "
                f"-> {type(item).__name__}"
            )
    return dict(value)


def _check_prefix(prefix: object) -> str:
    if not isinstance(prefix, str):
        raise TypeError(f"prefix must be a str, got {type(prefix).__name__}")
    return prefix


def _stdio_label(argv: list[str]) -> str:
    """What messages call a stdio server: the program, and its first operand."""
    shown = [os.path.basename(argv[0])]
    if len(argv) > 1 and not argv[1].startswith("-"):
        shown.append(os.path.basename(argv[1].rstrip("/")))
    return repr(" ".join(shown))


@asynccontextmanager
async def open_stdio(
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    prefix: str = "",
) -> AsyncIterator[MCPServer]:
    """Start an MCP server process and use its tools for the block.

    Runs ``command`` (no shell) and speaks MCP over its stdin/stdout; the
    process's stderr is this process's. The block owns the server: leaving it
    (also by an exception or a cancellation) closes the session and ends the
    process: its stdin is closed, then after a grace period it is sent
    ``SIGTERM`` (its process group), then ``SIGKILL``, and it is reaped. On the
    SDK's timings the grace periods are 2 seconds each.

    A tool call runs inside the calling agent's turn: cancelling the turn
    cancels the request (the server is sent the protocol's cancellation
    notification) and the server stays usable for later calls. What the server
    returns becomes the call's result: text content as text, anything else
    described in brackets (``[image: image/png]``, ``[audio: audio/wav]``,
    ``[resource link: uri]``, ``[resource: uri (mime)]``; an embedded text
    resource is its text), structured content as JSON when there is no other
    content. A result the server marks as an error is an error result; so is a
    JSON-RPC error (code ``MCP_ERROR``) and a server that exits or closes the
    connection during the call (``MCP_DISCONNECTED``): the turn goes on.

    Example::

        async with dsh.mcp.open_stdio(["python", "server.py"]) as server:
            for tool in server.tools:
                runtime.tools.register(tool)

    Args:
        command: the program and its arguments, e.g. ``["npx", "-y", "pkg"]``.
        env: variables for the process, added to the few the SDK passes on
            (``HOME``, ``LOGNAME``, ``PATH``, ``SHELL``, ``TERM``, ``USER`` on
            POSIX); the rest of this process's environment is not passed on.
        cwd: the process's working directory (this process's by default).
        prefix: put before each tool name (``"files_"`` makes ``read`` into
            ``files_read``).

    Raises:
        ImportError: the ``mcp`` SDK is not installed (the ``mcp`` extra).
        TypeError: ``command``, ``env`` or ``prefix`` is not of the type above.
        ValueError: ``command`` is empty.
        McpError: the process cannot be started or the handshake fails
            (``MCP_UNAVAILABLE``), or listing its tools fails (``MCP_ERROR``).
        ToolDefinitionError: a prefixed tool name is not 1-64 letters, digits,
            ``_`` or ``-``, or a schema is not lossless JSON.
    """
    argv = _check_command(command)
    environment = _check_strings("open_stdio: env", env)
    prefix = _check_prefix(prefix)
    if cwd is not None and not isinstance(cwd, (str, os.PathLike)):
        raise TypeError(f"open_stdio: cwd must be a path, got {type(cwd).__name__}")
    _require_sdk()
    from ._connection import client_for_command

    client = client_for_command(argv, environment, cwd)
    async with _serve(client, _stdio_label(argv), (), prefix) as server:
        yield server


def _secrets(url: str, headers: Mapping[str, str] | None) -> tuple[str, ...]:
    """What errors must not show: header values (and their credentials), the URL's password."""
    found: set[str] = set()
    for value in (headers or {}).values():
        value = value.strip()
        if value:
            found.add(value)
            scheme, _, credential = value.partition(" ")
            if credential.strip() and scheme:
                found.add(credential.strip())
    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    if password:
        found.add(password)
    return tuple(sorted(found))


@asynccontextmanager
async def open_http(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    prefix: str = "",
) -> AsyncIterator[MCPServer]:
    """Connect to an MCP server over streamable HTTP and use its tools for the block.

    Leaving the block closes the session (the server is asked to end it) and the
    HTTP client. Calls behave as with :func:`open_stdio`: cancellable through
    the calling turn, text content as text and anything else described, server
    errors, JSON-RPC errors and a lost connection as error results.

    The values of ``headers`` (say an ``Authorization`` token) and a password in
    ``url`` never appear in an error message or an error result: they are
    redacted (``***``), and so is the credential of a ``Scheme credential``
    value on its own.

    Example::

        headers = {"Authorization": f"Bearer {token}"}
        async with dsh.mcp.open_http("https://mcp.example/mcp", headers=headers) as server:
            async with dsh.open_runtime(models=models, tools=server.tools) as runtime:
                ...

    Args:
        url: the server's MCP endpoint (``http://`` or ``https://``).
        headers: sent with every request.
        prefix: put before each tool name.

    Raises:
        ImportError: the ``mcp`` SDK is not installed (the ``mcp`` extra).
        TypeError: ``url``, ``headers`` or ``prefix`` is not of the type above.
        ValueError: ``url`` is not an http(s) URL.
        McpError: the server cannot be reached or the handshake fails
            (``MCP_UNAVAILABLE``), or listing its tools fails (``MCP_ERROR``).
        ToolDefinitionError: a prefixed tool name is not 1-64 letters, digits,
            ``_`` or ``-``, or a schema is not lossless JSON.
    """
    if not isinstance(url, str):
        raise TypeError(f"open_http: url must be a str, got {type(url).__name__}")
    if not url.startswith(("http://", "https://")):
        raise ValueError(
            f"open_http: url must start with http:// or https://, got {shown_url(url, None)!r}"
        )
    fields = _check_strings("open_http: headers", headers)
    prefix = _check_prefix(prefix)
    secrets = _secrets(url, fields)
    label = repr(shown_url(url, None))
    _require_sdk()
    from ._connection import client_for_url, http_client

    async with http_client(fields) as http:
        async with _serve(client_for_url(url, http), label, secrets, prefix) as server:
            yield server
