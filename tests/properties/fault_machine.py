"""The persistence machine with faults: failing writes, flushes, a rival writer, tools.

:class:`FaultMachine` runs the persistence machine's lives (turns, crashes at a
random byte or at an fsync, restarts and resumes) over a JSONL store whose writer
can fail, and adds:

* ``set_fault``: from the next write on, the writer's disk refuses (``ENOSPC``
  after writing half of a batch, as a filling disk does; ``EROFS`` at the fsync,
  as a remount read-only does) until the fault is cleared (``set_fault(None)``);
  on PostgreSQL the writer's connection is terminated by the server
  (``pg_terminate_backend``: the next write fails on the dead connection, the one
  after reconnects) or the server stays unreachable until cleared;
* ``flush``: ``agent.flush()`` at any point of a turn; with a fault (and a quiet
  message queued, so there is something to write) it must raise, without one it
  must return;
* ``fail_before_reply``: a turn runs and its log starts failing before the
  model's reply would end it;
* ``rival_writer``: a second writer races for the session. On JSONL, one in this
  process is refused by the claim, then one that ignores the lease replaces the
  log with a copy or appends a torn line; on PostgreSQL the life's lease lapses
  (its owner's heartbeat expires) and a second process takes the session over
  with a new fencing token (or nobody does);
* tools: ``lookup`` returns at once, ``wait`` runs until its step is cancelled,
  so a cancel, a restart (disposal) or a crash ends steps with calls pending
  (``end_step_in_tools``: a killed process keeps every byte written, a power
  loss only what was fsynced);
* ``restart_with_mail``: dispose of the agent with messages in its inbox.

Every example starts with an *opening* (or none): one call of a fault rule right
after the agent is created. Swarm testing leaves about half the rules out of each
example, so a bug only one fault rule reaches would otherwise take many examples
to find; with the openings each bug class is reached in the first examples.

What the stores would do in a worker thread runs in the calling task
(:func:`run_inline`), and on JSONL an fsync only counts: no task wakes at a
moment that depends on how fast a thread finished, so trio's seeded schedule,
and with it a verdict, does not depend on the machine's speed.

Invariants, each with its own message:

* every event appended before a ``flush()`` that returned is in the log
  (read back from the file or the table) and, unless durability is ``"none"``,
  durable: ``flush() returned, but ...``;
* no turn ends with success (``Completed``, ``MaxTokens``, ``Blocked``) while an
  event of it is not written: ``... over an unwritten event``;
* a fenced writer never appends: ``a fenced writer appended``;
* every tool call has a ``tool/result`` before its ``step/end`` (also after a
  crash's repair): ``... with tool call ... unanswered``;
* a disposed agent's inbox is not silently lost: disposal durably discards it
  (API: ``cancel(DisposedCancel())`` durably clears the inbox), so the log holds
  each pending message and its discard: ``disposal ...``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import trio
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, rule

import dsh_trio as dsh
from dsh_trio.persistence import _jsonl_writer
from dsh_trio.testing import answers, reply, sends
from dsh_trio.testing._strategies import Answer
from dsh_trio.testing.machine import LogChecker, RuntimeHost
from dsh_trio.testing.machine._report import note
from dsh_trio.values import (
    AssistantMessageData,
    InboxSplice,
    StepEnd,
    ToolCallBlock,
    ToolResultData,
    ToolSource,
    TurnEnd,
    event_to_json,
)

from .persistence_machine import (
    OPTIONS,
    SESSION_ID,
    Expectation,
    Life,
    PersistenceMachine,
    PgTrackingPersistence,
    PgTrackingWriter,
    PostgresPersistenceMachine,
    _as_json,
    _fail,
    _read,
    _write,
)

#: Reasons a turn ends with success: each waits until the turn's events are written.
_SUCCESS = ("Completed", "MaxTokens", "Blocked")


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in _leaves(e)]
    return [exc]


def _line_json(line: str) -> object:
    return json.loads(line)


def _event_json(event: dsh.SessionEvent) -> object:
    return json.loads(json.dumps(event_to_json(event)))


# --------------------------------------------------------------------------- fault seams


class DiskFaults:
    """The fault seam under the JSONL writer: its ``write_all`` and ``sync_data``.

    The writer touches the disk for an append only through these two module
    functions; while a fault is set, the next call raises as the kernel would.
    ``hits`` counts the injected failures.
    """

    KINDS = ("ENOSPC", "EROFS")

    def __init__(self) -> None:
        self.kind: str | None = None
        self.hits = 0
        self._write_all = _jsonl_writer.write_all
        self._sync_data = _jsonl_writer.sync_data
        _jsonl_writer.write_all = self.write_all
        _jsonl_writer.sync_data = self.sync_data

    def write_all(self, fd: int, data: bytes) -> None:
        if self.kind == "ENOSPC" and data:
            half = data[: len(data) // 2]
            if half:  # the disk fills up in the middle of the batch
                os.write(fd, half)
            self.hits += 1
            raise OSError(errno.ENOSPC, "No space left on device")
        self._write_all(fd, data)

    def sync_data(self, fd: int) -> None:
        if self.kind == "EROFS":
            self.hits += 1
            raise OSError(errno.EROFS, "Read-only file system")
        self._sync_data(fd)

    def inject(self, kind: str) -> None:
        self.kind = kind

    def clear(self) -> None:
        self.kind = None

    def reset(self) -> None:
        """A new process starts: no fault."""
        self.kind = None

    def uninstall(self) -> None:
        # sync_data is put back by the persistence machine's teardown.
        _jsonl_writer.write_all = self._write_all


class ConnectionFaults:
    """The connection the PostgreSQL writer writes on, and faults of it.

    ``connection-lost`` terminates the connection's server process from the
    machine's own connection (``pg_terminate_backend``): the next write fails on
    it for real and the one after reconnects. ``server-down`` refuses every
    connection until cleared.
    """

    KINDS = ("connection-lost", "server-down")

    def __init__(self, dsn: str, admin: Any) -> None:
        self._dsn = dsn
        self._admin = admin
        self.conn: Any = None
        self.kind: str | None = None
        self.hits = 0

    def _connection(self) -> Any:
        import psycopg

        if self.kind == "server-down":
            self.hits += 1
            raise ConnectionError(
                "cannot connect to the PostgreSQL session store: the server is down"
            )
        if self.conn is None or self.conn.closed or self.conn.broken:
            if self.conn is not None:
                self.conn.close()
            self.conn = psycopg.connect(self._dsn, autocommit=True)
        return self.conn

    def write(self, writer: Any, lines: list[str], sync: bool) -> None:
        """Write one batch on the faulty connection, as the store's pool would."""
        import psycopg

        conn = self._connection()
        try:
            writer.write_sync(conn, lines, sync)
        except psycopg.OperationalError as exc:
            conn.close()
            self.hits += 1
            raise ConnectionError(
                f"the PostgreSQL session store failed: {exc}"
            ) from exc

    def inject(self, kind: str) -> None:
        if kind == "connection-lost":
            if self.conn is not None and not self.conn.closed:
                pid = self.conn.info.backend_pid
                self._admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            return
        self.kind = kind

    def clear(self) -> None:
        self.kind = None

    def reset(self) -> None:
        """A new process starts: no fault, and a connection of its own."""
        self.kind = None
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def uninstall(self) -> None:
        if self.conn is not None:
            self.conn.close()


