"""``dsh-trio chat`` driven through a pseudo-terminal, the way a person uses it.

The expect timeouts only guard against a hang: a timeout fails the test. The
offline model runs with ``--fast``; real routes reach the fake server of
``pty_driver.py`` (no network).
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pexpect  # type: ignore[import-untyped]

DRIVER = str(Path(__file__).with_name("pty_driver.py"))
HANG_GUARD = 60
ROUTE = [
    "--base-url",
    "http://fake.invalid/v1",
    "--model",
    "m1",
    "--api-key-env",
    "FAKE_KEY",
]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_TRIO_")}
    env.pop("DSH_TEST_FAIL_ONCE", None)
    env.update(TERM="xterm-256color", FAKE_KEY="k", **extra)
    return env


def spawn(*args: str, **env: str) -> pexpect.spawn:
    child = pexpect.spawn(
        sys.executable,
        [DRIVER, *args],
        env=_env(**env),
        encoding="utf-8",
        timeout=HANG_GUARD,
        dimensions=(24, 200),
    )
    child.logfile_read = io.StringIO()  # everything the terminal showed
    return child


def finish(child: pexpect.spawn) -> tuple[int, str]:
    """Wait for the end of the process: its exit status and remaining output."""
    child.expect(pexpect.EOF)
    rest = child.before
    child.close()
    assert child.exitstatus is not None, f"killed by signal {child.signalstatus}"
    return child.exitstatus, rest


def events(store: Path) -> Iterator[dict[str, object]]:
    for log in store.glob("*/*/session.v3.jsonl"):
        for line in log.read_text().splitlines()[1:]:
            yield json.loads(line)


def user_texts(store: Path) -> list[str]:
    return [
        block["text"]
        for ev in events(store)
        if ev["type"] == "user/message"
        for block in ev["data"]["content"]  # type: ignore[index]
        if block.get("type") == "text"
    ]


def test_resume_keeps_the_route(tmp_path: Path) -> None:
    store = str(tmp_path)
    child = spawn("chat", "--session-dir", store, *ROUTE)
    child.expect(r"session (\S+) with m1 via http://fake.invalid/v1")
    sid = child.match.group(1)
    child.expect("> ")
    child.send("hi\r")
    child.expect("reply from m1 via http://fake.invalid/v1")
    child.expect("> ")
    child.sendeof()
    status, rest = finish(child)
    assert status == 0
    # The hint is the full command: the route's flags are in it.
    assert (
        f"resume with: dsh-trio chat --resume {sid} --model m1 --base-url "
        f"http://fake.invalid/v1 --api-key-env FAKE_KEY --session-dir {store}"
    ) in rest

    # No model flags, and the id given by a prefix: the stored route is used.
    child = spawn("chat", "--session-dir", store, "--resume", sid[:8])
    child.expect(
        f"resumed session {sid} \\(1 turn so far\\) with m1 via http://fake.invalid/v1"
    )
    child.expect("> ")
    child.send("again\r")
    child.expect("reply from m1 via http://fake.invalid/v1")
    child.expect("> ")
    child.sendeof()
    assert finish(child)[0] == 0

    # A flag overrides the stored route; --continue finds the latest session.
    child = spawn("chat", "--session-dir", store, "-c", "--model", "m2")
    child.expect(
        f"resumed session {sid} \\(2 turns so far\\) with m2 via http://fake.invalid/v1"
    )
    child.expect("> ")
    child.sendeof()
    assert finish(child)[0] == 0


def test_arrow_keys_edit_the_line_and_never_reach_the_log(tmp_path: Path) -> None:
    child = spawn("chat", "--fast", "--session-dir", str(tmp_path))
    child.expect("> ")
    # Left twice, insert X: "helXlo".
    child.send("hello\x1b[D\x1b[DX\r")
    child.expect('You said: "helXlo"')
    child.expect("> ")
    # Up recalls the previous line from the history.
    child.send("\x1b[A\r")
    child.expect(r'You said: "helXlo" \(your message #2')
    child.expect("> ")
    child.sendeof()
    assert finish(child)[0] == 0
    assert user_texts(tmp_path) == ["helXlo", "helXlo"]
    assert all("\x1b" not in json.dumps(ev) for ev in events(tmp_path))
    # The history file is kept beside the sessions.
    assert (tmp_path / "chat-history").read_text().splitlines()[-1] == "helXlo"


def test_ctrl_c_on_a_typed_line_clears_it_and_twice_on_an_empty_one_quits(
    tmp_path: Path,
) -> None:
    child = spawn("chat", "--fast", "--session-dir", str(tmp_path))
    child.expect("> ")
    child.send("half typed\x03")
    child.expect(r"\[line cleared\]")
    child.expect("> ")
    child.send("\x03")
    child.expect(r"\[press Ctrl-C again to quit, or Ctrl-D\]")
    child.expect("> ")
    # Still chatting: a line after the first Ctrl-C disarms the second.
    child.send("still here\r")
    child.expect('You said: "still here"')
    child.expect("> ")
    child.send("\x03")
    child.expect("again to quit")
    child.expect("> ")
    child.send("\x03")
    status, rest = finish(child)
    assert status == 0
    assert "resume with: dsh-trio chat --resume" in rest
    assert user_texts(tmp_path) == ["still here"]


def test_a_bad_session_dir_exits_2_before_the_prompt(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    child = spawn("chat", "--fast", "--session-dir", str(blocker / "sessions"))
    status, out = finish(child)
    assert status == 2
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines == [
        (
            f"dsh-trio chat: the session directory {blocker / 'sessions'} is below "
            f"{blocker}, which is not a directory"
        )
    ]
    assert "> " not in out


def test_a_mid_stream_retry_shows_the_partial_text_once(tmp_path: Path) -> None:
    child = spawn(
        "chat", "--session-dir", str(tmp_path), *ROUTE, DSH_TEST_FAIL_ONCE="1"
    )
    child.expect("> ")
    child.send("go\r")
    child.expect(r"retry 1/5 in [\d.]+ s; the partial reply above is not repeated\]")
    child.expect("beta gamma")
    child.expect("> ")
    child.sendeof()
    assert finish(child)[0] == 0
    shown = child.logfile_read.getvalue()
    assert shown.count("Alpha") == 1, shown
    assert re.search(r"Alpha \r?\n\[request failed: connection reset \[SERVER\]", shown)
    assert re.search(r"not repeated\]\r?\nbeta gamma\r?\n", shown), shown


def test_the_usage_line_appears_after_each_turn_and_on_request(tmp_path: Path) -> None:
    child = spawn("chat", "--fast", "--session-dir", str(tmp_path))
    child.expect("> ")
    child.send("hi\r")
    child.expect(r"\[tokens: (\d+) in, (\d+) out; session: \1 in, \2 out\]")
    child.expect("> ")
    child.send("/usage\r")
    child.expect(r"tokens used in session \S+: \d+ in, \d+ out")
    child.expect("> ")
    child.sendeof()
    assert finish(child)[0] == 0
