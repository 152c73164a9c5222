"""A state machine for persistence: random turns, crashes at a random byte, loads, resumes.

One trio run per example (guest mode); each "life" is one ``open_runtime`` block
over the same JSONL directory with one agent, created or resumed. A crash snapshots
the log file, shuts the life down, and writes the snapshot back cut at a random byte
at or after the last byte known to be durable (fsynced), as a power loss would leave
it. A graceful restart disposes the agent instead. Either way a new life resumes the
session at once.

Checked after a crash and a resume:

* every event that was flushed (fsynced) before the crash survives, unchanged, and
  so does every complete line after it;
* every repaired log loads and resumes: an interrupted turn is closed, and the next
  turn continues the numbering;
* the inbox is restored: it equals the fold of the surviving splices (and the
  inbox at crash time when nothing was lost).

A crash at an fsync (``crash_at_fsync``) runs the agent on until a chosen fsync of
the log and cuts the file back to the size that fsync made durable: every synced
event must load, unchanged, and only the unsynced tail is lost.

The writer is wrapped by a recording writer that logs every batch written (its
events) and every fsync (each call of the JSONL writer's ``sync_data``), and checks
the durability policy as the log is written: with ``"always"`` every batch is
fsynced before the next one is written; with ``"turn"`` every batch that holds a
``turn/end`` (anywhere in it) is. On dispose (a restart, or the shutdown after a
crash's snapshot) everything written must be fsynced, unless durability is ``"none"``.

And after every step, for the live agent: the structural invariants of
:class:`~dsh_trio.testing.AgentStateMachine`'s log checker (over the whole log,
earlier lives included), and the durability policy as the agent reports it: with
``"always"`` every written event is durable, with ``"turn"`` at least everything up
to the last ``turn/end`` (so a turn is never reported ended before it is durable).
"""

from __future__ import annotations

import builtins
import contextlib
import itertools
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

import attrs
import trio
import trio.testing
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

import dsh_trio as dsh
from dsh_trio.persistence import _jsonl_writer
from dsh_trio.testing import GuestLoop, advance_to_next_deadline, answers, reply, sends
from dsh_trio.testing._strategies import CAUSES, Answer, Cancel, Send
from dsh_trio.testing.machine import (
    InvariantViolation,
    LogChecker,
    ModelDesk,
    RuntimeHost,
)
from dsh_trio.testing.machine._report import note
from dsh_trio.values import TurnEnd, event_to_json

SESSION_ID = "persisted"
OPTIONS = dsh.AgentOptions(provider="scripted", model="scripted-model")


# --------------------------------------------------------------------------- durability tracking


@attrs.define(eq=False)
class Batch:
    """One non-empty batch the recorder wrote: its first seq and its events' types."""

    first: int
    types: tuple[str, ...]

    def __str__(self) -> str:
        return (
            f"batch {self.first}-{self.first + len(self.types) - 1} {list(self.types)}"
        )


@attrs.define(eq=False)
class FsyncLog:
    """Every ``sync_data`` call of the JSONL writer, and an armed crash at one of them.

    ``crash_in`` counts down fsyncs; when it reaches the armed one, the log file is
    snapshotted right after that fsync returns (``snapshot``: its bytes and the
    size the fsync made durable), as a power loss at that instant would find it.
    """

    count: int = 0
    crash_in: int | None = None
    #: The log's bytes, and the size and event count the armed fsync made durable.
    snapshot: tuple[bytes, int, int] | None = None

    def passed(self, n: int, path: str, size: int, seq: int) -> None:
        """``n`` fsyncs of the log at ``path`` made ``seq`` events in ``size`` bytes durable."""
        if self.crash_in is None or n <= 0:
            return
        if self.crash_in >= n:
            self.crash_in -= n
            return
        self.crash_in = None
        self.snapshot = (_read(path), size, seq)


