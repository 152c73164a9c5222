"""Declared agents: ``open_runtime(config=...)``, ``wait_for`` and start failures."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel, reply

from .conftest import PLUGINS, Recorder


def write_config(tmp_path: Path) -> Path:
    (tmp_path / "presets").mkdir()
    (tmp_path / "presets" / "coder.yml").write_text(
        f"""
id: coder
plugins:
  - name: {PLUGINS}:tools
    config: {{tools: [alpha], label: coder}}
  - name: {PLUGINS}:defaults
    config: {{max_tokens: 99}}
"""
    )
    config = tmp_path / "runtime.yml"
    config.write_text(
        f"""
presets:
  - presets/coder.yml
  - id: gated
    plugins:
      - name: {PLUGINS}:gated_failure
default_preset: coder
default_model: {{provider: scripted, model: default-model, reasoningEffort: high}}
agents:
  - id: first
  - id: second
    options: {{model: own-model}}
  - id: unknown-preset
    preset: nope
  - id: failing
    preset: gated
"""
    )
    return config


async def test_declared_agents_start_and_failures_never_leave_a_waiter_hanging(
    recorder: Recorder, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    recorder.created_gate = trio.Event()
    failures: list[dsh.ConfigStartFailed] = []
    errors: list[dsh.AgentStartError] = []
    models = {"scripted": ScriptedModel(default=reply("ok"))}

    async def wait(session_id: str) -> None:
        try:
            await rt.agents.wait_for(session_id)
        except dsh.AgentStartError as exc:
            errors.append(exc)

    async with dsh.open_runtime(models=models, config=write_config(tmp_path)) as rt:
        rt.events.on("agent-loop/config-start-failed", failures.append)
        with trio.fail_after(60):  # virtual time: a hanging waiter fails, never hangs
            async with trio.open_nursery() as nursery:
                for _ in range(3):
                    nursery.start_soon(wait, "failing")
                await trio.testing.wait_all_tasks_blocked()
                assert errors == []
                recorder.created_gate.set()
        # (The unknown preset may fail before the listener above was registered.)
        (failed,) = [f for f in failures if f.session_id == "failing"]
        assert isinstance(failed.error, RuntimeError)
        assert [e.session_id for e in errors] == ["failing"] * 3
        assert all(e.error is failed.error for e in errors)
        with pytest.raises(dsh.AgentStartError, match='"failing" failed to start'):
            await rt.agents.wait_for("failing")  # after the failure: at once
        with pytest.raises(dsh.AgentStartError) as unknown:
            await rt.agents.wait_for("unknown-preset")
        assert isinstance(unknown.value.error, dsh.PresetNotFoundError)
        assert rt.agents.get("failing") is None

        first = (await rt.agents.wait_for("first")).agent
        second = (await rt.agents.wait_for("second")).agent
        assert rt.presets.composed_preset(first) == "coder"
        assert first.options == dsh.AgentOptions(
            provider="scripted",
            model="default-model",
            reasoning_effort="high",
            max_tokens=99,
        )
        assert second.options.model == "own-model"
        assert sorted(a.id for a in rt.agents.list()) == ["first", "second"]
        result = await first.run(dsh.user_message("hi"))
        assert result.text == "ok"


async def test_a_persisted_declared_agent_is_resumed(
    recorder: Recorder, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    config = tmp_path / "runtime.yml"
    config.write_text(
        f"""
presets:
  - {{id: p, plugins: [{{name: {PLUGINS}:tools, config: {{label: p}}}}]}}
  - {{id: q, plugins: [{{name: {PLUGINS}:tools, config: {{label: q}}}}]}}
