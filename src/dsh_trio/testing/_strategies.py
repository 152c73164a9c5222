"""Hypothesis strategies for agent inputs: messages, causes and operation sequences.

The operations are plain frozen values, one class per kind of thing a test can do
to a live agent (send input, edit the inbox, cancel, run maintenance, answer the
model, move virtual time, wait, dispose). :class:`~dsh_trio.testing.AgentStateMachine`
draws its rules' arguments from these strategies and applies the values with
:meth:`~dsh_trio.testing.AgentStateMachine.apply`, so a program hypothesis prints is
also a list of values a regression test can replay.

Each strategy picks from a fixed, ordered menu of values with one choice (simplest
first). A step of a state machine whose arguments are one choice each is one that
hypothesis's shrinker can delete outright, which keeps falsifying programs short.
"""

from __future__ import annotations

import itertools
from typing import Final, Literal, TypeAlias

import attrs
from hypothesis import strategies as st

from ..values import (
    CancelCause,
    DisposedCancel,
    HookCancel,
    InboxTarget,
    MessageId,
    ParentCancel,
    PluginSource,
    TextBlock,
    UserCancel,
    UserMessage,
    UserSource,
)

__all__ = [
    "Advance",
    "Answer",
    "Cancel",
    "Dispose",
    "InboxEdit",
    "Maintenance",
    "Operation",
    "SelectPreset",
    "ReleaseGate",
    "ReleaseMaintenance",
    "Send",
    "WaitIdle",
    "answers",
    "cancel_causes",
    "cancels",
    "inbox_edits",
    "inbox_targets",
    "maintenances",
    "message_ids",
    "operation_sequences",
    "operations",
    "sends",
    "user_messages",
]

#: Message ids: ``m*`` collide on purpose (duplicates of something pending, or
#: re-insertions of something consumed); ``u*`` are rarer.
ID_POOL: Final[tuple[str, ...]] = ("m0", "m1", "m2", "m3", "u0", "u1", "u2", "u3")
TEXTS: Final[tuple[str, ...]] = ("hello", "", "ünïcødé ✓", "secret")
SOURCES: Final = (UserSource(), PluginSource("demo-plugin", "note"))

Target: TypeAlias = InboxTarget | Literal["next-turn", "next-step"]


def _message(id: str, text: str, source: object) -> UserMessage:
    assert isinstance(source, (UserSource, PluginSource))
    return UserMessage(id=MessageId(id), content=(TextBlock(text),), source=source)


#: Every message the strategies draw from, simplest first.
MESSAGES: Final[tuple[UserMessage, ...]] = tuple(
    _message(i, t, s) for i, t, s in itertools.product(ID_POOL, TEXTS, SOURCES)
)


def message_ids() -> st.SearchStrategy[MessageId]:
    """Message ids from a small pool, so duplicates and re-insertions are common."""
    return st.sampled_from(ID_POOL).map(MessageId)


def user_messages(
    *, ids: st.SearchStrategy[MessageId] | None = None
) -> st.SearchStrategy[UserMessage]:
    """Valid :class:`UserMessage` values: one text block, a user or plugin source.

    Args:
        ids: draw ids from this strategy instead of the built-in pool (the
            message is then built from several choices instead of one).
    """
    if ids is None:
        return st.sampled_from(MESSAGES)
    return st.builds(_message, ids, st.sampled_from(TEXTS), st.sampled_from(SOURCES))


CAUSES: Final[tuple[CancelCause, ...]] = (
    UserCancel(),
    ParentCancel(),
    HookCancel("too slow"),
    HookCancel(""),
    DisposedCancel(),
)


def cancel_causes() -> st.SearchStrategy[CancelCause]:
    """Every kind of cancel cause (user, parent, hook with a reason, disposed)."""
    return st.sampled_from(CAUSES)


def inbox_targets() -> st.SearchStrategy[Target]:
    """Inbox targets, as :class:`InboxTarget` members or their plain strings."""
    return st.sampled_from(
        (InboxTarget.NEXT_TURN, InboxTarget.NEXT_STEP, "next-turn", "next-step")
    )


