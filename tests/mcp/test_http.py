"""MCP servers over streamable HTTP: the test server (``mcp_server.py http``) in a
subprocess on an ephemeral port of 127.0.0.1, real turns against it."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest
import trio

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel, reply, tool_calls

from .conftest import OPTIONS, SERVER, receive_line, tool_results

#: Far longer than anything here takes: only a hang trips it.
HANG_GUARD = 120
TOKEN = "tok-5f0c2a9e77d1"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
async def url() -> AsyncIterator[str]:
    """The MCP endpoint of a test server started for the test (killed after it)."""
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


async def test_a_turn_over_http_calls_tools_cancels_one_and_goes_on(url: str) -> None:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    model = ScriptedModel(
        tool_calls(("c1", "h_add", '{"a": 2, "b": 3}')),
        tool_calls(("c2", "h_slow", json.dumps({"port": port}))),
        tool_calls(
            ("c3", "h_was_cancelled", "{}"), ("c4", "h_add", '{"a": 1, "b": 1}')
        ),
        reply("done"),
    )
    with trio.fail_after(HANG_GUARD):
        async with dsh.mcp.open_http(url, headers=HEADERS, prefix="h_") as server:
            assert server.name == "dsh-test-server"
            add = next(t for t in server.tools if t.name == "h_add")
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
                            assert await receive_line(connection) == b"started\n"
                        agent.cancel(dsh.UserCancel())
                    second = await agent.run(dsh.user_message("again"))
                    results = tool_results(agent)
        await listener.aclose()
    (aborted,) = first
    assert isinstance(aborted.reason, dsh.Aborted)
    assert [(r.call_id, r.text, r.code) for r in results] == [
        ("c1", "5", None),
        ("c2", "Error: tool call aborted", "ABORTED"),
        ("c3", "the slow call was cancelled", None),
        ("c4", "2", None),
    ]
    assert second.text == "done"


async def test_header_values_never_reach_an_error_result(url: str) -> None:
    model = ScriptedModel(tool_calls(("c1", "whoami", "{}")), reply("ok"))
    with trio.fail_after(HANG_GUARD):
        async with dsh.mcp.open_http(url, headers=HEADERS) as server:
            async with dsh.open_runtime(
                models={"scripted": model}, tools=server.tools
            ) as runtime:
                async with runtime.agents.open(options=OPTIONS) as agent:
                    await agent.run(dsh.user_message("who am I"))
                    (result,) = tool_results(agent)
                    logged = json.dumps([str(e.data) for e in agent.session.events])
    # The server quoted the header back; the result shows it redacted.
    assert result.is_error
    assert result.text == "Error executing tool whoami: refused the credentials ***"
    assert TOKEN not in logged


async def test_a_server_that_dies_mid_call_gives_an_error_result(url: str) -> None:
    model = ScriptedModel(
        tool_calls(("c1", "crash", "{}")),
        tool_calls(("c2", "add", '{"a": 1, "b": 2}')),
        reply("gone"),
    )
    with trio.fail_after(HANG_GUARD):
        async with dsh.mcp.open_http(url) as server:
            async with dsh.open_runtime(
                models={"scripted": model}, tools=server.tools
            ) as runtime:
                async with runtime.agents.open(options=OPTIONS) as agent:
                    result = await agent.run(dsh.user_message("crash it"))
                    results = tool_results(agent)
    assert result.text == "gone"
    crash, add = results
    # No response at all to the call's request: an error result, the block goes on.
    assert crash.is_error and crash.code == "MCP_DISCONNECTED"
    # (Whether the server had begun its response when it died decides the rest.)
    assert (
        "tool 'crash': the connection closed before the call ended (the server may "
        "have exited): " in crash.text
    ), crash.text
    # Later calls find no server (a reset or refused connection): the same, at once.
    assert add.is_error and add.code == "MCP_DISCONNECTED"


async def test_a_server_that_cannot_be_reached_is_an_mcp_error() -> None:
    with socket.socket() as probe:  # a port nothing listens on once it is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with trio.fail_after(HANG_GUARD):
        with pytest.raises(
            dsh.McpError, match="could not be started or reached"
        ) as info:
            async with dsh.mcp.open_http(
                f"http://me:pw-0123456789@127.0.0.1:{port}/mcp", headers=HEADERS
            ):
                raise AssertionError("not reached")
    assert info.value.code == "MCP_UNAVAILABLE"
    assert "ConnectError" in str(info.value)
    assert f"'http://me:***@127.0.0.1:{port}/mcp'" in str(info.value)
    assert "pw-0123456789" not in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"url": b"http://x"}, TypeError, "url must be a str"),
        (
            {"url": "ftp://me:secret@x/"},
            ValueError,
            r"http:// or https://, got 'ftp://me:\*\*\*@x/'",
        ),
        (
            {"url": "http://x", "headers": {"A": 1}},
            TypeError,
            "headers must map str to str",
        ),
        (
            {"url": "http://x", "headers": [("A", "b")]},
            TypeError,
            "headers must be a mapping",
        ),
    ],
)
async def test_bad_arguments_are_refused_before_any_request(
    kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        async with dsh.mcp.open_http(**kwargs):  # type: ignore[arg-type]
            raise AssertionError("not reached")