agents: [{{id: main, preset: p, options: {{provider: scripted, model: m}}}}]
"""
    )
    store = dsh.JsonlPersistence(tmp_path / "sessions")
    models = {"scripted": ScriptedModel(default=reply("ok"))}
    async with dsh.open_runtime(models=models, persistence=store, config=config) as rt:
        agent = (await rt.agents.wait_for("main")).agent
        await rt.presets.select(agent, "q")
        await agent.run(dsh.user_message("first"))
    async with dsh.open_runtime(models=models, persistence=store, config=config) as rt:
        agent = (await rt.agents.wait_for("main")).agent
        assert agent.session.last_turn == 1  # resumed, not created again
        assert rt.presets.composed_preset(agent) == "q"  # its log's choice


async def test_wait_for_returns_an_agent_published_later(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with dsh.open_runtime() as rt:
        async with trio.open_nursery() as nursery:
            got: list[dsh.AgentHandle] = []

            async def wait() -> None:
                got.append(await rt.agents.wait_for("later"))

            nursery.start_soon(wait)
            await trio.testing.wait_all_tasks_blocked()
            handle = await rt.agents.create("later")
        assert got == [handle]


async def test_closing_the_runtime_stops_declared_starts(
    recorder: Recorder, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    recorder.created_gate = trio.Event()  # never set: the start hangs until closed
    failures: list[dsh.ConfigStartFailed] = []
    async with dsh.open_runtime(config=write_config(tmp_path)) as rt:
        rt.events.on("agent-loop/config-start-failed", failures.append)
        await trio.testing.wait_all_tasks_blocked()
    # A start stopped by closing is no start failure.
    assert {f.session_id for f in failures} <= {"unknown-preset"}
    assert rt.agents.list() == []


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("agents: [{id: a}, {id: a}]", '"a" is declared twice'),
        ("agents: [{preset: p}]", r"agents\[0\].id must be a non-empty string"),
        ("agents: [{id: a, options: {colour: red}}]", "is not an agent option"),
        ("agents: [{id: a, options: {max_tokens: 0}}]", r"agents\[0\].options"),
        ("extra: 1", "unknown keys"),
        ("presets: {a: 1}", "presets must be a list"),
        ("presets: [missing.yml]", "cannot read preset file"),
    ],
)
async def test_a_malformed_config_fails_the_open(
    tmp_path: Path, document: str, message: str
) -> None:
    config = tmp_path / "runtime.yml"
    config.write_text(document)
    with pytest.raises(dsh.PresetError, match=message):
        async with dsh.open_runtime(config=config):
            pass  # pragma: no cover


async def test_declared_options_take_the_thinking_switch(tmp_path: Path) -> None:
    config = tmp_path / "runtime.yml"
    config.write_text(
        """
default_model: {provider: scripted, model: m, thinking: false}
agents:
  - id: inherits
  - id: thinks
    options: {thinking: true}
  - id: unset
    options: {thinking: null}
"""
    )
    model = ScriptedModel(default=reply("ok"))
    async with dsh.open_runtime(models={"scripted": model}, config=config) as rt:
        agents = {
            i: (await rt.agents.wait_for(i)).agent for i in ("inherits", "thinks")
        }
        unset = (await rt.agents.wait_for("unset")).agent
        assert agents["inherits"].options.thinking is False  # the default model's
        assert agents["thinks"].options.thinking is True
        assert unset.options.thinking is False  # null: the default model fills it
        await agents["thinks"].run(dsh.user_message("hi"))
        await agents["inherits"].run(dsh.user_message("hi"))
    assert [r.thinking for r in model.requests] == [True, False]


@pytest.mark.parametrize(
    ("value", "kind"),
    [("'on'", "a string"), ("1", "an integer"), ("[true]", "a list")],
)
@pytest.mark.parametrize("where", ["agents[0].options", "default_model"])
async def test_a_thinking_that_is_not_a_bool_names_the_file_and_key(
    tmp_path: Path, value: str, kind: str, where: str
) -> None:
    config = tmp_path / "runtime.yml"
    if where == "default_model":
        config.write_text(f"default_model: {{model: m, thinking: {value}}}")
    else:
        config.write_text(f"agents: [{{id: a, options: {{thinking: {value}}}}}]")
    with pytest.raises(dsh.PresetError) as refused:
        async with dsh.open_runtime(config=config):
            pass  # pragma: no cover
    assert str(refused.value) == (
        f"{config}.{where}.thinking must be true, false or null (the provider's "
        f"default), got {kind}"
    )
