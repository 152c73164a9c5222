"""What the MCP tests share: the test server's command, and reading a turn's tool results."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import attrs
import trio

import dsh_trio as dsh

SERVER = Path(__file__).with_name("mcp_server.py")
#: The test server over stdio.
COMMAND = [sys.executable, str(SERVER)]
OPTIONS = dsh.AgentOptions(provider="scripted", model="m")


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
