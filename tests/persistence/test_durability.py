"""Durability you can observe: write faults reach the agent at once and fail its turn.

For each write fault (read-only root, root replaced by a file, full disk, file
descriptors exhausted, the same id stored by another owner): the first turn after
the fault ends ``Errored`` with code ``PERSISTENCE``, after an ``agent/error`` of
phase ``persistence`` and an error on the ``dsh_trio`` log; no ``Completed`` turn is
reported for events that are not written; ``flush()`` raises
:class:`PersistenceError`, and so does waking input, until a flush succeeds.

The faults are injected deterministically (tests may run as root, which ignores
file permissions): the writer's one ``open`` and one ``write`` helper raise the
``OSError`` the kernel would, or the root directory really is replaced by a file.
"""

from __future__ import annotations

import errno
import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import dsh_trio as dsh
from dsh_trio.events import AgentErrorEvent
from dsh_trio.persistence import _jsonl_writer
from dsh_trio.persistence._jsonl_writer import JsonlWriter
from dsh_trio.testing import ScriptedModel, gate, reply
from dsh_trio.values import event_to_json

OPTIONS = dsh.AgentOptions(provider="scripted", model="m")


# --------------------------------------------------------------------------- faults


@attrs.define
class Fault:
    """One way the disk refuses a write: ``inject`` starts it, returning its undo."""

    name: str
    errno: int | None
    inject: Callable[[pytest.MonkeyPatch, Path], Callable[[], None]]
    recoverable: bool = True


def _open_fails(code: int, text: str) -> Callable[..., Callable[[], None]]:
    def inject(monkeypatch: pytest.MonkeyPatch, root: Path) -> Callable[[], None]:
        real = _jsonl_writer.open_file

        def refuse(path: str, flags: int, mode: int = 0o600) -> tuple[int, object]:
            raise OSError(code, text, path)

        monkeypatch.setattr(_jsonl_writer, "open_file", refuse)
        return lambda: monkeypatch.setattr(_jsonl_writer, "open_file", real)

    return inject


