"""One writer per session across processes, with no file held open between writes.

A child process holds a session (a lease in its lock file, no open descriptor);
this process is refused while the child lives, and takes the session over once
the child is gone, even when the child was killed without closing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

import dsh_trio as dsh
from dsh_trio.values import SessionHeader, SessionId

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes")

CHILD = textwrap.dedent(
    """
    import sys

    import trio

    import dsh_trio as dsh
    from dsh_trio.values import SessionHeader, SessionId, TurnStart, SessionEvent

    root, action, sid = sys.argv[1:4]

    async def main():
        persistence = dsh.JsonlPersistence(root)
        if action == "create":
            writer = await persistence.create(SessionHeader(id=SessionId(sid), created_at=1))
        else:
            writer, _ = await persistence.open(sid)
        print("holding", flush=True)
        command = await trio.to_thread.run_sync(sys.stdin.readline)
        if command.strip() == "write":
            event = SessionEvent(
                seq=writer.durable_seq, time=1, type="turn/start", data=TurnStart(1)
            )
            await writer.append([event], sync=True)
        await writer.close()
        print("closed", flush=True)

    trio.run(main)
    """
)


def spawn(tmp_path: Path, action: str, sid: str) -> subprocess.Popen[str]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    return subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "sessions"), action, sid],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@asynccontextmanager
async def child(
    tmp_path: Path, action: str, sid: str
) -> AsyncIterator[subprocess.Popen[str]]:
    proc = spawn(tmp_path, action, sid)
    try:
        assert proc.stdout is not None
        line = await trio.to_thread.run_sync(proc.stdout.readline)
        assert line == "holding\n", proc.stderr.read() if proc.stderr else ""
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        await trio.to_thread.run_sync(proc.communicate)


async def tell(proc: subprocess.Popen[str], command: str) -> None:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(command + "\n")
    proc.stdin.flush()
    assert await trio.to_thread.run_sync(proc.stdout.readline) == "closed\n"


def open_fds_of(pid: int, under: Path) -> list[str]:
    """Files under ``under`` that process ``pid`` holds open (none known off Linux)."""
    if not os.path.isdir(f"/proc/{pid}/fd"):
        return []
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(under)):
            found.append(target)
    return found


async def test_a_new_id_claimed_by_another_process_fails_at_create(
    tmp_path: Path,
) -> None:
    persistence = dsh.JsonlPersistence(tmp_path / "sessions")
    header = SessionHeader(id=SessionId("race"), created_at=2)
    async with child(tmp_path, "create", "race") as proc:
        assert open_fds_of(proc.pid, tmp_path) == []  # the claim holds no file
        with pytest.raises(dsh.SessionLockedError, match=f"process {proc.pid}"):
            await persistence.create(header)
        await tell(proc, "write")  # the other owner stores it
    with pytest.raises(dsh.SessionExistsError):
        await persistence.create(header)


async def test_a_session_open_in_another_process_is_refused_until_it_closes(
    tmp_path: Path,
) -> None:
    persistence = dsh.JsonlPersistence(tmp_path / "sessions")
    writer = await persistence.create(SessionHeader(id=SessionId("s"), created_at=1))
    await writer.close()  # never written: nothing stored
    async with child(tmp_path, "create", "s") as proc:
        await tell(proc, "write")
    async with child(tmp_path, "open", "s") as proc:
        with pytest.raises(dsh.SessionLockedError, match="another process"):
            await persistence.open("s")
        await tell(proc, "close")
    writer, events = await persistence.open("s")
    await writer.close()
    assert [e.type for e in events] == ["turn/start"]


async def test_a_killed_owner_leaves_a_stale_lease_that_is_taken_over(
    tmp_path: Path,
) -> None:
    persistence = dsh.JsonlPersistence(tmp_path / "sessions")
    async with child(tmp_path, "create", "s") as proc:
        await tell(proc, "write")
    async with child(tmp_path, "open", "s") as proc:
        os.kill(proc.pid, signal.SIGKILL)
        await trio.to_thread.run_sync(proc.wait)
    writer, events = await persistence.open("s")  # the dead owner's lease is stale
    try:
        assert [e.type for e in events] == ["turn/start"]
        with pytest.raises(dsh.SessionLockedError):
            await dsh.JsonlPersistence(tmp_path / "sessions").open("s")
    finally:
        await writer.close()
