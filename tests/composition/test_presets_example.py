"""The README's "Presets" example: shown as it is in examples/presets, and it runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel, reply, tool_calls

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "presets"


def readme_section(title: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(rf"^## {title}\n(.*?)(?=^## )", text, re.MULTILINE | re.DOTALL)
    assert match is not None, f"README.md has no '## {title}' section"
    return match.group(1)


def fenced(section: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)


def test_the_readme_shows_the_example_files_as_they_are() -> None:
    section = readme_section("Presets")
    assert fenced(section, "yaml") == [
        (EXAMPLE / "assistant.yaml").read_text(encoding="utf-8")
    ]
    assert fenced(section, "python") == [
        (EXAMPLE / "notes_plugins.py").read_text(encoding="utf-8")
    ]


@pytest.fixture
def preset(monkeypatch: pytest.MonkeyPatch) -> dsh.PresetDefinition:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    return dsh.load_preset(EXAMPLE / "assistant.yaml")


def user_texts(agent: dsh.Agent) -> list[str]:
    return [
        dsh.text_of(e.data)
        for e in agent.session.events
        if e.type == "user/message" and isinstance(e.data, dsh.UserMessage)
    ]


async def test_the_preset_gives_its_agent_the_tool_the_context_and_the_hook(
    preset: dsh.PresetDefinition,
) -> None:
    assert [row.name for row in preset.plugins] == [
        "notes_plugins:notes",
        "notes_plugins:guard",
    ]
    model = ScriptedModel(
        tool_calls(("c1", "take_note", '{"text": "buy milk"}')),
        reply("Noted."),
        reply("You wanted to buy milk."),
    )
    options = dsh.AgentOptions(provider="scripted", model="m")
    async with dsh.open_runtime(
        models={"scripted": model}, presets=[preset], default_preset="assistant"
    ) as runtime:
        assert [(p.id, p.broken) for p in runtime.presets.list()] == [
            ("assistant", None)
        ]
        async with runtime.agents.open(options=options) as agent:
            await agent.run(dsh.user_message("Remember: buy milk."))
            # the tool ran, and its schema and the section reached the model
            first = model.requests[0]
            assert '"name": "take_note"' in json.dumps(first.tools)
            assert "Use take_note" in dsh.text_of(first.messages[0])
            results = [e for e in agent.session.events if e.type == "tool/result"]
            (block,) = results[0].data.message.content
            assert block.content == (dsh.TextBlock("noted (1 kept)"),)
            # the next turn carries the changed context as a snapshot after the input
            await agent.run(dsh.user_message("What did I want?"))
            assert user_texts(agent)[-2:] == [
                "What did I want?",
                (
                    "Current runtime context. This snapshot supersedes earlier "
                    "runtime-context snapshots.\n\nNotes:\n- buy milk"
                ),
            ]
            assert dsh.text_of(model.requests[-1].messages[-1]).endswith("- buy milk")
            # the guard row: a turn mentioning a secret is blocked before any request
            sent = len(model.requests)
            result = await agent.run(
                dsh.user_message("My API key is sk-1"), check=False
            )
            assert result.reason == dsh.Blocked() and len(model.requests) == sent


async def test_agents_outside_the_preset_get_none_of_it(
    preset: dsh.PresetDefinition,
) -> None:
    model = ScriptedModel(reply("hi"))
    options = dsh.AgentOptions(provider="scripted", model="m")
    async with dsh.open_runtime(
        models={"scripted": model}, presets=[preset]
    ) as runtime:
        async with runtime.agents.open(options=options) as agent:  # no default preset
            await agent.run(dsh.user_message("password"))
            assert model.requests[0].tools == ()
            assert user_texts(agent) == ["password"]