@attrs.define(eq=False)
class Durable:
    """What the disk is known to hold durably and what the recording writer saw.

    ``seq`` events in ``size`` bytes are durable; ``written_seq`` events in
    ``written_size`` bytes are written. ``unsynced`` are the batches written since
    the last fsync; ``breaches`` what broke the durability policy at a write.
    """

    durability: str
    fsyncs: FsyncLog
    seq: int = 0
    size: int = 0
    written_seq: int = 0
    written_size: int = 0
    writes: int = 0
    #: Whether the writer's last operation failed (a fault the recorder retries).
    failing: bool = False
    unsynced: list[Batch] = attrs.field(factory=list)
    breaches: list[str] = attrs.field(factory=list)

    def loaded(self, seq: int, size: int) -> None:
        """A log of ``seq`` events in ``size`` bytes was found on disk (durable)."""
        self.seq = self.written_seq = seq
        self.size = self.written_size = size
        self.unsynced.clear()

    def synced(self) -> None:
        self.seq, self.size = self.written_seq, self.written_size
        self.unsynced.clear()

    def before_write(self, batch: Batch) -> None:
        """Check the policy for what must be synced before ``batch`` is written."""
        for earlier in self.unsynced:
            if self.durability == "always":
                self.breaches.append(
                    f"durability 'always': {earlier} was not fsynced before {batch} was written"
                )
            elif self.durability == "turn" and "turn/end" in earlier.types:
                self.breaches.append(
                    f"durability 'turn': {earlier} holds a turn/end and was not fsynced "
                    f"before {batch} was written"
                )


class TrackingWriter:
    """A recording :class:`SessionWriter` over a JSONL writer.

    It logs every batch written and every fsync (the machine counts the writer's
    ``sync_data`` calls), checks the durability policy at each write, and tracks
    how far the log is durable. It does the disk work of an append inline instead
    of in a worker thread, so what the recorder puts in each batch (and so which
    batches are fsynced) depends only on trio's schedule, never on how fast a
    thread finishes.
    """

    def __init__(self, inner: Any, durable: Durable) -> None:
        self._inner = inner
        self._durable = durable

    @property
    def header(self) -> dsh.SessionHeader:
        return self._inner.header  # type: ignore[no-any-return]

    @property
    def durable_seq(self) -> int:
        return self._inner.durable_seq  # type: ignore[no-any-return]

    def take_lines(self) -> list[tuple[int, int, bytes]]:
        # The written lines the session settles into, as the inner writer gathers them.
        return self._inner.take_lines()  # type: ignore[no-any-return]

    async def append(self, events: Sequence[dsh.SessionEvent], *, sync: bool) -> None:
        inner = self._inner
        durable = self._durable
        if any(e.seq != inner.durable_seq + i for i, e in enumerate(events)):
            durable.failing = True
            await inner.append(events, sync=sync)  # raises PersistenceSeqError
        first = not inner._materialised  # the first write creates the file, fsynced
        batch = Batch(events[0].seq, tuple(e.type for e in events)) if events else None
        if batch is not None:
            durable.before_write(batch)
        before = durable.fsyncs.count
        try:
            inner._append_sync(tuple(events), sync)
        except BaseException:
            durable.failing = True
            raise
        durable.failing = False
        await trio.lowlevel.checkpoint()
        durable.written_seq, durable.written_size = inner.durable_seq, inner._size
        if batch is not None:
            durable.writes += 1
            durable.unsynced.append(batch)
        if (first and inner._materialised) or durable.fsyncs.count > before:
            durable.synced()
            durable.fsyncs.passed(
                durable.fsyncs.count - before,
                inner.path,
                inner._size,
                inner.durable_seq,
            )

    async def close(self) -> None:
        before = self._durable.fsyncs.count
        await self._inner.close()
        durable = self._durable
        if durable.fsyncs.count > before:
            durable.synced()
            inner = self._inner
            durable.fsyncs.passed(
                durable.fsyncs.count - before,
                inner.path,
                inner._size,
                inner.durable_seq,
            )


