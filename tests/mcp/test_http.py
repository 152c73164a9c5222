"""MCP servers over streamable HTTP: what only HTTP has, a URL and headers.

The test server (``mcp_server.py http``) runs in a subprocess on an ephemeral port of
127.0.0.1; the scenarios both transports share are in ``test_servers.py``."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator

import pytest
import trio

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel, reply, tool_calls

from .conftest import HANG_GUARD, HEADERS, OPTIONS, TOKEN, http_server, tool_results


@pytest.fixture
async def url() -> AsyncIterator[str]:
    """The MCP endpoint of a test server started for the test (killed after it)."""
    async with http_server() as endpoint:
        yield endpoint


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