# --------------------------------------------------------------------------- checkers


class ToolCallChecker:
    """Every tool call of a step's assistant message has a ``tool/result`` before ``step/end``."""

    def __init__(self) -> None:
        self.count = 0
        self._pending: dict[str, str] = {}

    def feed(self, events: Sequence[dsh.SessionEvent]) -> None:
        for event in events[self.count :]:
            self.count += 1
            data = event.data
            if isinstance(data, AssistantMessageData):
                for block in data.message.content:
                    if isinstance(block, ToolCallBlock):
                        self._pending.setdefault(block.id, block.name)
            elif isinstance(data, ToolResultData):
                source = data.message.source
                if isinstance(source, ToolSource):
                    self._pending.pop(source.call_id, None)
            elif isinstance(data, StepEnd):
                if self._pending:
                    call_id, name = next(iter(self._pending.items()))
                    raise _fail(
                        f"step {data.turn}/{data.step} ended (seq {event.seq}) with tool "
                        f"call {call_id!r} ({name}) unanswered: every tool call needs a "
                        "tool/result before its step/end"
                    )
            elif event.type in ("turn/start", "turn/end", "step/start"):
                self._pending.clear()


@attrs.define(eq=False)
class Fence:
    """A rival took the log over: what the log held then, and how."""

    how: str
    token: object
    stored: object  # the log's bytes (JSONL) or its event count (PostgreSQL)


