"""``Agent.flush()``: the durability barrier."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
import trio
import trio.testing

import dsh_trio as dsh
from dsh_trio.persistence import _jsonl_writer
from dsh_trio.testing import ScriptedModel, reply
from dsh_trio.values import event_to_json

from .conftest import OPTIONS


def on_disk(root: Path, sid: str) -> list[object]:
    (log,) = root.glob(f"*/{sid}/session.v3.jsonl")
    return [json.loads(line) for line in log.read_bytes().split(b"\n")[1:-1]]


async def test_without_persistence_flush_returns_at_once_after_a_checkpoint(
    agent: dsh.Agent,
) -> None:
    agent.inject(dsh.user_message("queued"))
    await agent.flush()
    with trio.CancelScope() as scope:
        scope.cancel()
        await agent.flush()  # it checkpoints: the cancellation is delivered
    assert scope.cancelled_caught


@pytest.mark.parametrize("durability", ["turn", "always", "none"])
async def test_flush_writes_everything_appended_before_it_and_fsyncs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    ops: list[str] = []
    real_write, real_sync = _jsonl_writer.write_all, _jsonl_writer.sync_data

    def write(fd: int, data: bytes) -> None:
        ops.append("write")
        real_write(fd, data)

    def sync(fd: int) -> None:
        ops.append("sync")
        real_sync(fd)

    monkeypatch.setattr(_jsonl_writer, "write_all", write)
    monkeypatch.setattr(_jsonl_writer, "sync_data", sync)
    persistence = dsh.JsonlPersistence(tmp_path, durability=durability)  # type: ignore[arg-type]
    model = ScriptedModel(default=reply("answer"))
    async with dsh.open_runtime(
        models={"scripted": model}, persistence=persistence
    ) as runtime:
        handle = await runtime.agents.create("f", options=OPTIONS)
        agent = handle.agent
        agent.followup(dsh.user_message("one"))
        await agent.when_idle()
        agent.inject(dsh.user_message("parked"))  # no turn: only the splice
        ops.clear()
        await agent.flush()
        assert on_disk(tmp_path, "f") == [
            event_to_json(e) for e in agent.session.events
        ]
        if durability == "none":
            assert "sync" not in ops
        else:
            assert ops and ops[-1] == "sync"  # nothing written after the last fsync
        ops.clear()
        await agent.flush()  # nothing left to do
        assert ops == []
        await handle.dispose()
        await agent.flush()  # after disposal: everything was written, so it returns


async def test_a_failed_flush_keeps_the_events_for_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = _jsonl_writer.write_all
    full = True

    def write(fd: int, data: bytes) -> None:
        if full:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(fd, data)

    async with dsh.open_runtime(persistence=dsh.JsonlPersistence(tmp_path)) as runtime:
        handle = await runtime.agents.create("f", options=OPTIONS)
        agent = handle.agent
        agent.inject(dsh.user_message("first"))
        await agent.flush()
        monkeypatch.setattr(_jsonl_writer, "write_all", write)
        agent.inject(dsh.user_message("second"))
        for _ in range(2):  # every retry fails while the disk is full
            with pytest.raises(dsh.PersistenceError, match="No space") as info:
                await agent.flush()
            assert info.value.errno == errno.ENOSPC
        assert len(on_disk(tmp_path, "f")) == 1
        full = False
        await agent.flush()
        assert on_disk(tmp_path, "f") == [
            event_to_json(e) for e in agent.session.events
        ]
        await handle.dispose()


async def test_a_cancelled_flush_leaves_the_rest_queued(tmp_path: Path) -> None:
    async with dsh.open_runtime(persistence=dsh.JsonlPersistence(tmp_path)) as runtime:
        handle = await runtime.agents.create("f", options=OPTIONS)
        agent = handle.agent
        agent.inject(dsh.user_message("queued"))
        with trio.CancelScope() as scope:
            scope.cancel()
            await agent.flush()
        await agent.flush()
        assert on_disk(tmp_path, "f") == [
            event_to_json(e) for e in agent.session.events
        ]
        await handle.dispose()