class TrackingPersistence:
    """A :class:`JsonlPersistence` whose writers track durability (one session)."""

    def __init__(self, root: str, durability: Any, fsyncs: FsyncLog) -> None:
        self.inner = dsh.JsonlPersistence(root, durability=durability)
        self.durability = durability
        self.durable = Durable(durability, fsyncs)
        #: The writer of the life (the last one made).
        self.writer: Any = None

    def path_for(self, header: dsh.SessionHeader) -> str:
        return self.inner.path_for(header)

    async def create(self, header: dsh.SessionHeader) -> TrackingWriter:
        writer = await self.inner.create(header)
        self.writer = writer
        return TrackingWriter(writer, self.durable)

    async def open(
        self, session_id: str
    ) -> tuple[TrackingWriter, list[dsh.SessionEvent]]:
        writer, events = await self.inner.open(session_id)
        # What a new process finds on disk (cut after its last intact line) is durable.
        self.durable.loaded(len(events), writer._size)
        self.writer = writer
        return TrackingWriter(writer, self.durable), events

    async def exists(self, session_id: str) -> bool:
        return await self.inner.exists(session_id)

    async def list(self) -> builtins.list[dsh.SessionHeader]:
        return await self.inner.list()


# --------------------------------------------------------------------------- the machine


def _fail(what: str) -> InvariantViolation:
    return InvariantViolation(what)


def _as_json(events: Sequence[dsh.SessionEvent]) -> list[object]:
    return [event_to_json(e) for e in events]


@attrs.define(eq=False)
class Life:
    """One ``open_runtime`` block and its agent."""

    host: RuntimeHost
    persistence: Any  # a TrackingPersistence, or a PgTrackingPersistence
    handle: dsh.AgentHandle
    checker: LogChecker

    @property
    def agent(self) -> dsh.Agent:
        return self.handle.agent


@attrs.define(eq=False)
class Expectation:
    """What the next load must find."""

    events: list[object]  # JSON of the events the file must start with
    durable_seq: int  # at least this many must survive
    inbox: tuple[tuple[dsh.UserMessage, ...], tuple[dsh.UserMessage, ...]] | None
    exists: bool


