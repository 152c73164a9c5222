"""A tool error whose text UTF-8 cannot encode (a lone surrogate in the message or
the exception's ``code``) is recorded with U+FFFD and noted: the turn
goes on, instead of ending ``Errored`` over an unrecordable result."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel, reply, tool_calls
from dsh_trio.tools import ToolContext, tool
from dsh_trio.values import ToolErrorInfo, ToolResultData, TurnEnd

OPTIONS = dsh.AgentOptions(provider="scripted", model="m")


class CodedError(Exception):
    code = "E\udc80"


@tool
async def decodes(ctx: ToolContext) -> str:
    """Fail with bytes decoded by surrogateescape in the message."""
    raise ValueError(b"bad \xff bytes".decode("utf-8", "surrogateescape"))


@tool
async def coded(ctx: ToolContext) -> str:
    """Fail with a code holding a lone surrogate."""
    raise CodedError("plain")


@pytest.mark.parametrize(
    ("name", "text", "info"),
    [
        (
            "decodes",
            "Error: bad \ufffd bytes",
            ToolErrorInfo("ValueError", "TOOL_ERROR"),
        ),
        ("coded", "Error: plain", ToolErrorInfo("CodedError", "E\ufffd")),
    ],
)
async def test_the_error_is_recorded_repaired_and_the_turn_completes(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    name: str,
    text: str,
    info: ToolErrorInfo,
) -> None:
    caplog.set_level(logging.WARNING, logger="dsh_trio")
    model = ScriptedModel(tool_calls(("c1", name, "{}")), reply("done"))
    async with dsh.open_runtime(
        models={"scripted": model},
        tools=[decodes, coded],
        persistence=dsh.JsonlPersistence(tmp_path),
    ) as runtime:
        async with runtime.agents.open(options=OPTIONS) as agent:
            result = await agent.run(dsh.user_message("go"))
            await agent.flush()
            events = list(agent.session.events)
    assert result.reason == dsh.Completed()
    assert result.text == "done"
    (data,) = [e.data for e in events if isinstance(e.data, ToolResultData)]
    (block,) = data.message.content
    assert [b.text for b in block.content] == [text]
    assert data.error == info
    assert [e.data for e in events if isinstance(e.data, TurnEnd)] == [
        TurnEnd(1, dsh.Completed())
    ]
    assert [r.getMessage() for r in caplog.records] == [
        (
            "a tool call's error held text that UTF-8 cannot encode (a lone surrogate); "
            "it is recorded with U+FFFD in its place"
        )
    ]
    assert_utf8_log(tmp_path)


def assert_utf8_log(root: Path) -> None:
    (log,) = root.rglob("session.v3.jsonl")
    log.read_bytes().decode("utf-8")  # strict: the log holds valid UTF-8 only
