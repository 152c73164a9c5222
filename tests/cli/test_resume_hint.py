"""The resume command a chat prints works when pasted, in another directory too."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from dsh_trio.cli._hints import location_flags

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "presets"


def _dsh_trio(
    words: list[str], cwd: Path, stdin: str
) -> subprocess.CompletedProcess[str]:
    assert words[0] == "dsh-trio"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_TRIO_")}
    env["HOME"] = str(cwd)
    return subprocess.run(
        [sys.executable, "-m", "dsh_trio.cli", *words[1:]],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=60,
        check=False,
    )


def test_the_resume_command_of_a_config_session_works_when_pasted(
    tmp_path: Path,
) -> None:
    project = tmp_path / "my project"
    (project / "conf").mkdir(parents=True)
    for name in ("assistant.yaml", "notes_plugins.py"):
        shutil.copy(EXAMPLE / name, project / "conf" / name)
    (project / "conf" / "runtime.yml").write_text(
        "presets: [assistant.yaml]\ndefault_preset: assistant\n", encoding="utf-8"
    )
    first = _dsh_trio(
        [
            "dsh-trio",
            "chat",
            "--config",
            "conf/runtime.yml",
            "--session-dir",
            "sessions",
        ],
        cwd=project,
        stdin="hello\n",
    )
    assert first.returncode == 0, first.stderr
    match = re.search(r"^resume with: (.*)$", first.stderr, re.M)
    assert match is not None, first.stderr
    command = shlex.split(match.group(1))
    sid = command[command.index("--resume") + 1]
    assert command[command.index("--config") + 1] == str(
        project / "conf" / "runtime.yml"
    )
    assert command[command.index("--session-dir") + 1] == str(project / "sessions")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    again = _dsh_trio(command, cwd=elsewhere, stdin="my password is x\n")
    assert again.returncode == 0, again.stderr
    assert f"resumed session {sid} (1 turn so far)" in again.stderr
    # The preset came back with the config: its guard blocks the password.
    assert "[turn blocked by a pre-step hook]" in again.stderr


def test_location_flags() -> None:
    args = argparse.Namespace(
        session_dir="rel", store="postgresql://me:pw@db/x", config="c d/rt.yml"
    )
    flags = shlex.split(location_flags(args, "/abs/rel"))
    assert flags == [
        "--session-dir",
        "/abs/rel",
        "--store",
        "postgresql://me:***@db/x",
        "--config",
        os.path.abspath("c d/rt.yml"),
    ]
    assert location_flags(argparse.Namespace(), "/abs/s") == ""
