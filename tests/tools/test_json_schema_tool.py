"""Tools described by a JSON schema given whole (``Tool.from_json_schema``)."""

from __future__ import annotations

import pytest

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel, reply, tool_calls
from dsh_trio.tools import Tool, ToolContext
from dsh_trio.values import JsonValue, ToolResultBlock

OPTIONS = dsh.AgentOptions(provider="scripted", model="m")

SCHEMA: dict[str, JsonValue] = {
    "type": "object",
    "title": "lookupArguments",
    "properties": {"key": {"type": "string", "minLength": 1}},
    "required": ["key"],
}


async def lookup(ctx: ToolContext, arguments: dict[str, JsonValue]) -> str:
    return f"{ctx.call_id}: {arguments!r}"


def results(agent: dsh.Agent) -> list[ToolResultBlock]:
    return [
        block
        for message in agent.session.derive_messages()
        for block in getattr(message, "content", ())
        if isinstance(block, ToolResultBlock)
    ]


async def test_the_schema_reaches_the_model_and_the_body_gets_the_object() -> None:
    made = Tool.from_json_schema("lookup", SCHEMA, lookup, description="Look up.")
    assert made.parameters == SCHEMA
    assert made.parameters is not SCHEMA  # a private copy
    model = ScriptedModel(
        tool_calls(("c1", "lookup", '{"key": "k", "extra": [1]}')),
        tool_calls(("c2", "lookup", "[1, 2]")),
        reply("done"),
    )
    async with dsh.open_runtime(models={"scripted": model}, tools=[made]) as runtime:
        async with runtime.agents.open(options=OPTIONS) as agent:
            await agent.run(dsh.user_message("go"))
            first, second = results(agent)
    assert model.requests[0].tools == (
        {"name": "lookup", "description": "Look up.", "parameters": SCHEMA},
    )
    # Not checked against the schema: the body receives the object whole.
    assert first.content[0].text == "c1: {'key': 'k', 'extra': [1]}"
    assert not first.is_error
    assert second.is_error
    assert "arguments must be a JSON object, got array" in second.content[0].text


@pytest.mark.parametrize(
    ("name", "parameters", "fn", "match"),
    [
        ("bad name", SCHEMA, lookup, "1-64 letters"),
        (
            "t",
            ["not", "an", "object"],
            lookup,
            "parameters must be a JSON schema object",
        ),
        (
            "t",
            {"type": "object", "default": float("nan")},
            lookup,
            r"parameters\.default",
        ),
        ("t", SCHEMA, lambda ctx, arguments: None, "async def"),
    ],
)
def test_a_definition_it_cannot_use_is_refused(
    name: str, parameters: object, fn: object, match: str
) -> None:
    with pytest.raises(dsh.ToolDefinitionError, match=match):
        Tool.from_json_schema(name, parameters, fn)  # type: ignore[arg-type]
