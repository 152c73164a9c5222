"""What the MCP tests share: the test server over each transport, reading tool results."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import attrs
import pytest
import trio

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel

SERVER = Path(__file__).with_name("mcp_server.py")
#: The test server over stdio.
COMMAND = [sys.executable, str(SERVER)]
OPTIONS = dsh.AgentOptions(provider="scripted", model="m")
#: Far longer than anything here takes: only a hang trips it.
HANG_GUARD = 120
#: A credential the HTTP tests send, which no error may show.
TOKEN = "tok-5f0c2a9e77d1"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}


@asynccontextmanager
async def http_server() -> AsyncIterator[str]:
    """The MCP endpoint of a test server, started for the block and killed after it.

    The server is ``mcp_server.py http`` on an ephemeral port of 127.0.0.1.
    """
    process = await trio.lowlevel.open_process(
        [sys.executable, str(SERVER), "http"], stdout=subprocess.PIPE
    )
    try:
        assert process.stdout is not None
        with trio.fail_after(HANG_GUARD):
            port = int(await receive_line(process.stdout))
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()
            if process.stdout is not None:
                await process.stdout.aclose()


@attrs.frozen
class Transport:
    """The test server over one transport, for the scenarios both transports share."""

    #: ``"stdio"`` or ``"http"``.
    name: str
    #: How the library's messages name the server.
    label: str
    #: Opens the server as ``dsh.mcp.open_stdio`` / ``open_http`` do (takes ``prefix``).
    open: Callable[..., AbstractAsyncContextManager[dsh.mcp.MCPServer]]


@pytest.fixture(params=["stdio", "http"])
async def transport(request: pytest.FixtureRequest) -> AsyncIterator[Transport]:
    """The test server over stdio, then over streamable HTTP.

    Over stdio each block starts its own server process; over HTTP one process serves
    the test, and every block sends the credential :data:`HEADERS`.
    """
    if request.param == "stdio":
        label = repr(f"{os.path.basename(COMMAND[0])} mcp_server.py")
        yield Transport("stdio", label, functools.partial(dsh.mcp.open_stdio, COMMAND))
        return
    async with http_server() as url:
        opener = functools.partial(dsh.mcp.open_http, url, headers=HEADERS)
        yield Transport("http", repr(url), opener)


@attrs.frozen
class Result:
    """One ``tool/result`` of the log, shortly."""

    call_id: str
    text: str
    is_error: bool
    code: str | None


def tool_results(agent: dsh.Agent) -> list[Result]:
    """The agent's ``tool/result`` events, in log order."""
    found = []
    for event in agent.session.events:
        if event.type != "tool/result":
            continue
        data = event.data
        (block,) = data.message.content
        found.append(
            Result(
                call_id=block.tool_call_id,
                text="".join(getattr(part, "text", "") for part in block.content),
                is_error=block.is_error,
                code=data.error.code if data.error is not None else None,
            )
        )
    return found


async def run_turn(
    opening: AbstractAsyncContextManager[dsh.mcp.MCPServer],
    model: ScriptedModel,
    prompt: str,
) -> tuple[dsh.TurnResult, list[Result], dsh.mcp.MCPServer]:
    """One turn of an agent with the tools of the server ``opening`` opens.

    Returns the turn's result, its tool results and the server (its block has ended).
    """
    with trio.fail_after(HANG_GUARD):
        async with opening as server:
            async with dsh.open_runtime(
                models={"scripted": model}, tools=server.tools
            ) as runtime:
                async with runtime.agents.open(options=OPTIONS) as agent:
                    result = await agent.run(dsh.user_message(prompt))
                    return result, tool_results(agent), server


def process_is_gone(pid: int) -> bool:
    """Whether no process ``pid`` exists, not even a zombie waiting to be reaped.

    The server is this process's child: until it is reaped, ``kill(pid, 0)``
    finds it.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def receive_line(stream: trio.abc.ReceiveStream) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = await stream.receive_some()
        if not chunk:
            break
        data += chunk
    return data
