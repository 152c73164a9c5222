"""``dsh-trio model set`` accepts only what the chat knows; ``model unset`` removes it."""

from __future__ import annotations

import io
import tomllib
from pathlib import Path

import pytest

from dsh_trio.cli import main
from dsh_trio.cli._known import KNOWN_EFFORTS


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def here(tmp_path: Path) -> list[str]:
    return ["--session-dir", str(tmp_path / "sessions")]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["nowhere", "m"],
            (
                "unknown provider 'nowhere': the default model needs one of deepseek, "
                "ollama, openai, offline (another OpenAI-compatible server: pass --base-url "
                "URL --model NAME to the chat)"
            ),
        ),
        (
            ["deepseek", "deepseek-v4-pro", "--effort", "insane"],
            (
                "unknown reasoning effort 'insane': known efforts are minimal, low, medium, "
                "high, xhigh, max, ultra (omit --effort for the model's default)"
            ),
        ),
        (
            ["offline", "gpt-4"],
            "the offline provider has one model, offline-demo; got 'gpt-4'",
        ),
    ],
)
def test_set_refuses_what_the_chat_could_not_use(
    args: list[str],
    said: str,
    here: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "model", "set", *args, *here)
    assert code == 2 and out == ""
    assert err == f"dsh-trio model: {said}\n"
    assert not (tmp_path / "profile.toml").exists()


@pytest.mark.parametrize("effort", KNOWN_EFFORTS)
def test_set_takes_every_known_effort(
    effort: str, here: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, _ = run(
        capsys, "model", "set", "openai", "gpt-5", "--effort", effort, *here
    )
    assert code == 0
    saved = tomllib.loads((tmp_path / "profile.toml").read_text(encoding="utf-8"))
    assert saved["default_model"]["reasoning_effort"] == effort


def test_unset_removes_the_default_and_keeps_the_rest(
    here: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    profile = tmp_path / "profile.toml"
    code, _, _ = run(capsys, "model", "unset", *here)
    assert code == 0  # nothing saved yet: fine, and said
    assert not profile.exists()
    profile.write_text('theme = "dark"\n', encoding="utf-8")
    assert run(capsys, "model", "set", "ollama", "llama3.2", *here)[0] == 0
    code, out, _ = run(capsys, "model", "unset", *here)
    assert code == 0 and out == f"default model removed from {profile}\n"
    assert tomllib.loads(profile.read_text(encoding="utf-8")) == {"theme": "dark"}
    code, out, _ = run(capsys, "model", "unset", *here)  # idempotent
    assert code == 0
    assert out == f"no default model saved in {profile}; nothing to remove\n"
    assert "no default model saved" in run(capsys, "model", *here)[1]
    # The chat is back on the offline demo model.
    monkeypatch.setattr("sys.stdin", io.StringIO("hello\n"))
    code, _, err = run(capsys, "chat", *here)
    assert code == 0 and "with the offline demo model" in err


def test_unset_leaves_a_malformed_profile_alone(
    here: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = tmp_path / "profile.toml"
    profile.write_text("default_model = [", encoding="utf-8")
    code, _, err = run(capsys, "model", "unset", *here)
    assert code == 2 and "is not valid TOML" in err
    assert profile.read_text(encoding="utf-8") == "default_model = ["


def test_the_help_lists_unset_and_what_set_accepts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["model", "--help"]) == 0
    assert "unset" in capsys.readouterr().out
    assert main(["model", "set", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "one of deepseek, ollama, openai, offline" in text
    assert "minimal, low, medium, high, xhigh, max" in text