def _short(message: UserMessage) -> str:
    text = "".join(getattr(b, "text", "?") for b in message.content)
    return f"{message.id}:{text!r}"


# --------------------------------------------------------------------------- operations


@attrs.frozen(repr=False)
class Send:
    """Send ``message`` to ``target``, waking the driver if ``wakeup``.

    With ``alias`` the matching public alias is used where one exists
    (``followup`` = next-turn + wake, ``steer`` = next-step + wake, ``inject`` =
    next-step, no wake); otherwise ``agent.send`` itself.
    """

    message: UserMessage
    target: Target
    wakeup: bool
    alias: bool = True

    @property
    def method(self) -> str:
        """The agent method this operation calls."""
        if self.alias:
            t = InboxTarget(self.target)
            if t is InboxTarget.NEXT_TURN and self.wakeup:
                return "followup"
            if t is InboxTarget.NEXT_STEP:
                return "steer" if self.wakeup else "inject"
        return "send"

    def __repr__(self) -> str:
        if self.method == "send":
            return f"Send({_short(self.message)}, {str(self.target)!r}, wakeup={self.wakeup})"
        return f"Send.{self.method}({_short(self.message)})"


InboxEditKind: TypeAlias = Literal[
    "append", "prepend", "remove", "replace", "splice", "clear"
]


@attrs.frozen(repr=False)
class InboxEdit:
    """One public inbox edit.

    ``pick`` chooses the message a ``remove``/``replace`` names: the pending
    message at that index (next-turn first), or an id nothing pending has.
    """

    kind: InboxEditKind
    target: Target = InboxTarget.NEXT_TURN
    pick: int = 0
    start: int = 0
    delete_count: int = 0
    messages: tuple[UserMessage, ...] = ()

    def __repr__(self) -> str:
        inserted = ", ".join(_short(m) for m in self.messages)
        if self.kind == "clear":
            return "InboxEdit.clear()"
        if self.kind == "remove":
            return f"InboxEdit.remove(pick={self.pick})"
        if self.kind == "replace":
            return f"InboxEdit.replace(pick={self.pick}, {inserted})"
        if self.kind == "splice":
            return f"InboxEdit.splice({str(self.target)!r}, {self.start}, {self.delete_count}, [{inserted}])"
        return f"InboxEdit.{self.kind}({str(self.target)!r}, {inserted})"


@attrs.frozen(repr=False)
class Cancel:
    """``agent.cancel(cause, keep_inbox=...)``, then each of ``then`` in the same tick.

    What follows arrives after the abort and before the aborted activity wound
    down: sends meet the wake latch and the next-turn redirection, and further
    cancels meet the first-cause rule. (The ``then`` of a nested cancel is ignored.)
    """

    cause: CancelCause
    keep_inbox: bool = False
    then: tuple[Send | Cancel, ...] = ()

    def __repr__(self) -> str:
        then = "".join(f", then {item!r}" for item in self.then)
        return (
            f"Cancel({self.cause!r}{', keep_inbox' if self.keep_inbox else ''}{then})"
        )


MaintenanceMode: TypeAlias = Literal["complete", "fail", "block"]


@attrs.frozen
class Maintenance:
    """Start ``run_maintenance`` with a task that completes, fails, or blocks until released."""

    mode: MaintenanceMode


@attrs.frozen
class ReleaseMaintenance:
    """Let a blocked maintenance task finish (returning, or raising if ``fail``)."""

    fail: bool = False


AnswerKind: TypeAlias = Literal[
    "reply", "tool-calls", "max-tokens", "fail", "fail-in-band", "raise", "hang", "gate"
]