# --------------------------------------------------------------------------- openings

#: An opening: one call of a fault rule right after the agent is created.
Opening = Callable[[Any], None]

#: The openings of both stores; each machine adds its rival writers.
OPENINGS: Mapping[str, Opening] = {
    "end_step_in_tools(how='kill')": lambda m: m.end_step_in_tools("kill"),
    "end_step_in_tools(how='cancel')": lambda m: m.end_step_in_tools("cancel"),
    "flush(fault='second')": lambda m: m.flush("second"),
    "fail_before_reply(kind='first')": lambda m: m.fail_before_reply("first"),
}


def _start(openings: Mapping[str, Opening]) -> Any:
    """The machine's initialize rule: the persistence machine's, then an opening.

    Every example begins with one of ``openings`` (or none): swarm testing
    leaves about half the rules out of each example, so without openings a bug
    that one fault rule reaches would need many examples to be found; with them,
    each bug class is reached from the first step of some examples, and the
    random rules go on from there.
    """

    @initialize(
        durability=st.sampled_from(("turn", "always", "none")),
        seed=st.random_module(),
        opening=st.sampled_from((None, *openings)),
    )
    def start(self: Any, durability: str, seed: object, opening: str | None) -> None:
        PersistenceMachine.start(self, durability, seed)
        if opening is not None:
            note(f"opening: {opening}")
            openings[opening](self)

    return start


# --------------------------------------------------------------------------- the rules