class PersistenceMachine(RuleBasedStateMachine):
    """Turns, crashes at a random byte, loads and resumes over one JSONL session."""

    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="dsh-trio-persistence-")
        self.clock = trio.testing.MockClock()
        self.loop = GuestLoop(clock=self.clock)
        self.desk = ModelDesk()
        self.durability = "turn"
        self.life: Life | None = None
        self.expect: Expectation | None = None
        self.fsync_crashes = 0  # crashes cut at an fsync
        # Every fsync of a log goes through the writer's sync_data: count them.
        self.fsyncs = FsyncLog()
        self._sync_data = _jsonl_writer.sync_data
        fsyncs, sync_data = self.fsyncs, self._sync_data

        def counted(fd: int) -> None:
            sync_data(fd)
            fsyncs.count += 1

        _jsonl_writer.sync_data = counted

    # ------------------------------------------------------------------ lives

    def _new_persistence(self) -> Any:
        """The persistence of a new life (the backend under test)."""
        return TrackingPersistence(self.root, self.durability, self.fsyncs)

    def _open_life(self, *, resume: bool) -> None:
        persistence = self._new_persistence()
        host = RuntimeHost(
            self.loop, models={"scripted": self.desk.model}, persistence=persistence
        )
        runtime = host.start()

        async def create() -> dsh.AgentHandle:
            if resume:
                return await runtime.agents.resume(SESSION_ID, options=OPTIONS)
            return await runtime.agents.create(SESSION_ID, options=OPTIONS)

        try:
            handle = self.loop.call(create)
        except dsh.SessionNotFoundError:
            if self.expect is not None and self.expect.exists:
                raise
            handle = self.loop.call(
                lambda: runtime.agents.create(SESSION_ID, options=OPTIONS)
            )
        self.life = Life(host, persistence, handle, LogChecker(allow_interrupted=True))

    def _log_path(self, life: Life) -> str:
        return str(life.persistence.path_for(life.agent.session.header))

    # ------------------------------------------------------------------ rules

    @initialize(
        durability=st.sampled_from(("turn", "always", "none")), seed=st.random_module()
    )
    def start(self, durability: str, seed: object) -> None:
        self.durability = durability
        self._open_life(resume=False)

    # Rules with nothing to act on do nothing rather than carry a precondition,
    # which would keep hypothesis's shrinker from deleting steps.

    @rule(op=sends())
    def send(self, op: Send) -> None:
        life = self.life
        if life is None:
            return

        def send_now() -> None:
            agent = life.agent
            try:
                if op.method == "followup":
                    agent.followup(op.message)
                elif op.method == "steer":
                    agent.steer(op.message)
                elif op.method == "inject":
                    agent.inject(op.message)
                else:
                    agent.send(op.message, op.target, op.wakeup)
            except dsh.DuplicateMessageError:
                pass

        self.loop.run_sync(send_now)

    @rule(message=st.sampled_from(("f0", "f1", "f2")))
    def followup_then_answer(self, message: str) -> None:
        """Queue a follow-up while a turn runs, then answer the held request.

        The turn ends and the follow-up's turn starts in the same tick, so the
        ``turn/end`` is inside a batch, not at its end; the durability check runs
        right after.
        """
        life = self.life
        if life is None or life.agent.status is not dsh.AgentStatus.RUNNING:
            return

        def send_now() -> None:
            with contextlib.suppress(dsh.DuplicateMessageError):
                life.agent.followup(dsh.user_message("later", id=message))

        self.loop.run_sync(send_now)
        if self.desk.unanswered:
            self.loop.run_sync(lambda: self.desk.answer(reply("ok")))
        self.live_log_is_well_formed()

    @rule(op=answers("reply", "tool-calls", "max-tokens", "fail", "hang", "gate"))
    def answer_model(self, op: Answer) -> None:
        if self.life is None or not self.desk.unanswered:
            return
        script = self.desk.script_for(op, ("lookup",), lambda name: "{}")
        self.loop.run_sync(lambda: self.desk.answer(script, hangs=op.kind == "hang"))

    @rule()
    def release_gate(self) -> None:
        if self.life is not None and self.desk.held_gate() is not None:
            self.loop.run_sync(self.desk.open_gate)

    @rule(
        op=st.sampled_from(
            [Cancel(c, k) for c, k in itertools.product(CAUSES, (False, True))]
        )
    )
    def cancel(self, op: Cancel) -> None:
        life = self.life
        if life is None:
            return
        self.loop.run_sync(
            lambda: life.agent.cancel(op.cause, keep_inbox=op.keep_inbox)
        )

    @rule(cut=st.integers(min_value=0, max_value=1 << 16))
    def crash(self, cut: int) -> None:
        """The process dies (the file keeps what was durable and some of the rest); a new one resumes."""
        life = self.life
        if life is None:
            return
        self._crash(life, cut)
        self._resume()

    def _crash(self, life: Life, cut: int) -> None:
        path = self._log_path(life)
        exists = os.path.exists(path)
        data = _read(path) if exists else b""
        durable = attrs.evolve(
            life.persistence.durable
        )  # as of now, not after the shutdown
        events = list(life.agent.session.events)
        inbox = (life.agent.inbox.next_turn, life.agent.inbox.next_step)
        self._stop(life)
        if not exists:
            self.expect = Expectation([], 0, None, exists=False)
            return
        floor = durable.size
        if not 0 < floor <= len(data):
            raise _fail(
                f"the durable size {floor} does not fit a log of {len(data)} bytes"
            )
        keep = floor + cut % (len(data) - floor + 1)
        note(
            "crash: cut inside the tail that was not durable"
            if keep < len(data)
            else "crash: the whole file kept"
        )
        _write(path, data[:keep])
        complete = data[:keep].count(b"\n") - 1  # the header is line 1
        self.expect = Expectation(
            _as_json(events[:complete]),
            durable.seq,
            inbox if keep == len(data) else None,
            exists=True,
        )

    @rule(skip=st.integers(min_value=0, max_value=2))
    def crash_at_fsync(self, skip: int) -> None:
        """Run the agent on until its ``skip+1``-th fsync from now; the power fails right after it.

        The file is cut back to the size that fsync made durable: everything not
        synced is lost, and only that. Without such an fsync, the crash happens
        once nothing is left to run, at the last durable byte.
        """
        life = self.life
        if life is None:
            return
        fsyncs = self.fsyncs
        fsyncs.crash_in, fsyncs.snapshot = skip, None
        try:
            for _ in range(200):
                if fsyncs.snapshot is not None:
                    break
                if self.loop.run_sync(self._release_one, life):
                    continue
                if life.agent.status is dsh.AgentStatus.IDLE:
                    break
                if not self.loop.call(advance_to_next_deadline, self.clock):
                    break
        finally:
            fsyncs.crash_in = None
        snapshot, fsyncs.snapshot = fsyncs.snapshot, None
        if snapshot is None:
            self._crash(life, 0)
            self._resume()
            return
        data, size, seq = snapshot
        path = self._log_path(life)
        events = list(life.agent.session.events)
        self._stop(life)
        complete = data[:size].count(b"\n") - 1  # the header is line 1
        if not 0 < size <= len(data) or complete != seq:
            raise _fail(
                f"an fsync made {seq} events in {size} bytes durable; the log held "
                f"{complete} complete events in them ({len(data)} bytes in all)"
            )
        note("crash: at an fsync, the unsynced tail lost")
        self.fsync_crashes += 1
        _write(path, data[:size])
        self.expect = Expectation(_as_json(events[:seq]), seq, None, exists=True)
        self._resume()

    @rule()
    def restart(self) -> None:
        """A clean shutdown (the agent is disposed, all it wrote is durable); a new process resumes."""
        life = self.life
        if life is None:
            return
        path = self._log_path(life)
        self._stop(life)
        exists = os.path.exists(path)
        events = life.agent.session.events
        self.expect = Expectation(
            _as_json(events), len(events), ((), ()), exists=exists
        )
        self._resume()

    def _resume(self) -> None:
        """Load and resume the session; check what survived, the repair and the inbox."""
        expect = self.expect
        assert self.life is None and expect is not None
        self._open_life(resume=True)
        life = self.life
        assert life is not None
        events = life.agent.session.events
        loaded = _as_json(events[: len(expect.events)])
        if len(events) < expect.durable_seq:
            raise _fail(
                f"{expect.durable_seq} events were durable before the crash; only {len(events)} loaded"
            )
        if loaded != expect.events:
            first = next(
                (
                    i
                    for i, (a, b) in enumerate(zip(loaded, expect.events, strict=False))
                    if a != b
                ),
                len(loaded),
            )
            raise _fail(
                f"the loaded log differs from what was written at seq {first}: "
                f"{loaded[first] if first < len(loaded) else 'missing'} != {expect.events[first]}"
            )
        life.checker.feed(events)
        if any(
            isinstance(e.data, TurnEnd) and isinstance(e.data.reason, dsh.Interrupted)
            for e in events[len(expect.events) :]
        ):
            note("resume: an interrupted turn was closed")
        if life.agent.inbox.has_pending:
            note("resume: a pending inbox was restored")
        if life.checker.open_turn is not None:
            raise _fail(
                f"turn {life.checker.open_turn} is still open after the log was loaded and repaired"
            )
        if expect.inbox is not None:
            got = (life.agent.inbox.next_turn, life.agent.inbox.next_step)
            if got != expect.inbox:
                raise _fail(
                    f"the restored inbox {got} is not the inbox at the crash {expect.inbox}"
                )
        self.expect = None

    @rule()
    def wait_idle(self) -> None:
        life = self.life
        if life is None:
            return
        for _ in range(200):
            if self.loop.run_sync(self._release_one, life):
                continue
            if life.agent.status is dsh.AgentStatus.IDLE:
                break
            if not self.loop.call(advance_to_next_deadline, self.clock):
                break  # nothing left to release: when_idle() below reports the deadlock
        self.loop.call(life.agent.when_idle)

    def _release_one(self, life: Life) -> bool:
        if self.desk.unanswered:
            self.desk.answer(reply("done"))
            return True
        if self.desk.held_gate() is not None:
            self.desk.open_gate()
            return True
        if self.desk.hanging():
            life.agent.cancel(dsh.UserCancel(), keep_inbox=True)
            return True
        return False

    def _stop(self, life: Life) -> None:
        """Leave the life's runtime block (disposing its agent); all it wrote must be synced."""
        self.life = None
        life.host.stop()
        durable = life.persistence.durable
        self._check_breaches(durable)
        if self.durability != "none" and (
            durable.seq != durable.written_seq or durable.size != durable.written_size
        ):
            raise _fail(
                f"on dispose: {durable.written_seq - durable.seq} of {durable.written_seq} "
                f"written events ({durable.written_size - durable.size} bytes) were not fsynced"
            )

    def _check_breaches(self, durable: Durable) -> None:
        if durable.breaches:
            raise _fail(durable.breaches[0])

    # ------------------------------------------------------------------ invariants

    @invariant()
    def live_log_is_well_formed(self) -> None:
        life = self.life
        if life is None:
            return
        agent = life.agent
        checker = life.checker
        checker.feed(agent.session.events)
        for target, live in (
            ("next-turn", agent.inbox.next_turn),
            ("next-step", agent.inbox.next_step),
        ):
            folded = checker.pending_messages(dsh.InboxTarget(target))
            if tuple(live) != folded:
                raise _fail(
                    f"inbox {target} is {[m.id for m in live]}; the splices fold to {[m.id for m in folded]}"
                )
        if (agent.status is dsh.AgentStatus.RUNNING) != (checker.open_turn is not None):
            raise _fail(f"status {agent.status} but open turn {checker.open_turn}")
        # The durability policy: "always" fsyncs every batch, "turn" at least every
        # turn/end; the recording writer checked it at each write.
        self._check_breaches(life.persistence.durable)
        events = agent.session.events
        durable = life.persistence.durable.seq
        if self.durability == "always" and durable != len(events):
            raise _fail(
                f"durability 'always': only {durable} of {len(events)} written events are durable"
            )
        if self.durability == "turn":
            ends = [e.seq for e in events if e.type == "turn/end"]
            if ends and durable <= ends[-1]:
                raise _fail(
                    f"durability 'turn': the turn/end at seq {ends[-1]} is not durable ({durable} events are)"
                )

    def teardown(self) -> None:
        try:
            if sys.exc_info()[1] is not None:
                # A failure is already propagating: it is the report, not what
                # closing a broken run raises on top of it.
                with contextlib.suppress(Exception):
                    self.loop.close()
                return
            try:
                if self.life is not None:
                    self._stop(self.life)
            except BaseException:
                with contextlib.suppress(Exception):
                    self.loop.close()
                raise
            self.loop.close()
        finally:
            _jsonl_writer.sync_data = self._sync_data
            shutil.rmtree(self.root, ignore_errors=True)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


