"""A failed resume releases everything it took: the claim, the lease, every file."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import dsh_trio as dsh
from dsh_trio.persistence import _jsonl_lock
from dsh_trio.values import (
    InboxSplice,
    InboxTarget,
    SessionEvent,
    SessionHeader,
    SessionId,
)

OPTIONS = dsh.AgentOptions(provider="scripted", model="m")


def open_files_under(path: Path) -> list[str]:
    if not os.path.isdir("/proc/self/fd"):
        return []
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(path)):
            found.append(target)
    return found


def lease_of(root: Path, sid: str) -> bytes:
    (lock,) = root.glob(f"*/{sid}/session.lock")
    return lock.read_bytes().strip()


async def store_unreplayable_inbox(root: Path) -> None:
    """A log the loader reads but whose inbox splices do not fold."""
    writer = await dsh.JsonlPersistence(root).create(
        SessionHeader(id=SessionId("bad"), created_at=1)
    )
    splice = InboxSplice(target=InboxTarget.NEXT_TURN, start=5, removed_count=0)
    try:
        await writer.append(
            [SessionEvent(seq=0, time=1, type="agent/inbox/spliced", data=splice)],
            sync=True,
        )
    finally:
        await writer.close()


@pytest.mark.skipif(sys.platform == "win32", reason="no lease file check there")
async def test_a_failed_resume_can_be_retried_in_the_same_process(
    tmp_path: Path,
) -> None:
    await store_unreplayable_inbox(tmp_path)
    claims = set(_jsonl_lock._claims)
    async with dsh.open_runtime(persistence=dsh.JsonlPersistence(tmp_path)) as rt:
        for _ in range(2):  # the second attempt meets the same damage, not a lock
            with pytest.raises(dsh.SessionCorruptError, match="seq 0"):
                await rt.agents.resume("bad", options=OPTIONS)
            assert rt.agents.get("bad") is None
            assert set(_jsonl_lock._claims) == claims  # the write claim is released
            assert open_files_under(tmp_path) == []  # no file left open
            assert lease_of(tmp_path, "bad") == b""  # the lease is released
    # Another runtime (or process) may take the session: nothing holds it.
    writer, events = await dsh.JsonlPersistence(tmp_path).open("bad")
    await writer.close()
    assert [e.type for e in events] == ["agent/inbox/spliced"]


async def test_a_resume_of_a_live_id_releases_the_loaded_writer(tmp_path: Path) -> None:
    async with dsh.open_runtime(persistence=dsh.JsonlPersistence(tmp_path)) as rt:
        handle = await rt.agents.create("live", options=OPTIONS)
        handle.agent.inject(dsh.user_message("stored"))
        await handle.agent.flush()
        await handle.dispose()
        claims = set(_jsonl_lock._claims)

        async def setup(scope: dsh.AgentScope, agent: dsh.Agent) -> None:
            raise ValueError("setup refused")

        with pytest.raises(ValueError, match="setup refused"):
            await rt.agents.resume("live", options=OPTIONS, setup=setup)
        assert set(_jsonl_lock._claims) == claims
        assert open_files_under(tmp_path) == []
        resumed = await rt.agents.resume("live", options=OPTIONS)
        assert resumed.agent.inbox.next_turn == ()
        await resumed.dispose()