@attrs.frozen
class Answer:
    """The scripted model's answer to the request it is holding.

    ``reply``/``max-tokens`` stream ``text``; ``tool-calls`` asks for ``calls`` tool
    calls; ``fail``/``fail-in-band`` fail with ``code`` (raised, or as a finish
    chunk); ``raise`` raises a non-model exception; ``hang`` streams ``text`` (if
    any) and never ends; ``gate`` streams ``after`` chunks of a reply and then holds
    at a :class:`~dsh_trio.testing.Gate` until :class:`ReleaseGate`.
    """

    kind: AnswerKind
    text: str = "ok"
    calls: int = 1
    code: str = "AUTH"
    after: int = 0


@attrs.frozen
class ReleaseGate:
    """Open the held gate: release it, or fail it with ``fail_code``."""

    fail_code: str | None = None


@attrs.frozen
class Advance:
    """Move virtual time forward by ``seconds`` (retry back-offs wake up)."""

    seconds: float


@attrs.frozen
class WaitIdle:
    """Release everything that holds the agent, then ``await agent.when_idle()``."""


@attrs.frozen
class Dispose:
    """``await handle.dispose()`` (idempotent)."""


@attrs.frozen
class SelectPreset:
    """``await runtime.presets.select(agent, preset)``: refused (``PresetLockedError``)
    once the agent started a turn, else one durable ``agent-preset/selected``.

    The machine's runtime registers the presets ``"alpha"`` and ``"beta"``.
    """

    preset: str


Operation: TypeAlias = (
    Send
    | InboxEdit
    | Cancel
    | Maintenance
    | ReleaseMaintenance
    | Answer
    | ReleaseGate
    | Advance
    | WaitIdle
    | Dispose
    | SelectPreset
)

# --------------------------------------------------------------------------- the menus

#: (target, wakeup, alias): followup, steer, inject first; then ``send`` itself
#: with plain-string targets.
_SEND_MODES: Final[tuple[tuple[Target, bool, bool], ...]] = (
    (InboxTarget.NEXT_TURN, True, True),
    (InboxTarget.NEXT_STEP, True, True),
    (InboxTarget.NEXT_STEP, False, True),
    ("next-turn", False, False),
    ("next-turn", True, False),
    ("next-step", True, False),
    ("next-step", False, False),
)
SENDS: Final[tuple[Send, ...]] = tuple(
    Send(m, t, w, a) for (t, w, a), m in itertools.product(_SEND_MODES, MESSAGES)
)

_TARGETS: Final[tuple[Target, ...]] = (InboxTarget.NEXT_TURN, "next-step")
#: One message per id: edits are about which ids are pending.
_EDIT_MESSAGES: Final[tuple[UserMessage, ...]] = MESSAGES[:: len(TEXTS) * len(SOURCES)]
_INSERTS: Final[tuple[tuple[UserMessage, ...], ...]] = (
    (),
    (MESSAGES[0],),
    (_EDIT_MESSAGES[1],),
    (MESSAGES[0], _EDIT_MESSAGES[1]),
    (_EDIT_MESSAGES[4],),
    (MESSAGES[0], MESSAGES[1]),  # the same id twice
)
#: Kinds in roughly equal shares.
INBOX_EDITS: Final[tuple[InboxEdit, ...]] = (
    *(InboxEdit("remove", pick=p) for p in range(16)),
    *(InboxEdit("clear") for _ in range(4)),
    *(
        InboxEdit("replace", pick=p, messages=(m,))
        for p, m in itertools.product(range(3), _EDIT_MESSAGES)
    ),
    *(
        InboxEdit("append", target=t, messages=(m,))
        for t, m in itertools.product(_TARGETS, _EDIT_MESSAGES)
    ),
    *(
        InboxEdit("prepend", target=t, messages=(m,))
        for t, m in itertools.product(_TARGETS, _EDIT_MESSAGES)
    ),
    *(
        InboxEdit("splice", target=t, start=s, delete_count=d, messages=ins)
        for t, s, d, ins in itertools.product(_TARGETS, (0, -1, 3), (1, 9), _INSERTS)
    ),
)