# --------------------------------------------------------------------------- PostgreSQL


@attrs.define(eq=False)
class CommitLog(FsyncLog):
    """Every durable commit of the PostgreSQL writer, and an armed crash at one of them."""

    def passed(self, n: int, path: str, size: int, seq: int) -> None:
        if self.crash_in is None or n <= 0:
            return
        if self.crash_in >= n:
            self.crash_in -= n
            return
        self.crash_in = None
        self.snapshot = (b"", size, seq)


class PgTrackingWriter:
    """A recording :class:`SessionWriter` over a PostgreSQL writer.

    As :class:`TrackingWriter`: each batch's transaction runs inline on a
    connection of the machine (not in a worker thread), so the batches depend only
    on trio's schedule; a synchronous commit counts as an fsync. Sizes are counted
    in events.
    """

    def __init__(self, inner: Any, durable: Durable, conn: Any) -> None:
        self._inner = inner
        self._durable = durable
        self._conn = conn

    @property
    def header(self) -> dsh.SessionHeader:
        return self._inner.header  # type: ignore[no-any-return]

    @property
    def durable_seq(self) -> int:
        return self._inner.durable_seq  # type: ignore[no-any-return]

    def take_lines(self) -> list[tuple[int, int, bytes]]:
        # The written lines the session settles into, as the inner writer gathers them.
        return self._inner.take_lines()  # type: ignore[no-any-return]

    async def append(self, events: Sequence[dsh.SessionEvent], *, sync: bool) -> None:
        from dsh_trio.persistence._jsonl_lines import encode_events

        inner = self._inner
        durable = self._durable
        if any(e.seq != inner.durable_seq + i for i, e in enumerate(events)):
            durable.failing = True
            await inner.append(events, sync=sync)  # raises PersistenceSeqError
        if not events and not (sync and inner._unsynced):
            await trio.lowlevel.checkpoint()
            return
        batch = Batch(events[0].seq, tuple(e.type for e in events)) if events else None
        if batch is not None:
            durable.before_write(batch)
        try:
            data = encode_events(events)
            first = inner.durable_seq
            self._write(data[:-1].decode("utf-8").split("\n") if data else [], sync)
            # Gathered for the session as the writer's own append gathers them.
            inner._chunks.add(first, data, len(events))
        except BaseException:
            durable.failing = True
            raise
        durable.failing = False
        await trio.lowlevel.checkpoint()
        durable.written_seq = durable.written_size = inner.durable_seq
        if batch is not None:
            durable.writes += 1
            durable.unsynced.append(batch)
        if sync:
            durable.fsyncs.count += 1
            durable.synced()
            durable.fsyncs.passed(1, "", inner.durable_seq, inner.durable_seq)

    def _write(self, lines: list[str], sync: bool) -> None:
        """One batch's transaction, inline on the machine's connection."""
        self._inner.write_sync(self._conn, lines, sync)

    async def close(self) -> None:
        unsynced = self._inner._unsynced and self._inner._materialised
        await self._inner.close()
        if unsynced and self._inner._owner.durability != "none":
            self._durable.fsyncs.count += 1
            self._durable.synced()


