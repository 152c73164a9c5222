"""``dsh-trio model``: the default model in the config folder's profile, used by ``chat``."""

from __future__ import annotations

import io
import json
import tomllib
from pathlib import Path

import pytest

from dsh_trio.cli import main


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def profile(tmp_path: Path) -> dict[str, object]:
    return tomllib.loads((tmp_path / "profile.toml").read_text(encoding="utf-8"))


def headers(sessions: Path) -> list[dict[str, object]]:
    """The ``request/header`` data of every saved session."""
    found = []
    for log in sessions.rglob("session.v3.jsonl"):
        for line in log.read_text(encoding="utf-8").splitlines()[1:]:
            event = json.loads(line)
            if event["type"] == "request/header":
                found.append(event["data"]["header"]["config"])
    return found


def origins(sessions: Path) -> list[str]:
    return [
        json.loads(log.read_text(encoding="utf-8").splitlines()[0]).get("origin", "")
        for log in sessions.rglob("session.v3.jsonl")
    ]


def test_show_set_and_clear_the_effort(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sessions = str(tmp_path / "sessions")
    code, out, _ = run(capsys, "model", "--session-dir", sessions)
    assert code == 0 and "no default model saved" in out
    (tmp_path / "profile.toml").write_text('theme = "dark"\n', encoding="utf-8")
    code, out, _ = run(
        capsys,
        "model",
        "set",
        "deepseek",
        "deepseek-reasoner",
        "--effort",
        "high",
        "--session-dir",
        sessions,
    )
    assert code == 0
    assert "deepseek/deepseek-reasoner (reasoning effort high)" in out
    assert profile(tmp_path) == {
        "theme": "dark",
        "default_model": {
            "provider": "deepseek",
            "model": "deepseek-reasoner",
            "reasoning_effort": "high",
        },
    }
    code, out, _ = run(capsys, "model", "--session-dir", sessions)
    assert code == 0
    assert out.startswith(
        "default model: deepseek/deepseek-reasoner (reasoning effort high)"
    )
    run(capsys, "model", "set", "deepseek", "deepseek-chat", "--session-dir", sessions)
    assert profile(tmp_path)["default_model"] == {
        "provider": "deepseek",
        "model": "deepseek-chat",
    }


def test_the_profile_follows_the_session_directory_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DSH_TRIO_SESSION_DIR", str(tmp_path / "sessions"))
    assert run(capsys, "model", "set", "ollama", "qwen3")[0] == 0
    assert profile(tmp_path)["default_model"] == {
        "provider": "ollama",
        "model": "qwen3",
    }


def test_a_blank_model_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sessions = str(tmp_path / "sessions")
    code, _, err = run(capsys, "model", "set", "ollama", " ", "--session-dir", sessions)
    assert code == 2 and "model must be a non-blank str" in err
    assert not (tmp_path / "profile.toml").exists()


def test_a_malformed_profile_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "profile.toml").write_text("default_model = [", encoding="utf-8")
    code, _, err = run(capsys, "model", "--session-dir", str(tmp_path / "sessions"))
    # A profile the user must fix is a usage error: one line, status 2.
    assert code == 2 and "is not valid TOML" in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_chat_uses_the_saved_default_when_no_flag_names_a_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions = tmp_path / "sessions"
    run(
        capsys,
        "model",
        "set",
        "offline",
        "offline-demo",
        "--effort",
        "low",
        "--session-dir",
        str(sessions),
    )
    monkeypatch.setattr("sys.stdin", io.StringIO("hello\n"))
    code, out, _ = run(capsys, "chat", "--session-dir", str(sessions))
    assert code == 0 and "hello" in out
    (config,) = headers(sessions)
    assert config["provider"] == "offline" and config["reasoningEffort"] == "low"
    # the session records the route it ran on, so a resume keeps it
    assert origins(sessions) == [
        "dsh-trio chat --provider offline --model offline-demo"
    ]


def test_a_flag_wins_over_the_saved_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions = tmp_path / "sessions"
    # `model set` refuses an unknown provider; a profile edited by hand may hold one
    (tmp_path / "profile.toml").write_text(
        '[default_model]\nprovider = "nowhere"\nmodel = "m"\n', encoding="utf-8"
    )
    monkeypatch.setattr("sys.stdin", io.StringIO("hello\n"))
    # the saved default names an unknown provider: used, it is a usage error
    code, _, err = run(capsys, "chat", "--session-dir", str(sessions))
    assert code == 2 and "unknown provider 'nowhere'" in err
    monkeypatch.setattr("sys.stdin", io.StringIO("hello\n"))
    code, _, _ = run(
        capsys, "chat", "--provider", "offline", "--session-dir", str(sessions)
    )
    assert code == 0
    (config,) = headers(sessions)
    assert config["provider"] == "offline" and "reasoningEffort" not in config
