"""The README's presets walkthrough runs as written on a fresh machine.

Fresh: ``HOME`` is an empty folder (no ``~/.dsh``), no ``PYTHONPATH`` beyond the one
that finds ``dsh_trio`` itself, and the commands run in a copy of the clone's
``examples/`` folder. ``dsh-trio`` is the command line of the sources under test.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import dsh_trio

ROOT = Path(__file__).resolve().parents[2]


def _walkthrough() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^## Presets\n(.*?)(?=^## )", text, re.M | re.S)
    assert section is not None
    blocks = re.findall(r"^```sh\n(.*?)^```$", section.group(1), re.M | re.S)
    (block,) = [str(b) for b in blocks if "dsh-trio presets" in b]
    return block


def test_the_presets_walkthrough_runs_as_written(tmp_path: Path) -> None:
    block = _walkthrough()
    clone = tmp_path / "clone"
    shutil.copytree(ROOT / "examples", clone / "examples")
    home = tmp_path / "home"
    home.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "dsh-trio"
    shim.write_text(
        f'#!/bin/sh\nexec {sys.executable} -m dsh_trio.cli "$@"\n', encoding="utf-8"
    )
    shim.chmod(0o755)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("DSH_TRIO_") and k != "PYTHONPATH"
    }
    env.update(
        HOME=str(home),
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        # Only what finds the package under test: never the examples.
        PYTHONPATH=str(Path(dsh_trio.__file__).parent.parent),
    )
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        input="please remember: buy milk\n",
        capture_output=True,
        text=True,
        cwd=clone,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert re.search(r"^  assistant\s+Note-taking assistant", done.stdout, re.M), (
        done.stdout
    )
    assert "BROKEN" not in done.stdout
    assert "default model:" in done.stdout
    assert "default model removed from" in done.stdout
    # The chats ran with their presets: the first turn went to the assistant.
    assert (home / ".dsh" / "presets" / "notes_plugins.py").exists()
    logs = list((home / ".dsh" / "sessions").rglob("session.v3.jsonl"))
    assert logs
    assert any("buy milk" in log.read_text(encoding="utf-8") for log in logs)
