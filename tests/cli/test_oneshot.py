"""``dsh-trio chat PROMPT``: piped input joins the prompt; a turn that does not
complete makes the command fail, with its reason on stderr."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dsh_trio.cli import main
from dsh_trio.cli._exit import exit_status
from dsh_trio.cli._oneshot import one_shot_text
from dsh_trio.values import (
    Aborted,
    Blocked,
    Completed,
    Errored,
    HookCancel,
    Interrupted,
    LlmFailure,
    MaxTokens,
    UserCancel,
)

from .test_signals import read_until

HERE = Path(__file__).parent
DRIVER = str(HERE / "pty_driver.py")
EXAMPLE = HERE.parent.parent / "examples" / "presets"
ROUTE = ["--base-url", "http://fake.invalid/v1", "--model", "m1"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_TRIO_")}
    for name in ("DSH_TEST_GATE", "DSH_TEST_FAIL_ONCE", "DSH_TEST_FAIL_AUTH"):
        env.pop(name, None)
    env.update(extra)
    return env


def _run(*args: str, stdin: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dsh_trio.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=_env(**env),
        timeout=60,
        check=False,
    )


def _user_texts(store: Path) -> list[str]:
    texts = []
    for log in store.rglob("session.v3.jsonl"):
        for line in log.read_text(encoding="utf-8").splitlines()[1:]:
            event = json.loads(line)
            if event["type"] == "user/message":
                texts += [b["text"] for b in event["data"]["content"]]
    return texts


# ------------------------------------------------------------------ stdin and PROMPT


def test_piped_input_comes_first_then_a_blank_line_then_the_prompt(
    tmp_path: Path,
) -> None:
    piped = "def f():\n    return 1\n\n"
    done = _run("chat", "--session-dir", str(tmp_path), "summarize this", stdin=piped)
    assert done.returncode == 0, done.stderr
    # One turn, one message: the text as piped (its trailing line ends dropped).
    assert _user_texts(tmp_path) == ["def f():\n    return 1\n\nsummarize this"]
    assert done.stdout.startswith(
        'You said: "def f(): return 1 summarize this" (your message #1'
    )


def test_piped_input_without_a_prompt_is_one_turn_per_line(tmp_path: Path) -> None:
    done = _run("chat", "--session-dir", str(tmp_path), stdin="one\ntwo\n")
    assert done.returncode == 0, done.stderr
    assert sorted(_user_texts(tmp_path)) == ["one", "two"]


def test_empty_input_leaves_the_prompt_alone(tmp_path: Path) -> None:
    done = _run("chat", "--session-dir", str(tmp_path), "just this", stdin=" \n\n")
    assert done.returncode == 0, done.stderr
    assert _user_texts(tmp_path) == ["just this"]


def test_piped_text_that_starts_with_a_slash_is_a_message(tmp_path: Path) -> None:
    done = _run(
        "chat", "--session-dir", str(tmp_path), "what is this?", stdin="/help\n"
    )
    assert done.returncode == 0, done.stderr
    assert _user_texts(tmp_path) == ["/help\n\nwhat is this?"]
    assert "Commands:" not in done.stdout


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_is_not_read_and_an_unreadable_stdin_is_empty() -> None:
    assert one_shot_text("p", _Terminal("never read")) == "p"
    assert one_shot_text("p", None) == "p"
    closed = io.StringIO("x")
    closed.close()
    assert one_shot_text("p", closed) == "p"


def test_the_help_says_how_stdin_and_the_prompt_are_joined(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["chat", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "piped stdin comes first, then a blank line, then PROMPT" in text


# ------------------------------------------------------------------ exit status


@pytest.mark.parametrize(
    ("reason", "one_shot", "status"),
    [
        (None, True, 0),
        (Completed(), True, 0),
        (MaxTokens(), True, 0),
        (Blocked(), True, 1),
        (Aborted(UserCancel()), True, 1),
        (Aborted(HookCancel("a hook said stop")), True, 1),
        (Errored(LlmFailure("x", "SERVER")), True, 1),
        (Interrupted(), True, 1),
        (Blocked(), False, 0),
        (Aborted(UserCancel()), False, 0),
        (Errored(LlmFailure("x", "SERVER")), False, 1),
    ],
)
def test_the_exit_status_follows_the_last_turn(
    reason: object, one_shot: bool, status: int
) -> None:
    assert exit_status(reason, one_shot=one_shot) == status  # type: ignore[arg-type]


@pytest.fixture
def presets_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A config folder whose presets folder holds the example preset and its plugins."""
    folder = tmp_path / "presets"
    folder.mkdir()
    for name in ("assistant.yaml", "notes_plugins.py"):
        shutil.copy(EXAMPLE / name, folder / name)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the chat appends the folder
    return tmp_path


def test_a_blocked_one_shot_turn_exits_1_with_the_reason_on_stderr(
    presets_home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    here = ["--session-dir", str(presets_home / "sessions"), "--preset", "assistant"]
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(["chat", *here, "my password is hunter2"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "[turn blocked by a pre-step hook]" in captured.err
    # A chat fed line by line goes on after a blocked turn, and ends well.
    monkeypatch.setattr("sys.stdin", io.StringIO("my password is hunter2\nhello\n"))
    assert main(["chat", *here]) == 0
    assert "[turn blocked by a pre-step hook]" in capsys.readouterr().err


def test_a_failed_one_shot_turn_exits_1(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, DRIVER, "chat", "--session-dir", str(tmp_path), *ROUTE, "hi"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=_env(DSH_TEST_FAIL_AUTH="1"),
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert "error: the key was refused [AUTH]" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.skipif(not hasattr(signal, "SIGTERM"), reason="POSIX signals")
def test_a_one_shot_turn_cancelled_by_a_signal_exits_1(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    process = subprocess.Popen(
        [sys.executable, DRIVER, "chat", "--session-dir", str(tmp_path), *ROUTE, "go"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(DSH_TEST_GATE=str(gate)),
    )
    try:
        assert process.stdout is not None
        read_until(process.stdout, b"Alpha ")  # the reply is streaming, held open
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    stderr = err.decode()
    assert process.returncode == 1, stderr
    assert "[SIGTERM: cancelling the reply and ending the chat]" in stderr
    assert "[cancelled]" in stderr
    assert "Traceback" not in stderr