class PgTrackingPersistence:
    """A :class:`PostgresPersistence` whose writers track durability (one session)."""

    def __init__(self, dsn: str, durability: Any, fsyncs: FsyncLog, conn: Any) -> None:
        from dsh_trio.persistence.postgres import PostgresPersistence

        self.inner = PostgresPersistence(dsn, durability=durability, pool_size=2)
        self.durability = durability
        self.durable = Durable(durability, fsyncs)
        self._conn = conn
        #: The writer of the life (the last one made).
        self.writer: Any = None

    def _tracking(self, writer: Any) -> PgTrackingWriter:
        self.writer = writer
        return PgTrackingWriter(writer, self.durable, self._conn)

    async def create(self, header: dsh.SessionHeader) -> PgTrackingWriter:
        return self._tracking(await self.inner.create(header))

    async def open(
        self, session_id: str
    ) -> tuple[PgTrackingWriter, Sequence[dsh.SessionEvent]]:
        writer, events = await self.inner.open(session_id)
        self.durable.loaded(len(events), len(events))
        return self._tracking(writer), events

    async def exists(self, session_id: str) -> bool:
        return await self.inner.exists(session_id)

    async def list(self) -> builtins.list[dsh.SessionHeader]:
        return await self.inner.list()


class PostgresPersistenceMachine(PersistenceMachine):
    """The persistence machine on the PostgreSQL store; a crash kills the writer process.

    Everything a killed writer committed survives it, and nothing else: after the
    life is shut down, the rows it wrote after the crash point are taken back and
    its lease is left behind as a dead process leaves it (held by an owner whose
    heartbeat expired), so the next life takes the session over with a new token.
    A crash at an fsync is a crash right after a chosen synchronous commit.
    """

    #: The database the machine runs on (set by the test).
    dsn: str | None = None

    def __init__(self) -> None:
        super().__init__()
        import psycopg

        from dsh_trio.persistence._pg_schema import migrate

        assert self.dsn is not None, "set PostgresPersistenceMachine.dsn first"
        self.fsyncs = CommitLog()
        self.made: list[PgTrackingPersistence] = []
        self.conn = psycopg.connect(self.dsn, autocommit=True)
        migrate(self.conn)
        self.conn.execute("DELETE FROM dsh_trio.sessions WHERE id = %s", (SESSION_ID,))
        self.conn.execute(
            "DELETE FROM dsh_trio.leases WHERE session_id = %s", (SESSION_ID,)
        )

    def _new_persistence(self) -> Any:
        assert self.dsn is not None
        made = PgTrackingPersistence(self.dsn, self.durability, self.fsyncs, self.conn)
        self.made.append(made)
        return made

    def _stop(self, life: Life) -> None:
        try:
            super()._stop(life)
        finally:
            self.loop.call(life.persistence.inner.aclose)

    def _rewind(self, keep: int) -> None:
        """Take back every row after ``keep`` events; leave a dead writer's lease."""
        conn = self.conn
        if keep == 0:
            conn.execute("DELETE FROM dsh_trio.sessions WHERE id = %s", (SESSION_ID,))
        else:
            conn.execute(
                "DELETE FROM dsh_trio.events WHERE session_id = %s AND seq >= %s",
                (SESSION_ID, keep),
            )
            conn.execute(
                "UPDATE dsh_trio.sessions SET next_seq = %s WHERE id = %s",
                (keep, SESSION_ID),
            )
        conn.execute(
            "INSERT INTO dsh_trio.owners (owner, epoch, host, pid, expires_at)"
            " VALUES (gen_random_uuid(), 1, 'dead', 0, now() - interval '1 s')"
            " ON CONFLICT DO NOTHING"
        )
        conn.execute(
            "INSERT INTO dsh_trio.leases (session_id, owner, epoch, token)"
            " SELECT %s, owner, 1, nextval('dsh_trio.lease_tokens')"
            " FROM dsh_trio.owners WHERE host = 'dead' LIMIT 1"
            " ON CONFLICT (session_id) DO UPDATE SET owner = EXCLUDED.owner,"
            " epoch = 1, token = EXCLUDED.token",
            (SESSION_ID,),
        )

    def _crash(self, life: Life, cut: int) -> None:
        written = life.persistence.durable.written_seq
        events = list(life.agent.session.events)
        inbox = (life.agent.inbox.next_turn, life.agent.inbox.next_step)
        self._stop(life)
        self._rewind(written)
        note("crash: the writer process killed")
        if written == 0:
            self.expect = Expectation([], 0, None, exists=False)
            return
        self.expect = Expectation(
            _as_json(events[:written]),
            written,
            inbox if written == len(events) else None,
            exists=True,
        )

    @rule(skip=st.integers(min_value=0, max_value=2))
    def crash_at_fsync(self, skip: int) -> None:
        """Run the agent on until its ``skip+1``-th synchronous commit; the writer dies right after it."""
        life = self.life
        if life is None:
            return
        fsyncs = self.fsyncs
        fsyncs.crash_in, fsyncs.snapshot = skip, None
        try:
            for _ in range(200):
                if fsyncs.snapshot is not None:
                    break
                if self.loop.run_sync(self._release_one, life):
                    continue
                if life.agent.status is dsh.AgentStatus.IDLE:
                    break
                if not self.loop.call(advance_to_next_deadline, self.clock):
                    break
        finally:
            fsyncs.crash_in = None
        snapshot, fsyncs.snapshot = fsyncs.snapshot, None
        if snapshot is None:
            self._crash(life, 0)
            self._resume()
            return
        _, _, seq = snapshot
        events = list(life.agent.session.events)
        self._stop(life)
        self._rewind(seq)
        note("crash: at a synchronous commit, the writer process killed")
        self.fsync_crashes += 1
        self.expect = Expectation(_as_json(events[:seq]), seq, None, exists=True)
        self._resume()

    @rule()
    def restart(self) -> None:
        """A clean shutdown (the agent is disposed, its lease released); a new process resumes."""
        life = self.life
        if life is None:
            return
        self._stop(life)
        row = self.conn.execute(
            "SELECT 1 FROM dsh_trio.sessions WHERE id = %s", (SESSION_ID,)
        ).fetchone()
        events = life.agent.session.events
        self.expect = Expectation(
            _as_json(events), len(events), ((), ()), exists=row is not None
        )
        self._resume()

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            for made in self.made:  # a failed example may leave a life's pool open
                made.inner._pool.close_sync()
            self.conn.close()
