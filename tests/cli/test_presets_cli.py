"""``dsh-trio presets`` and ``chat --preset ID`` / ``--config FILE``."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import dsh_trio as dsh
from dsh_trio.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "presets"

BROKEN = """\
id: broken
name: Broken
plugins:
  - name: no_such_module_here:setup
"""


@pytest.fixture
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A config folder with the example preset and a broken one in ``presets/``."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    presets = tmp_path / "presets"
    presets.mkdir()
    shutil.copy(EXAMPLE / "assistant.yaml", presets / "assistant.yaml")
    (presets / "broken.yaml").write_text(BROKEN, encoding="utf-8")
    (presets / "notes.txt").write_text("not a preset", encoding="utf-8")
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def chat(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    stdin: str,
    *args: str,
) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    return run(capsys, "chat", "--fast", *args)


def events(sessions: Path, session_id: str | None = None) -> list[dict[str, object]]:
    logs = sorted(sessions.rglob("session.v3.jsonl"))
    if session_id is not None:
        logs = [p for p in logs if p.parent.name == session_id]
    (log,) = logs
    return [
        json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()[1:]
    ]


def test_no_presets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "presets", "--session-dir", str(tmp_path / "sessions"))
    assert code == 0 and out.startswith("no presets (add preset files to")


def test_the_list_shows_broken_presets_with_what_failed(
    config_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "presets", "--session-dir", str(config_dir / "sessions"))
    assert code == 1  # a preset is broken
    lines = out.splitlines()
    assert lines[0] == (
        "  assistant  Note-taking assistant - "
        "Keeps notes for the rest of the conversation; refuses secrets."
    )
    assert lines[1].startswith("  broken     BROKEN: ")
    assert "no_such_module_here" in lines[1] and "ModuleNotFoundError" in lines[1]


def test_the_list_marks_the_config_default(
    config_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = config_dir / "runtime.yaml"
    config.write_text(
        "presets:\n  - id: plain\n    plugins: []\ndefault_preset: assistant\n",
        encoding="utf-8",
    )
    code, out, _ = run(
        capsys,
        "presets",
        "--config",
        str(config),
        "--session-dir",
        str(config_dir / "sessions"),
    )
    assert code == 1
    assert [line[:12] for line in out.splitlines()] == [
        "* assistant ",
        "  broken    ",
        "  plain",
    ]


def test_chat_binds_its_agent_to_the_preset(
    config_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sessions = config_dir / "sessions"
    code, out, _ = chat(
        capsys,
        monkeypatch,
        "hello\n",
        "--preset",
        "assistant",
        "--session-dir",
        str(sessions),
    )
    assert code == 0 and "hello" in out
    log = events(sessions)
    system = [e for e in log if e["type"] == "system/message"]
    assert "Use take_note" in json.dumps(system)  # the preset's section
    header = next(e for e in log if e["type"] == "request/header")
    tools = header["data"]["header"]["tools"]  # type: ignore[index]
    assert [t["name"] for t in tools] == ["take_note"]  # the preset's tool


def test_the_preset_hook_guards_the_chat(
    config_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sessions = config_dir / "sessions"
    code, out, err = chat(
        capsys,
        monkeypatch,
        "my password is hunter2\n",
        "--preset",
        "assistant",
        "--session-dir",
        str(sessions),
    )
    assert code == 0 and "blocked" in err and out == ""
    ends = [e["data"] for e in events(sessions) if e["type"] == "turn/end"]
    assert ends == [{"turn": 1, "reason": {"kind": "blocked"}}]


def test_an_unknown_or_broken_preset_stops_the_chat(
    config_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sessions = str(config_dir / "sessions")
    code, _, err = chat(
        capsys, monkeypatch, "hi\n", "--preset", "nope", "--session-dir", sessions
    )
    assert code != 0
    assert 'no preset "nope" is registered (available: "assistant", "broken")' in err
    code, _, err = chat(
        capsys, monkeypatch, "hi\n", "--preset", "broken", "--session-dir", sessions
    )
    assert code != 0 and 'the preset "broken" is broken' in err


def test_a_config_declares_agents_beside_the_chat(
    config_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (config_dir / "presets" / "broken.yaml").unlink()
    config = config_dir / "runtime.yaml"
    config.write_text(
        "default_preset: assistant\nagents:\n  - id: helper\n    preset: assistant\n",
        encoding="utf-8",
    )
    declared: list[tuple[str, str | None]] = []
    real_open = dsh.open_runtime

    @contextlib.asynccontextmanager
    async def watching(**kwargs: Any) -> AsyncIterator[dsh.Runtime]:
        async with real_open(**kwargs) as runtime:
            helper = await runtime.agents.wait_for("helper")
            declared.append(
                (helper.agent.id, runtime.presets.composed_preset(helper.agent))
            )
            yield runtime

    monkeypatch.setattr("dsh_trio.cli._presets.open_runtime", watching)
    sessions = config_dir / "sessions"
    code, _, _ = chat(
        capsys,
        monkeypatch,
        "hello\n",
        "--config",
        str(config),
        "--session-dir",
        str(sessions),
    )
    assert code == 0
    assert declared == [("helper", "assistant")]  # started in the chat's runtime
    # the chat's own agent took the config's default preset
    system = [e for e in events(sessions) if e["type"] == "system/message"]
    assert "Use take_note" in json.dumps(system)


def test_chat_with_an_unknown_preset_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        capsys, "chat", "--session-dir", str(tmp_path / "s"), "--preset", "nope", "hi"
    )
    assert code == 2
    assert (
        err.strip() == 'dsh-trio chat: no preset "nope" is registered (available: none)'
    )
