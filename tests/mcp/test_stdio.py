"""MCP servers over stdio: what the block owns, the server process (``mcp_server.py``).

The scenarios both transports share are in ``test_servers.py``. Every test starts the
server with ``sys.executable``; nothing here waits on the wall clock except the hang
guards (``trio.fail_after``) around blocks that must end.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import trio

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel, reply, tool_calls

from .conftest import (
    COMMAND,
    HANG_GUARD,
    OPTIONS,
    process_is_gone,
    run_turn,
    tool_results,
)


async def test_leaving_the_block_ends_the_server_process() -> None:
    model = ScriptedModel(tool_calls(("c1", "pid", "{}")), reply("ok"))
    with trio.fail_after(HANG_GUARD):
        async with dsh.mcp.open_stdio(COMMAND) as server:
            async with dsh.open_runtime(
                models={"scripted": model}, tools=server.tools
            ) as runtime:
                async with runtime.agents.open(options=OPTIONS) as agent:
                    await agent.run(dsh.user_message("pid"))
                    (pid,) = tool_results(agent)
                    assert not process_is_gone(int(pid.text))
    # Ended and reaped: not even a zombie is left.
    assert process_is_gone(int(pid.text))


async def test_a_server_that_ignores_eof_and_sigterm_is_killed() -> None:
    model = ScriptedModel(tool_calls(("c1", "pid", "{}")), reply("ok"))
    _, (pid,), _ = await run_turn(
        dsh.mcp.open_stdio([*COMMAND, "stubborn"]), model, "pid"
    )
    assert process_is_gone(int(pid.text))


async def test_a_server_that_cannot_start_is_an_mcp_error() -> None:
    with trio.fail_after(HANG_GUARD):
        with pytest.raises(dsh.McpError, match="could not be started") as missing:
            async with dsh.mcp.open_stdio(["/nonexistent/mcp-server"]):
                raise AssertionError("not reached")
        assert missing.value.code == "MCP_UNAVAILABLE"
        assert "FileNotFoundError" in str(missing.value)
        with pytest.raises(dsh.McpError, match="could not be started") as exited:
            async with dsh.mcp.open_stdio([sys.executable, "-c", "pass"]):
                raise AssertionError("not reached")
        assert exited.value.code == "MCP_UNAVAILABLE"


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"command": "python server.py"}, TypeError, "sequence of strings"),
        ({"command": []}, ValueError, "name the program"),
        ({"command": ["python", 3]}, TypeError, r"command\[1\] must be a str"),
        ({"command": ["x"], "env": {"A": 1}}, TypeError, "env must map str to str"),
        ({"command": ["x"], "prefix": 1}, TypeError, "prefix must be a str"),
    ],
)
async def test_bad_arguments_are_refused_before_anything_starts(
    kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        async with dsh.mcp.open_stdio(**kwargs):  # type: ignore[arg-type]
            raise AssertionError("not reached")


async def test_without_the_sdk_opening_a_server_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)
    with pytest.raises(ImportError, match=r"pip install 'dsh-trio\[mcp\]'"):
        async with dsh.mcp.open_stdio(COMMAND):
            raise AssertionError("not reached")


def test_importing_dsh_trio_does_not_import_the_sdk() -> None:
    code = "import sys, dsh_trio; print(sorted(m for m in ('mcp', 'mcp_types') if m in sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"
