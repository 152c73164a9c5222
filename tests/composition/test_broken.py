"""A preset whose row fails to import or to set up is kept as a broken diagnostic."""

from __future__ import annotations

import pytest

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel, reply

from .conftest import OPTIONS, PLUGINS, Recorder, preset, row
from .test_generations import tool_names


@pytest.mark.parametrize(
    ("bad_row", "text"),
    [
        (
            dsh.PluginRow(name="no_such_module_here:setup", id="missing"),
            "No module named 'no_such_module_here'",
        ),
        (
            dsh.PluginRow(name=f"{PLUGINS}:explode", id="boom"),
            "the plugin refused to start",
        ),
        (dsh.PluginRow(name=f"{PLUGINS}:no_such_function"), "no_such_function"),
        (dsh.PluginRow(name=f"{PLUGINS}:not_callable"), "not callable"),
    ],
)
async def test_a_failing_row_breaks_only_its_preset(
    recorder: Recorder, bad_row: dsh.PluginRow, text: str
) -> None:
    model = ScriptedModel(default=reply("ok"))
    async with dsh.open_runtime(models={"scripted": model}) as rt:
        await rt.presets.register(preset("bad", row("keep"), bad_row, row("tools")))
        await rt.presets.register(preset("good", row("tools", tools=["alpha"])))
        infos = {i.id: i for i in rt.presets.list()}
        assert infos["good"].broken is None
        broken = infos["bad"].broken
        assert broken is not None
        assert f'row "{bad_row.label}"' in broken
        assert text in broken
        # What the rows before the failing one registered is unwound.
        (scope,) = recorder.scopes
        with pytest.raises(dsh.PresetError, match="torn down"):
            scope.section("late", "x")
        assert "bad" not in recorder.heard  # the row after the failing one never ran

        with pytest.raises(
            dsh.PresetError, match=f'"bad" is broken.*row "{bad_row.label}"'
        ):
            await rt.agents.create("x", options=OPTIONS, preset="bad")
        assert rt.agents.get("x") is None
        assert rt.sessions.list() == []

        async with rt.agents.open(options=OPTIONS, preset="good") as agent:
            with pytest.raises(dsh.PresetError, match="broken"):
                await rt.presets.select(agent, "bad")
            with pytest.raises(dsh.PresetError, match="broken"):
                async with rt.presets.acquire_scope("bad"):
                    pass  # pragma: no cover
            await agent.run(dsh.user_message("hi"))
        assert tool_names(model.requests[-1]) == ["alpha"]


async def test_disabled_rows_are_skipped_and_groups_nest(
    recorder: Recorder, tmp_path: object
) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "p.yml"
    path.write_text(
        f"""
id: p
name: The P preset
description: for tests
order: 2
plugins:
  - name: {PLUGINS}:explode
    disabled: true
  - name: group
    group: true
    config:
      - name: {PLUGINS}:tools
        config: {{tools: [alpha], label: inner}}
      - name: {PLUGINS}:explode
        disabled: true
"""
    )
    definition = dsh.load_preset(path)
    assert definition.name == "The P preset"
    assert definition.plugins[1].group
    async with dsh.open_runtime(presets=[definition]) as rt:
        (info,) = rt.presets.list()
        assert (info.id, info.name, info.order, info.broken) == (
            "p",
            "The P preset",
            2,
            None,
        )
        async with rt.presets.acquire_scope("p") as generation:
            assert generation.tool_names() == ("alpha",)
        assert "inner" in recorder.heard


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("id: ''\nplugins: []", "id must be a non-empty string"),
        ("id: p", "has no plugins list"),
        (
            "id: p\nplugins: [{config: {}}]",
            r"plugins\[0\].name must be a non-empty string",
        ),
        ("id: p\nplugins: [{name: a, extra: 1}]", "unknown keys"),
        (
            "id: p\nplugins: [{name: a, config: [1]}]",
            r"plugins\[0\].config must be a mapping",
        ),
        ("id: p\norder: x\nplugins: []", "order must be a number"),
        ("- 1", "must be a mapping"),
        ("id: [", "cannot read preset file"),
    ],
)
def test_malformed_documents_name_what_is_wrong(
    tmp_path: object, document: str, message: str
) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "bad.yml"
    path.write_text(document)
    with pytest.raises(dsh.PresetError, match=message):
        dsh.load_preset(path)