class FaultRules:
    """The fault rules and invariants, mixed into a persistence machine."""

    faults: Any
    life: Life | None
    loop: Any
    desk: Any
    durability: str
    expect: Expectation | None

    def _init_faults(self, faults: Any) -> None:
        self.faults = faults
        self.fence: Fence | None = None
        self.rival: Any = None  # (persistence, writer) of a PostgreSQL rival
        #: How many events were appended before the last flush() that returned.
        self.acked = 0
        self.tool_checker = ToolCallChecker()
        self.waiting_tools = 0
        self.tool_turns = 0
        self.violations: list[str] = []
        self.faulted = False  # the life saw a fault or a fence
        self.failed_leave = False

        @dsh.tool
        async def lookup() -> str:
            """Look something up."""
            await trio.lowlevel.checkpoint()
            return "found"

        @dsh.tool
        async def wait() -> str:
            """Wait until the step is cancelled."""
            self.waiting_tools += 1
            try:
                await trio.sleep_forever()
            finally:
                self.waiting_tools -= 1
            raise AssertionError("unreachable")  # pragma: no cover

        self.tools = [lookup, wait]

    # ------------------------------------------------------------------ hooks

    def _writes_failing(self, life: Life) -> bool:
        return bool(
            self.failed_leave
            or life.persistence.durable.failing
            or self.fence is not None
        )

    def _open_life(self, *, resume: bool) -> None:
        """As the persistence machine's, with the tools, and the success check subscribed."""
        persistence = self._new_persistence()  # type: ignore[attr-defined]
        host = RuntimeHost(
            self.loop,
            models={"scripted": self.desk.model},
            persistence=persistence,
            tools=self.tools,
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
        life = Life(host, persistence, handle, LogChecker(allow_interrupted=True))
        self.life = life
        self.faulted = False
        self.failed_leave = False
        self.tool_checker = ToolCallChecker()
        life.agent.session.subscribe(lambda event: self._on_event(life, event))

    def _on_event(self, life: Life, event: dsh.SessionEvent) -> None:
        """At each ``turn/end`` with success: every event of its turn is written."""
        data = event.data
        if not isinstance(data, TurnEnd):
            return
        kind = type(data.reason).__name__
        if kind not in _SUCCESS:
            return
        writer = life.persistence.writer
        written = 0 if writer is None else writer.durable_seq
        events = life.agent.session.events
        last = next(
            (
                e
                for e in reversed(events[: event.seq])
                if not isinstance(e.data, InboxSplice)
            ),
            None,
        )
        if last is not None and last.seq >= written:
            self.violations.append(
                f"turn {data.turn} ended {kind} over an unwritten event: seq {last.seq} "
                f"({last.type}) was not written when its turn/end was appended (the "
                f"writer had written {written} events)"
            )

    def _release_one(self, life: Life) -> bool:
        if super()._release_one(life):  # type: ignore[misc]
            return True
        if self.waiting_tools and life.agent.status is dsh.AgentStatus.RUNNING:
            life.agent.cancel(dsh.UserCancel(), keep_inbox=True)
            return True
        return False

    def _stop(self, life: Life) -> None:
        """As the persistence machine's, but a disposal on a failing log may fail."""
        self.life = None
        self._leave(life)
        durable = life.persistence.durable
        if durable.breaches:
            raise _fail(durable.breaches[0])
        if self._writes_failing(life):
            return
        if self.durability != "none" and (
            durable.seq != durable.written_seq or durable.size != durable.written_size
        ):
            raise _fail(
                f"on dispose: {durable.written_seq - durable.seq} of {durable.written_seq} "
                f"written events ({durable.written_size - durable.size} bytes) were not fsynced"
            )

    def _leave(self, life: Life) -> None:
        """Leave the life's runtime block; with a fault or a fence, disposal may fail."""
        hits = self.faults.hits
        self.failed_leave = False
        try:
            life.host.stop()
        except Exception as exc:
            expected = self.faulted or self.fence is not None or self.faults.hits > hits
            refused = (OSError, dsh.SessionLockedError)  # a lost lease, too
            if not expected or not all(isinstance(e, refused) for e in _leaves(exc)):
                raise
            note("dispose: the log could not be written")
            self.failed_leave = True
        finally:
            self.faults.reset()
        try:
            self._check_fence(life)  # the disposal's flush must not append either
        finally:
            self._end_rival()

    def _end_rival(self) -> None:
        self.fence = None

    def _stored_writer(self, life: Life) -> Any:
        """The life's writer once its log is stored (a quiet message stores it)."""
        writer = life.persistence.writer
        if writer is not None and not writer._materialised:
            self._queue_note(life)
            with contextlib.suppress(dsh.PersistenceError):
                self.loop.call(life.agent.flush)
        if writer is None or not writer._materialised:
            return None
        return writer

    def _queue_note(self, life: Life) -> None:
        """Queue a quiet message (an inbox splice for the log), and let it be written."""
        self.tool_turns += 1
        message = dsh.user_message("note", id=f"note-{self.tool_turns}")
        self.loop.run_sync(
            lambda: life.agent.send(message, dsh.InboxTarget.NEXT_TURN, False)
        )

    # ------------------------------------------------------------------ rules

    @rule(
        op=answers("reply", "tool-calls", "max-tokens", "fail", "hang", "gate"),
        first=st.sampled_from(("wait", "lookup")),
    )
    def answer_model(self, op: Answer, first: str) -> None:
        if self.life is None or not self.desk.unanswered:
            return
        names = (first, "lookup" if first == "wait" else "wait")
        script = self.desk.script_for(op, names, lambda name: "{}")
        self.loop.run_sync(lambda: self.desk.answer(script, hangs=op.kind == "hang"))

    @rule(how=st.sampled_from(("kill", "power-loss", "cancel", "dispose")))
    def end_step_in_tools(self, how: str) -> None:
        """A step asks for ``wait`` then ``lookup``; it ends while ``wait`` runs.

        Ended by the process being killed (every byte written survives), by a
        power loss (only what was fsynced survives), by a cancel (``lookup``
        never starts) or by the agent's disposal. A crash cut at a random byte
        is the ``crash`` rule's.
        """
        life = self.life
        if life is None or not self._model_asked(life, "use the tools"):
            return
        script = self.desk.script_for(
            Answer("tool-calls", calls=2), ("wait", "lookup"), lambda name: "{}"
        )
        self.loop.run_sync(lambda: self.desk.answer(script))
        if how in ("kill", "power-loss"):
            self.crash(self._cut_keeping(life, whole=how == "kill"))  # type: ignore[attr-defined]
        elif how == "cancel":
            self.loop.run_sync(lambda: life.agent.cancel(dsh.UserCancel()))
        else:
            self.restart()

    @rule(kind=st.sampled_from(("first", "second")))
    def fail_before_reply(self, kind: str) -> None:
        """A turn runs; its log starts failing before the model's reply would end it."""
        life = self.life
        if life is None or not self._model_asked(life, "reply after a fault"):
            return
        self.inject_fault(kind)
        self.loop.run_sync(lambda: self.desk.answer(reply("done")))

    def _model_asked(self, life: Life, text: str) -> bool:
        """Whether a model request waits for its answer; an idle agent is sent ``text`` first."""
        if not self.desk.unanswered and life.agent.status is dsh.AgentStatus.IDLE:
            self.tool_turns += 1
            message = dsh.user_message(text, id=f"turn-{self.tool_turns}")
            try:
                self.loop.run_sync(lambda: life.agent.followup(message))
            except dsh.PersistenceError:
                if not self.faulted:
                    raise
                return False
        return bool(self.desk.unanswered)

    @rule(kind=st.sampled_from((None, "first", "second")))
    def set_fault(self, kind: str | None) -> None:
        """From the next write on, the log's writes fail; ``None`` clears the fault."""
        if kind is None:
            self.faults.clear()
        else:
            self.inject_fault(kind)

    def inject_fault(self, kind: str) -> None:
        """From the next write on, the log's writes fail (until cleared)."""
        if self.life is None:
            return
        chosen = self.faults.KINDS[0 if kind == "first" else 1]
        self.faults.inject(chosen)
        self.faulted = True
        note(f"fault: {chosen}")

    @rule(op=sends())
    def send(self, op: Any) -> None:
        try:
            super().send(op)  # type: ignore[misc]
        except dsh.PersistenceError:
            if not self.faulted:
                raise
            note("send: waking input refused on a failing log")

    @rule(message=st.sampled_from(("f0", "f1", "f2")))
    def followup_then_answer(self, message: str) -> None:
        try:
            super().followup_then_answer(message)  # type: ignore[misc]
        except dsh.PersistenceError:
            if not self.faulted:
                raise
            note("send: waking input refused on a failing log")

    @rule(fault=st.sampled_from((None, "first", "second")))
    def flush(self, fault: str | None) -> None:
        """``agent.flush()``: it returns once everything appended so far is in the log.

        With ``fault``, the fault is injected first and a quiet message queued
        (the flush has an event to write, or an unsynced one to fsync), then the
        flush is called twice: the first finds the log failing, the second finds
        the fault reported.
        """
        life = self.life
        if life is None:
            return
        if fault is not None:
            self.inject_fault(fault)
            self._queue_note(life)
        for _ in range(1 if fault is None else 2):
            appended = len(life.agent.session.events)
            hits = self.faults.hits
            try:
                self.loop.call(life.agent.flush)
            except dsh.PersistenceError:
                if not (self.faults.hits > hits or self.fence is not None):
                    raise
                note("flush: raised on a failing log")
                continue
            self.acked = max(self.acked, appended)
            self.flushed_events_are_in_the_log()

    @rule(
        op=st.sampled_from(
            [
                dsh.user_message("mail", id="mail-1"),
                dsh.user_message("more mail", id="mail-2"),
            ]
        ),
        where=st.sampled_from((dsh.InboxTarget.NEXT_TURN, dsh.InboxTarget.NEXT_STEP)),
    )
    def restart_with_mail(self, op: dsh.UserMessage, where: dsh.InboxTarget) -> None:
        """Put a message in the inbox without waking the agent, then restart."""
        life = self.life
        if life is None:
            return

        def send_now() -> None:
            with contextlib.suppress(dsh.DuplicateMessageError):
                life.agent.send(op, where, False)

        self.loop.run_sync(send_now)
        self.restart()

    @rule()
    def restart(self) -> None:
        """A clean shutdown; a new process resumes. The disposal's inbox discard is in the log."""
        life = self.life
        if life is None:
            return
        inbox = life.agent.inbox
        mail = [m.id for m in (*inbox.next_turn, *inbox.next_step)]
        self._stop(life)
        failed = self.failed_leave
        events = list(life.agent.session.events)
        writer = life.persistence.writer
        written = 0 if writer is None else writer.durable_seq
        if failed:
            kept = events[:written]
            self.expect = Expectation(_as_json(kept), written, None, exists=written > 0)
        else:
            self.expect = Expectation(
                _as_json(events), len(events), None, exists=self._stored(life)
            )
        self._resume()
        if failed or not mail:
            return
        resumed = self.life
        assert resumed is not None
        inserted = {
            m.id
            for e in resumed.agent.session.events
            if isinstance(e.data, InboxSplice)
            for m in e.data.inserted
        }
        for message_id in mail:
            if message_id not in inserted:
                raise _fail(
                    f"disposal lost message {message_id!r} silently: it was in the inbox "
                    "when the agent was disposed, and its log never recorded it"
                )
        left = [
            m.id
            for m in (*resumed.agent.inbox.next_turn, *resumed.agent.inbox.next_step)
        ]
        if left:
            raise _fail(
                f"disposal did not durably discard the inbox: {left} were pending when "
                "the agent was disposed and are pending again after a resume"
            )
        note("restart: an inbox discarded by disposal")

    # ------------------------------------------------------------------ invariants

    @invariant()
    def live_log_is_well_formed(self) -> None:
        """The persistence machine's, with the durability policy checked only while
        the log is being written (a failing writer keeps events queued)."""
        life = self.life
        if life is None:
            return
        if not self._writes_failing(life):
            super().live_log_is_well_formed()  # type: ignore[misc]
            return
        saved = self.durability
        self.durability = "none"  # nothing is required durable while writes fail
        try:
            super().live_log_is_well_formed()  # type: ignore[misc]
        finally:
            self.durability = saved

    @invariant()
    def turns_end_with_success_only_when_written(self) -> None:
        if self.violations:
            raise _fail(self.violations[0])

    @invariant()
    def every_tool_call_is_answered_before_its_step_ends(self) -> None:
        life = self.life
        if life is not None:
            self.tool_checker.feed(life.agent.session.events)

    @invariant()
    def flushed_events_are_in_the_log(self) -> None:
        life = self.life
        acked = self.acked
        if life is None or acked == 0:
            return
        events = life.agent.session.events
        lines = self._stored_lines(life, acked)
        for i in range(acked):
            if i >= len(lines):
                raise _fail(
                    f"flush() returned, but event seq {i} ({events[i].type}) appended "
                    f"before it is not in the log (it holds {len(lines)} events)"
                )
            if _line_json(lines[i]) != _event_json(events[i]):
                raise _fail(
                    f"flush() returned, but event seq {i} ({events[i].type}) appended "
                    "before it differs in the log"
                )
        durable = life.persistence.durable.seq
        if self.durability != "none" and durable < acked:
            raise _fail(
                f"flush() returned with durability {self.durability!r}, but only "
                f"{durable} of the {acked} events appended before it are durable"
            )

    @invariant()
    def a_fenced_writer_never_appends(self) -> None:
        if self.life is not None:
            self._check_fence(self.life)

    def _check_fence(self, life: Life) -> None:
        fence = self.fence
        if fence is None:
            return
        now = self._fenced_state(life)
        if now != fence.stored:
            raise _fail(
                f"a fenced writer appended: {fence.how}, the log held "
                f"{self._describe(fence.stored)}; it holds {self._describe(now)} now"
            )

    # ------------------------------------------------------------------ per store

    def _resume(self) -> None:
        expect = self.expect
        if self.durability == "none" and expect is not None:
            self.acked = min(self.acked, len(expect.events))
        super()._resume()  # type: ignore[misc]

    def _stored(self, life: Life) -> bool:
        raise NotImplementedError

    def _cut_keeping(self, life: Life, *, whole: bool) -> int:
        """The ``cut`` of a crash that keeps every written byte, or only the durable ones."""
        raise NotImplementedError

    def _stored_lines(self, life: Life, n: int) -> list[str]:
        raise NotImplementedError

    def _fenced_state(self, life: Life) -> object:
        raise NotImplementedError

    def _describe(self, stored: object) -> str:
        raise NotImplementedError


async def run_inline(fn: Callable[..., Any], *args: Any, **options: Any) -> Any:
    """``trio.to_thread.run_sync`` without a thread: ``fn`` runs in the calling task.

    As the real one, it raises if already cancelled, and a cancellation arriving
    while ``fn`` runs is delivered at the next checkpoint. With no worker thread,
    no task wakes at a moment that depends on how fast a thread finished, so the
    schedule (trio shuffles each batch of runnable tasks with hypothesis's seed)
    depends only on the program, never on the machine's speed.
    """
    await trio.lowlevel.checkpoint_if_cancelled()
    result = fn(*args)
    await trio.lowlevel.cancel_shielded_checkpoint()
    return result


class FaultMachine(FaultRules, PersistenceMachine):
    """Faults over a JSONL store.

    Its disk work runs in the calling task (:func:`run_inline`), so its examples
    replay exactly, and an fsync only counts: the machine models what a power
    loss keeps, so a real fsync would add nothing but time.
    """

    start = _start(
        {
            **OPENINGS,
            "rival_writer(how='copy')": lambda m: m.rival_writer("copy"),
            "rival_writer(how='torn line')": lambda m: m.rival_writer("torn line"),
        }
    )

    def __init__(self) -> None:
        super().__init__()
        fsyncs = self.fsyncs

        def counted(fd: int) -> None:
            os.fstat(fd)  # a closed fd still fails
            fsyncs.count += 1

        _jsonl_writer.sync_data = counted  # put back by the persistence machine
        self._to_thread = trio.to_thread.run_sync
        trio.to_thread.run_sync = run_inline  # type: ignore[assignment]
        try:
            self._init_faults(DiskFaults())
        except BaseException:
            trio.to_thread.run_sync = self._to_thread
            _jsonl_writer.sync_data = self._sync_data
            self.loop.close()
            raise

    def _stored(self, life: Life) -> bool:
        return os.path.exists(self._log_path(life))

    def _crash(self, life: Life, cut: int) -> None:
        # A fault may have kept events from the file: the inbox at the crash is
        # then not what the log restores.
        unwritten = life.persistence.durable.written_seq < len(
            life.agent.session.events
        )
        super()._crash(life, cut)
        if unwritten and self.expect is not None:
            self.expect.inbox = None

    def _cut_keeping(self, life: Life, *, whole: bool) -> int:
        path = self._log_path(life)
        if not whole or not os.path.exists(path):
            return 0
        durable: int = life.persistence.durable.size
        return os.path.getsize(path) - durable

    def _stored_lines(self, life: Life, n: int) -> list[str]:
        path = self._log_path(life)
        data = _read(path) if os.path.exists(path) else b""
        lines = data.split(b"\n")[1:-1]  # the header first; the last one is unfinished
        return [line.decode("utf-8") for line in lines[:n]]

    def _fenced_state(self, life: Life) -> object:
        return _read(self._log_path(life))

    def _describe(self, stored: object) -> str:
        assert isinstance(stored, bytes)
        return f"{len(stored)} bytes"

    @rule(how=st.sampled_from(("copy", "torn line")))
    def rival_writer(self, how: str) -> None:
        """A second writer races for the session: refused by the claim, then it ignores it."""
        life = self.life
        if life is None or self.fence is not None:
            return
        writer = self._stored_writer(life)
        if writer is None:
            return
        second = dsh.JsonlPersistence(self.root, durability="none")
        try:
            opened, _ = self.loop.call(second.open, SESSION_ID)
        except dsh.SessionLockedError:
            pass
        else:
            self.loop.call(opened.close)
            raise _fail("a second writer opened the session while its writer held it")
        path = writer.path
        if how == "copy":  # restored from a copy: a new file, same bytes
            _write(path + ".rival", _read(path))
            os.replace(path + ".rival", path)
        else:  # a writer that died in the middle of a line
            with open(path, "ab") as f:
                f.write(b'{"type":"rival","seq":')
        self.fence = Fence(
            f"another writer {'replaced the log with a copy' if how == 'copy' else 'appended a torn line'}",
            None,
            _read(path),
        )
        self.faulted = True
        note(f"rival: {how}")

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            trio.to_thread.run_sync = self._to_thread
            self.faults.uninstall()


# --------------------------------------------------------------------------- PostgreSQL


class PgFaultyWriter(PgTrackingWriter):
    """A recording PostgreSQL writer whose transactions run on a faulty connection."""

    def __init__(self, inner: Any, durable: Any, faults: ConnectionFaults) -> None:
        super().__init__(inner, durable, None)
        self._faults = faults

    def _write(self, lines: list[str], sync: bool) -> None:
        self._faults.write(self._inner, lines, sync)


class PgFaultyPersistence(PgTrackingPersistence):
    def __init__(self, *args: Any, faults: ConnectionFaults) -> None:
        super().__init__(*args)
        self._faults = faults

    def _tracking(self, writer: Any) -> PgTrackingWriter:
        self.writer = writer
        return PgFaultyWriter(writer, self.durable, self._faults)


class PgFaultMachine(FaultRules, PostgresPersistenceMachine):
    """Faults over the PostgreSQL store: lost connections, lapsed and taken leases."""

    start = _start(
        {
            **OPENINGS,
            "rival_writer(takeover=False)": lambda m: m.rival_writer(False),
            "rival_writer(takeover=True)": lambda m: m.rival_writer(True),
        }
    )

    def __init__(self) -> None:
        super().__init__()
        assert self.dsn is not None
        self._to_thread = trio.to_thread.run_sync
        trio.to_thread.run_sync = run_inline  # type: ignore[assignment]
        try:
            self._init_faults(ConnectionFaults(self.dsn, self.conn))
        except BaseException:
            trio.to_thread.run_sync = self._to_thread
            self.loop.close()
            self.conn.close()
            raise

    def _new_persistence(self) -> Any:
        assert self.dsn is not None
        made = PgFaultyPersistence(
            self.dsn, self.durability, self.fsyncs, self.conn, faults=self.faults
        )
        self.made.append(made)
        return made

    def _stop(self, life: Life) -> None:
        try:
            super()._stop(life)
        finally:
            self.loop.call(life.persistence.inner.aclose)

    def _stored(self, life: Life) -> bool:
        row = self.conn.execute(
            "SELECT 1 FROM dsh_trio.sessions WHERE id = %s", (SESSION_ID,)
        ).fetchone()
        return row is not None

    def _cut_keeping(self, life: Life, *, whole: bool) -> int:
        return 0  # a killed writer's commits survive it, and only they

    def _stored_lines(self, life: Life, n: int) -> list[str]:
        rows = self.conn.execute(
            "SELECT line FROM dsh_trio.events WHERE session_id = %s AND seq < %s"
            " ORDER BY seq",
            (SESSION_ID, n),
        ).fetchall()
        return [str(row[0]) for row in rows]

    def _fenced_state(self, life: Life) -> object:
        row = self.conn.execute(
            "SELECT count(*) FROM dsh_trio.events WHERE session_id = %s", (SESSION_ID,)
        ).fetchone()
        assert row is not None
        return int(row[0])

    def _describe(self, stored: object) -> str:
        return f"{stored} events"

    @rule(takeover=st.booleans())
    def rival_writer(self, takeover: bool) -> None:
        """The life's lease lapses; a second process takes the session over (or nobody)."""
        from dsh_trio.persistence.postgres import PostgresPersistence

        life = self.life
        if life is None or self.fence is not None:
            return
        writer = self._stored_writer(life)
        if writer is None:
            return
        self.conn.execute(
            "UPDATE dsh_trio.owners SET expires_at = clock_timestamp() - interval '1 s'"
            " WHERE owner = %s",
            (life.persistence.inner._heartbeat.owner,),
        )
        how = f"the lease of writer token {writer.token} lapsed"
        if takeover:
            assert self.dsn is not None
            rival = PostgresPersistence(self.dsn, durability="turn", pool_size=1)
            try:
                opened, _ = self.loop.call(rival.open, SESSION_ID)
            except BaseException:
                self.loop.call(rival.aclose)
                raise
            self.rival = (rival, opened)
            how += f" and token {opened.token} took the session over"
        self.fence = Fence(how, writer.token, self._fenced_state(life))
        self.faulted = True
        note("rival: took over" if takeover else "rival: lease lapsed")

    def _end_rival(self) -> None:
        super()._end_rival()
        rival, self.rival = self.rival, None
        if rival is not None:
            persistence, writer = rival
            try:
                self.loop.call(writer.close)
            finally:
                self.loop.call(persistence.aclose)

    def teardown(self) -> None:
        try:
            if self.rival is not None:
                with contextlib.suppress(Exception):
                    self.rival[0]._pool.close_sync()
        finally:
            try:
                super().teardown()
            finally:
                trio.to_thread.run_sync = self._to_thread
                self.faults.uninstall()


__all__ = ["FaultMachine", "PgFaultMachine"]
