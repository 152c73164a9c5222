"""An MCP server for the tests, on the official SDK (run as a script).

``python mcp_server.py`` serves over stdio; ``python mcp_server.py http`` serves
streamable HTTP on an ephemeral port of 127.0.0.1 and prints the port on its first
line; ``python mcp_server.py stubborn`` serves over stdio, ignores ``SIGTERM`` and
does not exit when its stdin closes (only ``SIGKILL`` ends it).

Tools: ``add``, ``slow`` (tells the test it started, then waits until cancelled),
``was_cancelled`` (waits until a ``slow`` call was cancelled), ``fail`` (an error
result), ``refuse`` (a JSON-RPC error), ``crash`` (the process exits mid-call),
``pid``, ``picture`` (image content) and ``whoami`` (an error result quoting the
request's ``Authorization`` header).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from typing import Annotated

import anyio
from mcp import MCPError
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

server = MCPServer("dsh-test-server", instructions="Tools for the dsh_trio tests.")
slow_cancelled = anyio.Event()

# The smallest PNG: one transparent pixel.
PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d00000000"
    "49454e44ae426082"
)


@server.tool()
def add(
    a: Annotated[int, Field(description="the first addend", ge=0)],
    b: int,
) -> str:
    """Add two integers."""
    return str(a + b)


@server.tool()
async def slow(port: int) -> str:
    """Tell the test (listening on ``port``) that it started, then wait until cancelled."""
    stream = await anyio.connect_tcp("127.0.0.1", port)
    await stream.send(b"started\n")
    await stream.aclose()
    try:
        await anyio.sleep_forever()
    finally:
        slow_cancelled.set()
    return "not reached"


@server.tool()
async def was_cancelled() -> str:
    """Wait until a ``slow`` call has been cancelled."""
    with anyio.fail_after(60):  # a hang guard: the test expects no wait at all
        await slow_cancelled.wait()
    return "the slow call was cancelled"


@server.tool()
def fail(why: str) -> str:
    """Fail with ``why``."""
    raise ToolError(why)


@server.tool()
def refuse() -> str:
    """Answer with a JSON-RPC error."""
    raise MCPError(code=-32602, message="refused: no such thing")


@server.tool()
def crash() -> str:
    """Exit the process mid-call."""
    os._exit(3)


@server.tool()
def pid() -> str:
    """The server's process id."""
    return str(os.getpid())


@server.tool()
def picture() -> Image:
    """A one-pixel image."""
    return Image(data=PIXEL, format="png")


@server.tool()
def whoami(ctx: Context) -> str:
    """Refuse, quoting the Authorization header."""
    headers = ctx.headers or {}
    raise ToolError(f"refused the credentials {headers.get('authorization')}")


def serve_http() -> None:
    import uvicorn

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()  # connections wait in the backlog until uvicorn serves
    print(listener.getsockname()[1], flush=True)
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning")
    uvicorn.Server(config).run(sockets=[listener])


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "http":
        serve_http()
    else:
        if mode == "stubborn":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        server.run()
        if mode == "stubborn":
            while True:
                time.sleep(3600)
