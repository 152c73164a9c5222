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

And after every step, for the live agent: the structural invariants of
:class:`~dsh_trio.testing.AgentStateMachine`'s log checker (over the whole log,
earlier lives included), and the durability policy: with ``"always"`` every written
event is durable, with ``"turn"`` at least everything up to the last ``turn/end``.
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
class Durable:
    """What the disk is known to hold durably: ``seq`` events in ``size`` bytes."""

    seq: int = 0
    size: int = 0


class TrackingWriter:
    """A :class:`SessionWriter` over a JSONL writer that records how far the log is durable.

    It does the disk work of an append inline instead of in a worker thread, so
    what the recorder puts in each batch (and so which batches are fsynced)
    depends only on trio's schedule, never on how fast a thread finishes.
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

    async def append(self, events: Sequence[dsh.SessionEvent], *, sync: bool) -> None:
        inner = self._inner
        if any(e.seq != inner.durable_seq + i for i, e in enumerate(events)):
            await inner.append(events, sync=sync)  # raises PersistenceSeqError
        first = not inner._materialised  # the first write creates the file, fsynced
        inner._append_sync(tuple(events), sync)
        await trio.lowlevel.checkpoint()
        if sync or first:
            self._durable.seq = inner.durable_seq
            self._durable.size = inner._size

    async def close(self) -> None:
        await self._inner.close()


class TrackingPersistence:
    """A :class:`JsonlPersistence` whose writers track durability (one session)."""

    def __init__(self, root: str, durability: Any) -> None:
        self.inner = dsh.JsonlPersistence(root, durability=durability)
        self.durability = durability
        self.durable = Durable()

    def path_for(self, header: dsh.SessionHeader) -> str:
        return self.inner.path_for(header)

    async def create(self, header: dsh.SessionHeader) -> TrackingWriter:
        writer = await self.inner.create(header)
        return TrackingWriter(writer, self.durable)

    async def open(
        self, session_id: str
    ) -> tuple[TrackingWriter, list[dsh.SessionEvent]]:
        writer, events = await self.inner.open(session_id)
        # What a new process finds on disk (cut after its last intact line) is durable.
        self.durable.seq = len(events)
        self.durable.size = writer._size
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
    persistence: TrackingPersistence
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

    # ------------------------------------------------------------------ lives

    def _open_life(self, *, resume: bool) -> None:
        persistence = TrackingPersistence(self.root, self.durability)
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
        return life.persistence.path_for(life.agent.session.header)

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
        self.life = None
        life.host.stop()

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
        # The durability policy: "always" fsyncs every batch, "turn" at least every turn/end.
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
            shutil.rmtree(self.root, ignore_errors=True)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
