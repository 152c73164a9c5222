"""The default model: the TOML profile, atomic saves, and the route rewrite with its notice."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

import dsh_trio as dsh
from dsh_trio.composition import DefaultModel, ModelSelection
from dsh_trio.composition._model import MODEL_SELECTION_PLUGIN, model_changed_notice
from dsh_trio.errors import ProfileError
from dsh_trio.testing import ScriptedModel, reply

DEEPSEEK = ModelSelection(provider="deepseek", model="deepseek-flash")

OLD_PROFILE = """\
# my settings
theme = "dark"

[default_model]
provider = "openai"
model = "gpt-4o"
reasoning_effort = "high"
temperature_hint = 0.2

[other]
keep = [1, 2]
"""


def read(path: Path) -> dict[str, object]:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# ----------------------------------------------------------------------- values


def test_a_selection_needs_non_blank_strings() -> None:
    assert DEEPSEEK.reasoning_effort is None
    with pytest.raises(
        ValueError, match=r"ModelSelection\.provider must be a non-blank"
    ):
        ModelSelection(provider=" ", model="m")
    with pytest.raises(ValueError, match=r"ModelSelection\.model must be a non-blank"):
        ModelSelection(provider="p", model=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="reasoning_effort"):
        ModelSelection(provider="p", model="m", reasoning_effort="")


# ---------------------------------------------------------------------- profile


async def test_without_a_profile_there_is_no_selection_and_saving_is_a_no_op(
    tmp_path: Path,
) -> None:
    model = DefaultModel()
    assert model.profile is None
    assert model.current_selection() is None
    await model.save_selection(DEEPSEEK)
    assert model.current_selection() is None
    assert names(tmp_path) == []


async def test_a_missing_profile_has_no_selection_and_the_first_save_makes_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "config" / "profile.toml"
    model = DefaultModel(path)
    assert model.current_selection() is None
    await model.save_selection(DEEPSEEK)
    assert model.current_selection() == DEEPSEEK
    assert read(path) == {
        "default_model": {"provider": "deepseek", "model": "deepseek-flash"}
    }
    assert os.stat(path).st_mode & 0o777 == 0o600  # a new profile is the owner's


async def test_saving_keeps_other_keys_and_removes_an_omitted_effort(
    tmp_path: Path,
) -> None:
    path = tmp_path / "profile.toml"
    path.write_text(OLD_PROFILE, encoding="utf-8")
    os.chmod(path, 0o640)
    model = DefaultModel(path)
    assert model.current_selection() == ModelSelection(
        provider="openai", model="gpt-4o", reasoning_effort="high"
    )
    await model.save_selection(DEEPSEEK)
    assert read(path) == {
        "theme": "dark",
        "default_model": {
            "provider": "deepseek",
            "model": "deepseek-flash",
            "temperature_hint": 0.2,
        },
        "other": {"keep": [1, 2]},
    }
    assert os.stat(path).st_mode & 0o777 == 0o640  # the mode is kept
    effort = ModelSelection(provider="deepseek", model="r1", reasoning_effort="low")
    await model.save_selection(effort)
    assert model.current_selection() == effort
    assert names(tmp_path) == ["profile.toml"]  # no temp left


async def test_the_selection_is_read_at_call_time(tmp_path: Path) -> None:
    path = tmp_path / "profile.toml"
    model = DefaultModel(path)
    await model.save_selection(DEEPSEEK)
    assert model.current_selection() == DEEPSEEK
    # another process edits the profile
    other = tmp_path / "edited.toml"
    other.write_text('[default_model]\nprovider = "ollama"\nmodel = "qwen3"\n')
    os.replace(other, path)
    assert model.current_selection() == ModelSelection(provider="ollama", model="qwen3")
    path.unlink()
    assert model.current_selection() is None


async def test_a_malformed_profile_is_reported_and_never_overwritten(
    tmp_path: Path,
) -> None:
    path = tmp_path / "profile.toml"
    path.write_text("default_model = [", encoding="utf-8")
    model = DefaultModel(path)
    with pytest.raises(ProfileError, match="is not valid TOML") as info:
        model.current_selection()
    assert info.value.path == str(path)
    with pytest.raises(ProfileError, match="is not valid TOML"):
        await model.save_selection(DEEPSEEK)
    assert path.read_text(encoding="utf-8") == "default_model = ["
    path.write_text('[default_model]\nprovider = "p"\n', encoding="utf-8")
    with pytest.raises(ProfileError, match=r"\[default_model\]\.model must be"):
        model.current_selection()
    path.write_text('default_model = "p"\n', encoding="utf-8")
    with pytest.raises(ProfileError, match=r"\[default_model\] must be a table"):
        await model.save_selection(DEEPSEEK)


async def test_save_takes_only_a_selection(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="takes a ModelSelection, got dict"):
        await DefaultModel(tmp_path / "p.toml").save_selection({"provider": "x"})  # type: ignore[arg-type]


async def test_a_failed_save_leaves_the_old_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "profile.toml"
    path.write_text(OLD_PROFILE, encoding="utf-8")

    def no_rename(src: str, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("dsh_trio.composition._model.os.replace", no_rename)
    with pytest.raises(OSError, match="No space left"):
        await DefaultModel(path).save_selection(DEEPSEEK)
    assert path.read_text(encoding="utf-8") == OLD_PROFILE
    assert names(tmp_path) == ["profile.toml"]


#: A process that saves a selection and dies at ``CRASH_AT`` (no cleanup runs).
CRASHER = textwrap.dedent(
    """
    import os, sys, trio
    from dsh_trio.composition import DefaultModel, ModelSelection
    from dsh_trio.composition import _model

    path, where = sys.argv[1], sys.argv[2]
    real_replace, real_fsync = os.replace, os.fsync

    class Torn:
        def __init__(self, f):
            self.f = f
        def __enter__(self):
            return self
        def __exit__(self, *exc):
            return False
        def write(self, data):
            self.f.write(data[: len(data) // 2])
            self.f.flush()
            os._exit(9)  # dies halfway through writing the new content

    def replace(src, dst):
        if where == "before-rename":
            os._exit(9)
        real_replace(src, dst)
        if where == "after-rename":
            os._exit(9)

    if where == "mid-write":
        real_fdopen = os.fdopen
        _model.os.fdopen = lambda fd, mode: Torn(real_fdopen(fd, mode))
    _model.os.replace = replace
    selection = ModelSelection(provider="deepseek", model="deepseek-flash")
    trio.run(DefaultModel(path).save_selection, selection)
    """
)


@pytest.mark.parametrize(
    ("where", "survivor"),
    [("mid-write", "old"), ("before-rename", "old"), ("after-rename", "new")],
)
def test_a_crash_mid_save_leaves_the_old_or_the_new_profile_never_a_torn_one(
    tmp_path: Path, where: str, survivor: str
) -> None:
    path = tmp_path / "profile.toml"
    path.write_text(OLD_PROFILE, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", CRASHER, str(path), where],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 9, done.stderr
    model = DefaultModel(path)
    if survivor == "old":
        assert path.read_text(encoding="utf-8") == OLD_PROFILE
    else:
        assert model.current_selection() == DEEPSEEK
        assert read(path)["theme"] == "dark"


async def test_open_runtime_owns_the_profile(tmp_path: Path) -> None:
    path = tmp_path / "profile.toml"
    path.write_text(OLD_PROFILE, encoding="utf-8")
    async with dsh.open_runtime(profile=path) as runtime:
        assert runtime.default_model.profile == path
        assert runtime.default_model.current_selection() == ModelSelection(
            provider="openai", model="gpt-4o", reasoning_effort="high"
        )
    async with dsh.open_runtime() as runtime:
        assert runtime.default_model.current_selection() is None


# ------------------------------------------------------------ route and notice

OPTIONS = dsh.AgentOptions(provider="first", model="m1", reasoning_effort="medium")


def notices(agent: dsh.Agent) -> list[dsh.UserMessage]:
    return [
        e.data
        for e in agent.session.events
        if e.type == "user/message"
        and isinstance(e.data, dsh.UserMessage)
        and isinstance(e.data.source, dsh.PluginSource)
        and e.data.source.plugin == MODEL_SELECTION_PLUGIN
    ]


async def test_the_selection_routes_requests_and_a_switch_is_noticed_once(
    tmp_path: Path,
) -> None:
    first, second = ScriptedModel(), ScriptedModel()
    async with dsh.open_runtime(
        models={"first": first, "second": second}, profile=tmp_path / "p.toml"
    ) as runtime:
        dispose = dsh.install_model_selection(runtime)
        async with runtime.agents.open(options=OPTIONS) as agent:
            first.push(reply("one"))
            await agent.run(dsh.user_message("A"))  # no selection: the agent's route
            assert (first.requests[0].model, first.requests[0].reasoning_effort) == (
                "m1",
                "medium",
            )
            await runtime.default_model.save_selection(
                ModelSelection(provider="second", model="m2")
            )
            second.push(reply("two"), reply("three"))
            await agent.run(dsh.user_message("B"))
            request = second.requests[0]
            assert (request.model, request.reasoning_effort) == ("m2", None)
            text = (
                "[model changed: assistant turns above this point were generated by "
                "first/m1; the session continues with second/m2]"
            )
            assert [dsh.text_of(x) for x in request.messages[-2:]] == ["B", text]
            (notice,) = notices(agent)
            assert notice.source == dsh.PluginSource(
                MODEL_SELECTION_PLUGIN,
                form="notice",
                summary="first/m1 → second/m2",
            )
            await agent.run(dsh.user_message("C"))  # the header now says second/m2
            assert len(notices(agent)) == 1
            # an effort-only change reroutes but adds no notice
            await runtime.default_model.save_selection(
                ModelSelection(provider="second", model="m2", reasoning_effort="high")
            )
            second.push(reply("four"))
            await agent.run(dsh.user_message("D"))
            assert second.requests[-1].reasoning_effort == "high"
            assert len(notices(agent)) == 1
            dispose()
            await runtime.default_model.save_selection(
                ModelSelection(provider="first", model="m1")
            )
            second.push(reply("five"))
            # uninstalled: the saved selection routes nothing, the logged route stays
            await agent.run(dsh.user_message("E"))
            assert len(second.requests) == 4 and len(first.requests) == 1
            assert len(notices(agent)) == 1


async def test_a_switch_within_a_provider_names_the_models_alone() -> None:
    previous = dsh.CallConfig(provider="deepseek", model="deepseek-flash")
    notice = model_changed_notice(
        previous, ModelSelection(provider="deepseek", model="deepseek-v4-pro")
    )
    assert dsh.text_of(notice) == (
        "[model changed: assistant turns above this point were generated by "
        "deepseek-flash; the session continues with deepseek-v4-pro]"
    )


async def test_a_given_selection_source_is_read_per_step() -> None:
    first, second = ScriptedModel(), ScriptedModel()
    chosen: list[ModelSelection | None] = [None]
    async with dsh.open_runtime(models={"first": first, "second": second}) as runtime:
        dsh.install_model_selection(runtime, selection=lambda: chosen[0])
        async with runtime.agents.open(options=OPTIONS) as agent:
            first.push(reply("one"))
            await agent.run(dsh.user_message("A"))
            chosen[0] = ModelSelection(provider="second", model="m2")
            second.push(reply("two"))
            await agent.run(dsh.user_message("B"))
            assert len(second.requests) == 1 and len(notices(agent)) == 1
