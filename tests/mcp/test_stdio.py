"""MCP servers over stdio: a real server process (``mcp_server.py``), real turns.

Every test starts the server with ``sys.executable``; nothing here waits on the wall
clock except the hang guards (``trio.fail_after``) around blocks that must end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import trio

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel, reply, tool_calls

from .conftest import COMMAND, OPTIONS, process_is_gone, receive_line, tool_results

#: Far longer than anything here takes: only a hang trips it.
HANG_GUARD = 120


async def test_the_tools_are_listed_with_the_servers_names_schemas_and_descriptions() -> (
    None
):
    with trio.fail_after(HANG_GUARD):
        async with dsh.mcp.open_stdio(COMMAND, prefix="t_") as server:
            tools = {tool.name: tool for tool in server.tools}
    assert set(tools) == {
        "t_add", "t_slow", "t_was_cancelled", "t_fail", "t_refuse", "t_crash",
        "t_pid", "t_picture", "t_whoami",
    }  # fmt: skip
    assert server.name == "dsh-test-server"
    assert server.instructions == "Tools for the dsh_trio tests."
    add = tools["t_add"]
    assert add.description == "Add two integers."
    # The server's schema, unchanged: its titles, the field's description and bound.
    assert add.parameters == {
        "type": "object",
        "title": "addArguments",
        "properties": {
            "a": {
                "title": "A",
                "type": "integer",
                "description": "the first addend",
                "minimum": 0,
            },
            "b": {"title": "B", "type": "integer"},
        },
        "required": ["a", "b"],
    }
    assert not add.parallel_safe


async def test_a_turn_calls_a_server_tool_and_gets_its_result() -> None:
    model = ScriptedModel(
        tool_calls(("c1", "add", '{"a": 2, "b": 3}'), ("c2", "picture", "{}")),
        reply("five"),
    )
    with trio.fail_after(HANG_GUARD):
        async with dsh.mcp.open_stdio(COMMAND) as server:
            async with dsh.open_runtime(
                models={"scripted": model}, tools=server.tools
            ) as runtime:
                async with runtime.agents.open(options=OPTIONS) as agent:
                    result = await agent.run(dsh.user_message("add 2 and 3"))
                    results = tool_results(agent)
    assert result.text == "five"
    assert [(r.call_id, r.text, r.is_error) for r in results] == [
        ("c1", "5", False),
        ("c2", "[image: image/png]", False),
    ]
    (add,) = [
        t for t in model.requests[0].tools if isinstance(t, dict) and t["name"] == "add"
    ]
    assert add == {
        "name": "add",
        "description": "Add two integers.",
        "parameters": next(t for t in server.tools if t.name == "add").parameters,
    }


async def test_cancelling_the_turn_cancels_the_call_and_the_server_stays_usable() -> (
    None
):
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    model = ScriptedModel(
        tool_calls(("c1", "slow", json.dumps({"port": port}))),
        tool_calls(("c2", "was_cancelled", "{}"), ("c3", "add", '{"a": 1, "b": 1}')),
        reply("done"),
    )
    with trio.fail_after(HANG_GUARD):
        async with dsh.mcp.open_stdio(COMMAND) as server:
            async with dsh.open_runtime(
                models={"scripted": model}, tools=server.tools
            ) as runtime:
                async with runtime.agents.open(options=OPTIONS) as agent:
                    first: list[dsh.TurnResult] = []

                    async def run_first() -> None:
                        first.append(
                            await agent.run(dsh.user_message("go"), check=False)
                        )

                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(run_first)
                        async with await listener.accept() as connection:
                            # The server runs the call: now the turn is cancelled.
                            assert await receive_line(connection) == b"started\n"
                        agent.cancel(dsh.UserCancel())
                    second = await agent.run(dsh.user_message("again"))
                    results = tool_results(agent)
        await listener.aclose()
    (aborted,) = first
    assert isinstance(aborted.reason, dsh.Aborted)
    assert isinstance(aborted.reason.reason, dsh.UserCancel)
    assert results[0].call_id == "c1" and results[0].code == "ABORTED"
    # The server was told: the call's handler was cancelled; and the session works.
    assert [(r.call_id, r.text, r.is_error) for r in results[1:]] == [
        ("c2", "the slow call was cancelled", False),
        ("c3", "2", False),
    ]
    assert second.text == "done"


async def test_server_errors_are_error_results_and_the_turn_goes_on() -> None:
    model = ScriptedModel(
        tool_calls(
            ("c1", "fail", '{"why": "out of paper"}'),
            ("c2", "refuse", "{}"),
            ("c3", "add", '{"a": -1, "b": 1}'),
            ("c4", "nope", "{}"),
        ),
        reply("noted"),
    )
    with trio.fail_after(HANG_GUARD):
        async with dsh.mcp.open_stdio(COMMAND) as server:
            async with dsh.open_runtime(
                models={"scripted": model}, tools=server.tools
            ) as runtime:
                async with runtime.agents.open(options=OPTIONS) as agent:
                    result = await agent.run(dsh.user_message("try"))
                    results = tool_results(agent)
    assert result.text == "noted"
    assert all(r.is_error for r in results)
    fail, refuse, add, nope = results
    # An error result of the server's (isError): its content, as it sent it.
    assert fail.text == "Error executing tool fail: out of paper"
    assert fail.code is None
    # A JSON-RPC error: its code and message, as an error result.
    assert refuse.code == "MCP_ERROR"
    assert refuse.text == (
        f"Error: MCP server '{os.path.basename(COMMAND[0])} mcp_server.py', "
        "tool 'refuse': JSON-RPC error -32602: refused: no such thing"
    )
    # Arguments the server's schema refuses (a < 0): the server's error result.
    assert "Input should be greater than or equal to 0" in add.text
    assert add.code is None
    # A name the server does not list is no tool at all.
    assert nope.code == "UNKNOWN_TOOL"


async def test_a_server_that_dies_mid_call_gives_an_error_result_not_a_hung_turn() -> (
    None
):
    model = ScriptedModel(
        tool_calls(("c1", "pid", "{}")),
        tool_calls(("c2", "crash", "{}")),
        tool_calls(("c3", "add", '{"a": 1, "b": 2}')),
        reply("the server is gone"),
    )
    with trio.fail_after(HANG_GUARD):
        async with dsh.mcp.open_stdio(COMMAND) as server:
            async with dsh.open_runtime(
                models={"scripted": model}, tools=server.tools
            ) as runtime:
                async with runtime.agents.open(options=OPTIONS) as agent:
                    result = await agent.run(dsh.user_message("crash it"))
                    results = tool_results(agent)
    assert isinstance(result.reason, dsh.Completed)
    assert result.text == "the server is gone"
    pid, crash, add = results
    assert crash.is_error and crash.code == "MCP_DISCONNECTED"
    assert "the connection closed before the call ended" in crash.text
    # Later calls fail the same way, at once.
    assert add.is_error and add.code == "MCP_DISCONNECTED"
    assert process_is_gone(int(pid.text))


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
    # A tool of a closed server is an error result, not a hang.
    add = next(t for t in server.tools if t.name == "add")
    with pytest.raises(dsh.McpError, match="block has ended") as info:
        await add.fn(None, arguments={"a": 1, "b": 2})
    assert info.value.code == "MCP_CLOSED"


async def test_a_server_that_ignores_eof_and_sigterm_is_killed() -> None:
    model = ScriptedModel(tool_calls(("c1", "pid", "{}")), reply("ok"))
    with trio.fail_after(HANG_GUARD):
        async with dsh.mcp.open_stdio([*COMMAND, "stubborn"]) as server:
            async with dsh.open_runtime(
                models={"scripted": model}, tools=server.tools
            ) as runtime:
                async with runtime.agents.open(options=OPTIONS) as agent:
                    await agent.run(dsh.user_message("pid"))
                    (pid,) = tool_results(agent)
    assert process_is_gone(int(pid.text))


async def test_the_blocks_own_exception_comes_out_bare() -> None:
    with trio.fail_after(HANG_GUARD), pytest.raises(KeyError, match="mine"):
        async with dsh.mcp.open_stdio(COMMAND):
            raise KeyError("mine")


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


async def test_a_prefixed_name_the_models_cannot_take_is_refused() -> None:
    with trio.fail_after(HANG_GUARD):
        with pytest.raises(
            dsh.ToolDefinitionError, match="the server lists it as 'add'"
        ):
            async with dsh.mcp.open_stdio(COMMAND, prefix="bad prefix "):
                raise AssertionError("not reached")


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
