"""With few file descriptors, many live agents lose nothing: idle writers hold no file.

A child process lowers its own ``RLIMIT_NOFILE`` to 256, so the test process keeps
its limit. It creates 1,000 agents on one JSONL root (all live at once), runs one
turn on each (all at once), flushes and disposes them; then every log must load
complete. The child also counts its open descriptors: 1,000 idle agents must hold
none.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    sys.platform == "win32", reason="RLIMIT_NOFILE is POSIX"
)

CHILD = textwrap.dedent(
    """
    import json, os, resource, sys

    import trio

    import dsh_trio as dsh
    from dsh_trio.testing import ScriptedModel, reply

    AGENTS = 1000
    LIMIT = 256
    root = sys.argv[1]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, hard))
    OPTIONS = dsh.AgentOptions(provider="scripted", model="m")

    def open_fds():
        return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0

    async def main():
        report = {}
        errors = []
        model = ScriptedModel(default=reply("done"))
        async with dsh.open_runtime(
            models={"scripted": model}, persistence=dsh.JsonlPersistence(root)
        ) as runtime:
            runtime.events.on("agent/error", lambda e: errors.append(repr(e.error)))
            before = open_fds()
            agents = [
                (await runtime.agents.create(f"agent-{i}", options=OPTIONS)).agent
                for i in range(AGENTS)
            ]
            report["fds_created"] = open_fds() - before
            for a in agents:
                a.followup(dsh.user_message(f"hello {a.id}"))
            async with trio.open_nursery() as nursery:
                for a in agents:
                    nursery.start_soon(a.when_idle)
            for a in agents:
                await a.flush()
            report["fds_idle"] = open_fds() - before
            report["reasons"] = sorted(
                {type(a.session.events[-1].data.reason).__name__ for a in agents}
            )
            report["counts"] = {a.id: len(a.session.events) for a in agents}
        report["errors"] = errors
        # Every log loads complete.
        persistence = dsh.JsonlPersistence(root)
        loaded = {}

        async def load(sid):
            writer, events = await persistence.open(sid)
            await writer.close()
            loaded[sid] = len(events)

        async with trio.open_nursery() as nursery:
            for i in range(AGENTS):
                nursery.start_soon(load, f"agent-{i}")
        report["loaded"] = loaded
        report["limit"] = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        print(json.dumps(report))

    trio.run(main)
    """
)


def test_a_thousand_agents_under_256_file_descriptors_lose_nothing(
    tmp_path: Path,
) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "sessions")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["limit"] == 256
    assert report["errors"] == []
    assert report["reasons"] == ["Completed"]
    # Idle agents hold no file: 1,000 of them open nothing.
    if sys.platform == "linux":
        assert report["fds_created"] <= 0
        assert report["fds_idle"] <= 0
    assert report["loaded"] == report["counts"]
    assert len(report["loaded"]) == 1000
