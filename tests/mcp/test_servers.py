"""MCP servers' tools in real turns, over stdio and over streamable HTTP alike.

Each scenario runs against the test server (``mcp_server.py``) over both transports
(the ``transport`` fixture); what only one transport has (a server process the block
owns, headers, URLs) is tested in ``test_stdio.py`` and ``test_http.py``. Nothing here
waits on the wall clock except the hang guards (``trio.fail_after``) around blocks
that must end.
"""

from __future__ import annotations

import json

import pytest
import trio

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel, reply, tool_calls

from .conftest import (
    HANG_GUARD,
    OPTIONS,
    Transport,
    process_is_gone,
    receive_line,
    run_turn,
    tool_results,
)


async def test_the_tools_are_listed_with_the_servers_names_schemas_and_descriptions(
    transport: Transport,
) -> None:
    with trio.fail_after(HANG_GUARD):
        async with transport.open(prefix="t_") as server:
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


async def test_a_turn_calls_a_server_tool_and_gets_its_result(
    transport: Transport,
) -> None:
    model = ScriptedModel(
        tool_calls(("c1", "add", '{"a": 2, "b": 3}'), ("c2", "picture", "{}")),
        reply("five"),
    )
    result, results, server = await run_turn(transport.open(), model, "add 2 and 3")
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


async def test_cancelling_the_turn_cancels_the_call_and_the_server_stays_usable(
    transport: Transport,
) -> None:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    model = ScriptedModel(
        tool_calls(("c1", "p_add", '{"a": 2, "b": 3}')),
        tool_calls(("c2", "p_slow", json.dumps({"port": port}))),
        tool_calls(
            ("c3", "p_was_cancelled", "{}"), ("c4", "p_add", '{"a": 1, "b": 1}')
        ),
        reply("done"),
    )
    with trio.fail_after(HANG_GUARD):
        async with transport.open(prefix="p_") as server:
            assert server.name == "dsh-test-server"
            add = next(t for t in server.tools if t.name == "p_add")
            assert add.parameters["required"] == ["a", "b"]
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
    # The prefixed names reach the server's tools; the server was told of the cancel
    # (the call's handler was cancelled), and the session works.
    assert [(r.call_id, r.text, r.is_error, r.code) for r in results] == [
        ("c1", "5", False, None),
        ("c2", "Error: tool call aborted", True, "ABORTED"),
        ("c3", "the slow call was cancelled", False, None),
        ("c4", "2", False, None),
    ]
    assert second.text == "done"


async def test_server_errors_are_error_results_and_the_turn_goes_on(
    transport: Transport,
) -> None:
    model = ScriptedModel(
        tool_calls(
            ("c1", "fail", '{"why": "out of paper"}'),
            ("c2", "refuse", "{}"),
            ("c3", "add", '{"a": -1, "b": 1}'),
            ("c4", "nope", "{}"),
        ),
        reply("noted"),
    )
    result, results, _ = await run_turn(transport.open(), model, "try")
    assert result.text == "noted"
    assert all(r.is_error for r in results)
    fail, refuse, add, nope = results
    # An error result of the server's (isError): its content, as it sent it.
    assert fail.text == "Error executing tool fail: out of paper"
    assert fail.code is None
    # A JSON-RPC error: its code and message, as an error result.
    assert refuse.code == "MCP_ERROR"
    assert refuse.text == (
        f"Error: MCP server {transport.label}, "
        "tool 'refuse': JSON-RPC error -32602: refused: no such thing"
    )
    # Arguments the server's schema refuses (a < 0): the server's error result.
    assert "Input should be greater than or equal to 0" in add.text
    assert add.code is None
    # A name the server does not list is no tool at all.
    assert nope.code == "UNKNOWN_TOOL"


async def test_a_server_that_dies_mid_call_gives_an_error_result_not_a_hung_turn(
    transport: Transport,
) -> None:
    model = ScriptedModel(
        tool_calls(("c1", "pid", "{}")),
        tool_calls(("c2", "crash", "{}")),
        tool_calls(("c3", "add", '{"a": 1, "b": 2}')),
        reply("the server is gone"),
    )
    result, results, _ = await run_turn(transport.open(), model, "crash it")
    assert isinstance(result.reason, dsh.Completed)
    assert result.text == "the server is gone"
    pid, crash, add = results
    # No response at all to the call's request: an error result, the block goes on.
    assert crash.is_error and crash.code == "MCP_DISCONNECTED"
    # (Over HTTP, whether the server had begun its response when it died decides the
    # rest of the text.)
    assert (
        f"MCP server {transport.label}, tool 'crash': the connection closed before "
        "the call ended (the server may have exited): " in crash.text
    ), crash.text
    # Later calls find no server (a closed pipe, a reset or refused connection): the
    # same, at once.
    assert add.is_error and add.code == "MCP_DISCONNECTED"
    if transport.name == "stdio":
        # The block's own server process is reaped (over HTTP the test owns it).
        assert process_is_gone(int(pid.text))


async def test_a_tool_of_a_closed_server_raises_instead_of_hanging(
    transport: Transport,
) -> None:
    with trio.fail_after(HANG_GUARD):
        async with transport.open() as server:
            add = next(t for t in server.tools if t.name == "add")
    with pytest.raises(dsh.McpError, match="block has ended") as info:
        await add.fn(None, arguments={"a": 1, "b": 2})
    assert info.value.code == "MCP_CLOSED"


async def test_the_blocks_own_exception_comes_out_bare(transport: Transport) -> None:
    with trio.fail_after(HANG_GUARD), pytest.raises(KeyError, match="mine"):
        async with transport.open():
            raise KeyError("mine")


async def test_a_prefixed_name_the_models_cannot_take_is_refused(
    transport: Transport,
) -> None:
    with trio.fail_after(HANG_GUARD):
        with pytest.raises(
            dsh.ToolDefinitionError, match="the server lists it as 'add'"
        ):
            async with transport.open(prefix="bad prefix "):
                raise AssertionError("not reached")
