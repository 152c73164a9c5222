"""``python -m dsh_trio.cli`` as a real process with piped input (no network)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path


def _run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_TRIO_")}
    return subprocess.run(
        [sys.executable, "-m", "dsh_trio.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_piped_chat_then_sessions_show_and_resume(tmp_path: Path) -> None:
    store = str(tmp_path)
    chat = _run("chat", "--session-dir", store, stdin="hello\nhow are you?\n")
    assert chat.returncode == 0, chat.stderr
    assert 'You said: "hello" (your message #1' in chat.stdout
    assert 'You said: "how are you?" (your message #2' in chat.stdout
    assert "Traceback" not in chat.stderr
    match = re.search(
        r"^session (\S+) with the offline demo model", chat.stderr, re.MULTILINE
    )
    assert match is not None, chat.stderr
    sid = match.group(1)
    assert list(tmp_path.glob(f"*/{sid}/session.v3.jsonl"))

    listing = _run("sessions", "--session-dir", store)
    assert listing.returncode == 0
    assert re.search(
        rf"^{sid}\s+\S+ \S+\s+2\s+how are you\?$", listing.stdout, re.MULTILINE
    ), listing.stdout

    resumed = _run("chat", "--session-dir", store, "--resume", sid, stdin="and now?\n")
    assert resumed.returncode == 0, resumed.stderr
    assert "(your message #3" in resumed.stdout

    show = _run("show", sid, "--session-dir", store)
    assert show.returncode == 0
    assert show.stdout.count("ended: completed") == 3
    assert "=== turn 3 ===" in show.stdout
    assert "user: and now?" in show.stdout

    unknown = _run("show", "nope", "--session-dir", store)
    assert unknown.returncode == 1
    assert unknown.stdout == ""
    assert "no session 'nope'" in unknown.stderr