def _disk_full(monkeypatch: pytest.MonkeyPatch, root: Path) -> Callable[[], None]:
    real = _jsonl_writer.write_all

    def half_then_enospc(fd: int, data: bytes) -> None:
        real(fd, data[: len(data) // 2])  # a partial write, as a full disk leaves
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_jsonl_writer, "write_all", half_then_enospc)
    return lambda: monkeypatch.setattr(_jsonl_writer, "write_all", real)


def _root_is_a_file(monkeypatch: pytest.MonkeyPatch, root: Path) -> Callable[[], None]:
    moved = root.with_name(root.name + ".moved")
    root.rename(moved)
    root.write_text("not a directory\n")

    def undo() -> None:
        root.unlink()
        moved.rename(root)

    return undo


def _stored_by_another_owner(
    monkeypatch: pytest.MonkeyPatch, root: Path
) -> Callable[[], None]:
    # Another owner, which ignored the lease, stored the same id first.
    (session_dir,) = (root / "_no-cwd").iterdir()
    log = session_dir / "session.v3.jsonl"
    log.write_bytes(FOREIGN_LOG)
    return lambda: None


FOREIGN_LOG = (
    b'{"type":"session","version":3,"id":"s1","createdAt":1,"isSeeded":false,'
    b'"delegationDepth":0}\n'
)

FAULTS = [
    Fault("read-only root", errno.EROFS, _open_fails(errno.EROFS, "Read-only file system")),
    Fault("root is a file", errno.ENOTDIR, _root_is_a_file),
    Fault("disk full", errno.ENOSPC, _disk_full),
    Fault("no file descriptors", errno.EMFILE, _open_fails(errno.EMFILE, "Too many open files")),
    Fault("same id stored elsewhere", None, _stored_by_another_owner, recoverable=False),
]  # fmt: skip


# --------------------------------------------------------------------------- helpers


def watch(runtime: dsh.Runtime) -> list[str]:
    """``agent/error`` and ``turn/end`` in the order they happen."""
    lines: list[str] = []

    def on_error(e: AgentErrorEvent) -> None:
        lines.append(f"agent/error {e.phase} {type(e.error).__name__}")

    def on_event(e: dsh.SessionEventAppended) -> None:
        if e.event.type == "turn/end":
            lines.append(f"turn/end {e.event.data.reason.TAG}")

    runtime.events.on("agent/error", on_error)
    runtime.events.on("session/event", on_event)
    return lines


def stored_events(root: Path) -> list[dict[str, Any]]:
    """The events of the one log under ``root`` (none if there is no log)."""
    if root.is_file():  # replaced by a file: the log is where the directory went
        root = root.with_name(root.name + ".moved")
    logs = list(root.glob("*/*/session.v3.jsonl")) if root.is_dir() else []
    if not logs:
        return []
    (log,) = logs
    lines = log.read_bytes().split(b"\n")[1:-1]
    return [json.loads(line) for line in lines]


def assert_no_unwritten_success(
    events: Sequence[dsh.SessionEvent], stored: int
) -> None:
    """Every turn that ended ``Completed`` had all its events written before its end."""
    for ev in events:
        if ev.type == "turn/end" and isinstance(ev.data.reason, dsh.Completed):
            assert ev.seq <= stored, f"turn {ev.data.turn} completed unwritten"


def last_turn_end(agent: dsh.Agent) -> Any:
    return [e for e in agent.session.events if e.type == "turn/end"][-1].data


# --------------------------------------------------------------------------- the faults


# The same id stored by another owner can only meet a writer's first write.
CASES = [
    pytest.param(fault, when, id=f"{fault.name}-{when}")
    for fault in FAULTS
    for when in ("first write", "after a turn")
    if fault.recoverable or when == "first write"
]


@pytest.mark.parametrize(("fault", "when"), CASES)
async def test_a_write_fault_fails_the_first_turn_after_it(
    fault: Fault,
    when: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    root = tmp_path / "sessions"
    model = ScriptedModel(default=reply("fine"))
    persistence = dsh.JsonlPersistence(root)
    undo: Callable[[], None] = lambda: None  # noqa: E731
    try:
        async with dsh.open_runtime(
            models={"scripted": model}, persistence=persistence
        ) as runtime:
            lines = watch(runtime)
            handle = await runtime.agents.create("s1", options=OPTIONS)
            agent = handle.agent
            if when == "after a turn":
                agent.followup(dsh.user_message("before"))
                await agent.when_idle()
                await agent.flush()
                assert last_turn_end(agent).reason == dsh.Completed()
            lines.clear()
            caplog.clear()
            undo = fault.inject(monkeypatch, root)

            agent.followup(dsh.user_message("during"))
            await agent.when_idle()

            # The turn ends with the persistence error, reported before its end.
            reason = last_turn_end(agent).reason
            assert isinstance(reason, dsh.Errored)
            assert reason.error.code == "PERSISTENCE"
            assert '"s1"' in reason.error.message
            assert lines == [
                "agent/error persistence PersistenceError",
                "agent/error turn PersistenceError",
                "turn/end error",
            ]
            logged = [
                r
                for r in caplog.records
                if r.name == "dsh_trio" and r.levelno >= logging.ERROR
            ]
            assert len(logged) == 1 and '"s1"' in logged[0].getMessage()

            # flush() raises, with the writer's error as the cause.
            with pytest.raises(dsh.PersistenceError) as info:
                await agent.flush()
            assert info.value.session_id == "s1"
            assert info.value.errno == fault.errno
            assert isinstance(info.value.__cause__, OSError)
            # Waking input is refused (nothing is queued); other input is kept.
            pending = agent.inbox.next_turn
            wakes: list[Callable[[dsh.UserMessage], None]] = [
                agent.followup,
                agent.steer,
                lambda m: agent.send(m, "next-turn", True),
            ]
            for wake in wakes:
                with pytest.raises(dsh.PersistenceError, match='"s1"') as refused:
                    wake(dsh.user_message("refused"))
                assert isinstance(refused.value.__cause__, OSError)
            assert agent.inbox.next_turn == pending
            assert agent.status is dsh.AgentStatus.IDLE
            assert_no_unwritten_success(agent.session.events, len(stored_events(root)))

            if fault.recoverable:
                undo()
                undo = lambda: None  # noqa: E731
                await agent.flush()  # the retry writes everything: the fault is over
                assert len(stored_events(root)) == len(agent.session.events)
                agent.followup(dsh.user_message("after"))
                await agent.when_idle()
                assert last_turn_end(agent).reason == dsh.Completed()
                await handle.dispose()
                assert stored_events(root) == [
                    event_to_json(e) for e in agent.session.events
                ]
            else:
                assert (root / "_no-cwd" / "s1" / "session.v3.jsonl").read_bytes() == (
                    FOREIGN_LOG  # the other owner's log is left alone
                )
                with pytest.raises(dsh.PersistenceError):
                    await handle.dispose()
    finally:
        undo()


async def test_the_fault_is_reported_while_the_turn_still_runs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``agent/error`` comes from the failed write itself, not from a later flush."""
    g = gate(reply("late"))
    persistence = BreakablePersistence(tmp_path)
    async with dsh.open_runtime(
        models={"scripted": ScriptedModel(g, default=reply("ok"))},
        persistence=persistence,
    ) as runtime:
        errors: list[AgentErrorEvent] = []
        runtime.events.on("agent/error", errors.append)
        handle = await runtime.agents.create("s1", options=OPTIONS)
        agent = handle.agent
        persistence.broken = True
        agent.followup(dsh.user_message("hi"))
        await g.wait_reached()
        await trio.testing.wait_all_tasks_blocked()
        # The model stream is still held at the gate: the turn is open.
        assert agent.status is dsh.AgentStatus.RUNNING
        assert not any(e.type == "turn/end" for e in agent.session.events)
        assert [(e.phase, e.turn) for e in errors] == [("persistence", 1)]
        assert isinstance(errors[0].error, dsh.PersistenceError)
        assert "No space left" in str(errors[0].error)
        assert any("No space left" in r.getMessage() for r in caplog.records)
        with pytest.raises(dsh.PersistenceError):
            agent.steer(dsh.user_message("refused at once"))
        g.release()
        await agent.when_idle()
        assert last_turn_end(agent).reason.error.code == "PERSISTENCE"
        # One report per fault: the retries at the turn's end did not repeat it.
        assert [e.phase for e in errors] == ["persistence", "turn"]
        persistence.broken = False
        await agent.flush()
        agent.followup(dsh.user_message("again"))  # accepted: the log is written
        await agent.when_idle()
        assert last_turn_end(agent).reason == dsh.Completed()
        await handle.dispose()


async def test_a_wake_latched_before_the_fault_starts_no_turn(tmp_path: Path) -> None:
    persistence = BreakablePersistence(tmp_path)
    model = ScriptedModel(default=reply("ok"))
    async with dsh.open_runtime(
        models={"scripted": model}, persistence=persistence
    ) as runtime:
        handle = await runtime.agents.create("s1", options=OPTIONS)
        agent = handle.agent

        async def maintenance(signal: dsh.CancelSignal) -> None:
            persistence.broken = True
            agent.followup(dsh.user_message("latched"))  # accepted: no fault yet
            await trio.testing.wait_all_tasks_blocked()  # its write fails

        await agent.run_maintenance(maintenance)
        # The latched wake parks its input instead of starting a turn.
        assert agent.status is dsh.AgentStatus.IDLE
        assert len(agent.inbox.next_turn) == 1
        assert not any(e.type == "turn/start" for e in agent.session.events)
        persistence.broken = False
        await agent.flush()
        agent.followup(dsh.user_message("now"))
        await agent.when_idle()
        assert last_turn_end(agent).reason == dsh.Completed()
        assert len(model.requests) == 2  # the parked prompt's turn, then this one
        await handle.dispose()


class BreakableWriter:
    """A JSONL writer that fails synchronously (no worker thread) while broken."""

    def __init__(self, inner: JsonlWriter, owner: BreakablePersistence) -> None:
        self._inner = inner
        self._owner = owner

    @property
    def header(self) -> dsh.SessionHeader:
        return self._inner.header

    @property
    def durable_seq(self) -> int:
        return self._inner.durable_seq

    async def append(self, events: Sequence[dsh.SessionEvent], *, sync: bool) -> None:
        if self._owner.broken:
            await trio.lowlevel.checkpoint()
            raise OSError(errno.ENOSPC, "No space left on device")
        await self._inner.append(events, sync=sync)

    async def close(self) -> None:
        await self._inner.close()


class BreakablePersistence:
    """A :class:`JsonlPersistence` whose writers fail while ``broken`` is set."""

    def __init__(self, root: Path) -> None:
        self.inner = dsh.JsonlPersistence(root)
        self.durability = self.inner.durability
        self.broken = False

    async def create(self, header: dsh.SessionHeader) -> BreakableWriter:
        return BreakableWriter(await self.inner.create(header), self)

    async def open(self, session_id: str) -> Any:
        writer, events = await self.inner.open(session_id)
        return BreakableWriter(writer, self), events

    async def exists(self, session_id: str) -> bool:
        return await self.inner.exists(session_id)

    async def list(self) -> list[dsh.SessionHeader]:
        return await self.inner.list()


# --------------------------------------------------------------------------- the same id


async def test_two_runtimes_creating_one_new_id_fail_at_create(tmp_path: Path) -> None:
    """The second owner of a new id is refused by ``create``, not at its first write."""
    async with (
        dsh.open_runtime(persistence=dsh.JsonlPersistence(tmp_path)) as first,
        dsh.open_runtime(persistence=dsh.JsonlPersistence(tmp_path)) as second,
    ):
        handle = await first.agents.create("same", options=OPTIONS)
        with pytest.raises(dsh.SessionLockedError, match='"same"'):
            await second.agents.create("same", options=OPTIONS)
        assert second.agents.get("same") is None
        handle.agent.inject(dsh.user_message("stored"))
        await handle.agent.flush()
        await handle.dispose()
        with pytest.raises(dsh.SessionExistsError):
            await second.agents.create("same", options=OPTIONS)


async def test_a_root_that_cannot_hold_sessions_fails_at_create(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    root.write_text("a file, not a directory\n")
    async with dsh.open_runtime(persistence=dsh.JsonlPersistence(root)) as runtime:
        with pytest.raises(OSError, match="sessions"):
            await runtime.agents.create("s1", options=OPTIONS)
        assert runtime.agents.get("s1") is None
        assert runtime.sessions.get("s1") is None
    assert root.read_text() == "a file, not a directory\n"


# --------------------------------------------------------------------------- no open file


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
async def test_idle_agents_hold_no_open_file(tmp_path: Path) -> None:
    def session_files() -> list[str]:
        found = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target.startswith(str(tmp_path)):
                found.append(target)
        return found

    model = ScriptedModel(default=reply("ok"))
    async with dsh.open_runtime(
        models={"scripted": model}, persistence=dsh.JsonlPersistence(tmp_path)
    ) as runtime:
        agents = [
            (await runtime.agents.create(f"a{i}", options=OPTIONS)).agent
            for i in range(20)
        ]
        assert session_files() == []  # created: claimed, nothing open
        for a in agents:
            a.followup(dsh.user_message("hi"))
        for a in agents:
            await a.when_idle()
            await a.flush()
        assert session_files() == []  # written: still nothing open
        resumed_id = agents[0].id
        first = runtime.agents.handle_of(agents[0])
        assert first is not None
        await first.dispose()
        handle = await runtime.agents.resume(resumed_id, options=OPTIONS)
        assert session_files() == []  # resumed: nothing open either
        await handle.dispose()
