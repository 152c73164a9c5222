"""``select``: before the first turn only, durable, announced once, restored on resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel, gate, reply

from .conftest import OPTIONS, Recorder, preset, row
from .test_generations import tool_names

PRESETS = [
    preset("p", row("tools", label="p", tools=["alpha"])),
    preset("q", row("tools", label="q", tools=["beta"])),
]


def logged(root: Path, sid: str) -> list[dict[str, object]]:
    (path,) = root.glob(f"**/{sid}/*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def selected_lines(root: Path, sid: str) -> list[dict[str, object]]:
    return [
        line
        for line in logged(root, sid)
        if line.get("type") == "agent-preset/selected"
    ]


async def test_select_before_the_first_turn_is_durable_announced_and_resumed(
    recorder: Recorder, tmp_path: Path
) -> None:
    model = ScriptedModel(default=reply("ok"))
    live: list[dsh.PresetSelected] = []
    store = dsh.JsonlPersistence(tmp_path)
    async with dsh.open_runtime(
        models={"scripted": model},
        persistence=store,
        presets=PRESETS,
        default_preset="p",
    ) as rt:
        rt.events.on("agent-preset/selected", live.append)
        handle = await rt.agents.create("s", options=OPTIONS)
        agent = handle.agent
        assert agent.session.header.agent_preset == "p"
        assert await rt.presets.select(agent, "q") == "q"
        assert rt.presets.composed_preset(agent) == "q"
        assert [(e.session_id, e.preset) for e in live] == [("s", "q")]
        assert [line["data"] for line in selected_lines(tmp_path, "s")] == [
            {"agentPreset": "q"}
        ]
        await agent.run(dsh.user_message("hi"))
        assert tool_names(model.requests[-1]) == ["beta"]

        count = agent.session.next_seq
        with pytest.raises(dsh.PresetLockedError, match='"s" cannot select preset "p"'):
            await rt.presets.select(agent, "p")
        assert agent.session.next_seq == count  # nothing appended
        assert len(live) == 1
        assert rt.presets.composed_preset(agent) == "q"
        await handle.dispose()
    assert len(selected_lines(tmp_path, "s")) == 1

    async with dsh.open_runtime(
        models={"scripted": model},
        persistence=store,
        presets=PRESETS,
        default_preset="p",
    ) as rt:
        resumed = await rt.agents.resume("s", options=OPTIONS)
        assert (
            rt.presets.composed_preset(resumed.agent) == "q"
        )  # the log, not the header
        await resumed.agent.run(dsh.user_message("again"))
        assert tool_names(model.requests[-1]) == ["beta"]


async def test_resume_without_a_selection_uses_the_header(
    recorder: Recorder, tmp_path: Path
) -> None:
    store = dsh.JsonlPersistence(tmp_path)
    models = {"scripted": ScriptedModel(default=reply("ok"))}
    async with dsh.open_runtime(
        models=models, persistence=store, presets=PRESETS
    ) as rt:
        async with rt.agents.open("h", options=OPTIONS, preset="q") as agent:
            await agent.run(dsh.user_message("hi"))
    async with dsh.open_runtime(
        persistence=store, presets=PRESETS, default_preset="p"
    ) as rt:
        resumed = await rt.agents.resume("h", options=OPTIONS)
        assert rt.presets.composed_preset(resumed.agent) == "q"
    async with dsh.open_runtime(persistence=store, presets=PRESETS[:1]) as rt:
        with pytest.raises(dsh.PresetNotFoundError, match='"q"'):
            await rt.agents.resume("h", options=OPTIONS)
        assert rt.agents.get("h") is None
        # The failed resume released the session: it can be resumed onto another preset.
        resumed = await rt.agents.resume("h", options=OPTIONS, preset="p")
        assert rt.presets.composed_preset(resumed.agent) == "p"


async def test_select_is_locked_while_a_turn_is_open(recorder: Recorder) -> None:
    held = gate()
    model = ScriptedModel(held)
    async with dsh.open_runtime(models={"scripted": model}, presets=PRESETS) as rt:
        async with rt.agents.open(options=OPTIONS, preset="p") as agent:
            agent.followup(dsh.user_message("hi"))
            with pytest.raises(dsh.PresetLockedError):
                await rt.presets.select(agent, "q")
            held.release()
            await agent.when_idle()
            assert rt.presets.composed_preset(agent) == "p"


async def test_concurrent_selects_of_one_agent_are_serialised(
    recorder: Recorder,
) -> None:
    live: list[str] = []
    async with dsh.open_runtime(presets=PRESETS) as rt:
        rt.events.on("agent-preset/selected", lambda e: live.append(e.preset))
        async with rt.agents.open(options=OPTIONS) as agent:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(rt.presets.select, agent, "q")
                nursery.start_soon(rt.presets.select, agent, "p")
            events = [
                e.data
                for e in agent.session.events
                if e.type == "agent-preset/selected"
            ]
            assert events == [{"agentPreset": p} for p in live]
            assert sorted(live) == ["p", "q"]
            assert rt.presets.composed_preset(agent) == live[-1]


async def test_a_disposed_agent_cannot_select(recorder: Recorder) -> None:
    async with dsh.open_runtime(presets=PRESETS) as rt:
        handle = await rt.agents.create(options=OPTIONS, preset="p")
        await handle.dispose()
        with pytest.raises(dsh.AgentDisposedError, match="cannot bind"):
            await rt.presets.select(handle.agent, "q")
        assert rt.presets.composed_preset(handle.agent) is None
        assert not any(
            e.type == "agent-preset/selected" for e in handle.agent.session.events
        )