_THEN_MESSAGES: Final = (MESSAGES[0], MESSAGES[8], MESSAGES[34])
_THEN_ITEMS: Final[tuple[Send | Cancel, ...]] = (
    *(
        Send(m, t, w, a)
        for (t, w, a), m in itertools.product(_SEND_MODES[:4], _THEN_MESSAGES)
    ),
    Cancel(UserCancel()),
    Cancel(ParentCancel(), keep_inbox=True),
    Cancel(DisposedCancel()),
    Cancel(HookCancel("late"), keep_inbox=True),
)
_THENS: Final[tuple[tuple[Send | Cancel, ...], ...]] = (
    (),
    *((item,) for item in _THEN_ITEMS),
    *itertools.product(_THEN_ITEMS, repeat=2),
)
CANCELS: Final[tuple[Cancel, ...]] = tuple(
    Cancel(cause, keep, then)
    for cause, keep, then in itertools.product(CAUSES, (False, True), _THENS)
)

_FAILURE_CODES: Final = ("AUTH", "RATE_LIMIT", "SERVER", "ABORTED")
ANSWERS: Final[tuple[Answer, ...]] = (
    *(Answer("reply", text=t) for t in ("ok", "partial", " ", "")),
    *(Answer("max-tokens", text=t) for t in ("cut", " ", "")),
    *(Answer("tool-calls", calls=n) for n in (1, 2)),
    *(Answer("fail", code=c) for c in _FAILURE_CODES),
    *(Answer("fail-in-band", code=c) for c in _FAILURE_CODES),
    Answer("raise"),
    *(Answer("hang", text=t) for t in ("partial", " ", "")),
    *(Answer("gate", text="gated", after=n) for n in range(4)),
)

MAINTENANCES: Final[tuple[Maintenance, ...]] = (
    Maintenance("block"),
    Maintenance("complete"),
    Maintenance("fail"),
)


def sends() -> st.SearchStrategy[Send]:
    """:class:`Send` operations: followup, steer, inject, or ``send`` with any target/wakeup."""
    return st.sampled_from(SENDS)


def inbox_edits() -> st.SearchStrategy[InboxEdit]:
    """:class:`InboxEdit` operations: remove, clear, replace, append, prepend, splice."""
    return st.sampled_from(INBOX_EDITS)


def cancels() -> st.SearchStrategy[Cancel]:
    """:class:`Cancel` operations: every cause, ``keep_inbox`` on/off, then up to two sends or cancels."""
    return st.sampled_from(CANCELS)


def answers(*kinds: AnswerKind) -> st.SearchStrategy[Answer]:
    """:class:`Answer` values of the given kinds (all kinds by default).

    Kinds: ``reply``, ``max-tokens``, ``tool-calls``, ``fail``, ``fail-in-band``,
    ``raise``, ``hang``, ``gate``.

    Raises:
        ValueError: no answer has any of the given kinds.
    """
    chosen = [a for a in ANSWERS if not kinds or a.kind in kinds]
    if not chosen:
        raise ValueError(f"no answer kind among {kinds!r}")
    return st.sampled_from(chosen)


def maintenances() -> st.SearchStrategy[Maintenance]:
    """:class:`Maintenance` operations: a task that blocks, completes or fails."""
    return st.sampled_from(MAINTENANCES)


def operations() -> st.SearchStrategy[Operation]:
    """Any single :data:`Operation`."""
    return st.one_of(
        sends(),
        inbox_edits(),
        cancels(),
        maintenances(),
        st.sampled_from((ReleaseMaintenance(), ReleaseMaintenance(fail=True))),
        answers(),
        st.sampled_from((ReleaseGate(), ReleaseGate("AUTH"), ReleaseGate("SERVER"))),
        st.sampled_from((Advance(15.0), Advance(1.0), Advance(0.25))),
        st.just(WaitIdle()),
        st.just(Dispose()),
        st.sampled_from((SelectPreset("alpha"), SelectPreset("beta"))),
    )


def operation_sequences(*, max_size: int = 30) -> st.SearchStrategy[list[Operation]]:
    """Lists of :data:`Operation` values, for :meth:`AgentStateMachine.check_operations`."""
    return st.lists(operations(), max_size=max_size)
