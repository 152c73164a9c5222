"""Hypothesis strategies for agent inputs: messages, causes and operation sequences.

The operations are plain frozen values, one class per kind of thing a test can do
to a live agent (send input, edit the inbox, cancel, run maintenance, answer the
model, move virtual time, wait, dispose). :class:`~dsh_trio.testing.AgentStateMachine`
draws its rules' arguments from these strategies and applies the values with
:meth:`~dsh_trio.testing.AgentStateMachine.apply`, so a program hypothesis prints is
also a list of values a regression test can replay.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal, TypeAlias

import attrs
from hypothesis import strategies as st

from .._values import (
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
    "Answer",
    "Advance",
    "Cancel",
    "Dispose",
    "InboxEdit",
    "Maintenance",
    "Operation",
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

#: Ids that collide on purpose: a message drawn with one of these is often a
#: duplicate of something pending, or a re-insertion of something consumed.
ID_POOL: tuple[str, ...] = ("m0", "m1", "m2", "m3")
TEXTS: tuple[str, ...] = ("hello", "go on", "", "stop", "ünïcødé ✓", "secret")

Target: TypeAlias = InboxTarget | Literal["next-turn", "next-step"]


def message_ids() -> st.SearchStrategy[MessageId]:
    """Message ids: usually one of a small shared pool (duplicates), else fresh ones."""
    return st.one_of(
        st.sampled_from(ID_POOL),
        st.integers(min_value=100, max_value=10**9).map(lambda n: f"u{n}"),
    ).map(MessageId)


def user_messages(
    *, ids: st.SearchStrategy[MessageId] | None = None
) -> st.SearchStrategy[UserMessage]:
    """Valid :class:`UserMessage` values: one text block, user or plugin source.

    Args:
        ids: the id strategy (default :func:`message_ids`).
    """
    return st.builds(
        UserMessage,
        id=ids if ids is not None else message_ids(),
        content=st.sampled_from(TEXTS).map(lambda text: (TextBlock(text),)),
        source=st.sampled_from((UserSource(), PluginSource("demo-plugin", "note"))),
    )


def cancel_causes() -> st.SearchStrategy[CancelCause]:
    """Every kind of cancel cause (user, parent, hook with a reason, disposed)."""
    return st.one_of(
        st.just(UserCancel()),
        st.just(ParentCancel()),
        st.sampled_from(("too slow", "policy", "")).map(HookCancel),
        st.just(DisposedCancel()),
    )


def inbox_targets() -> st.SearchStrategy[Target]:
    """Inbox targets, as :class:`InboxTarget` members or their plain strings."""
    return st.sampled_from(
        (InboxTarget.NEXT_TURN, InboxTarget.NEXT_STEP, "next-turn", "next-step")
    )


def _short(message: UserMessage) -> str:
    text = "".join(getattr(b, "text", "?") for b in message.content)
    return f"{message.id}:{text!r}"


# --------------------------------------------------------------------------- operations


@attrs.frozen
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


@attrs.frozen
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
        if self.kind in ("remove",):
            return f"InboxEdit.remove(pick={self.pick})"
        if self.kind == "replace":
            return f"InboxEdit.replace(pick={self.pick}, {inserted})"
        if self.kind == "splice":
            return f"InboxEdit.splice({str(self.target)!r}, {self.start}, {self.delete_count}, [{inserted}])"
        return f"InboxEdit.{self.kind}({str(self.target)!r}, {inserted})"


@attrs.frozen
class Cancel:
    """``agent.cancel(cause, keep_inbox=...)``, then each of ``then`` in the same tick.

    What follows arrives after the abort and before the aborted activity wound
    down: sends meet the wake latch and the next-turn redirection, and further
    cancels meet the first-cause rule. (The ``then`` of a nested cancel is ignored.)
    """

    cause: CancelCause
    keep_inbox: bool = False
    then: tuple[Send | Cancel, ...] = ()


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
)


def sends(
    *, messages: st.SearchStrategy[UserMessage] | None = None
) -> st.SearchStrategy[Send]:
    """:class:`Send` operations: followup, steer, inject, or send with any target/wakeup."""
    return st.builds(
        Send,
        message=messages if messages is not None else user_messages(),
        target=inbox_targets(),
        wakeup=st.booleans(),
        alias=st.booleans(),
    )


def inbox_edits(
    *, messages: st.SearchStrategy[UserMessage] | None = None
) -> st.SearchStrategy[InboxEdit]:
    """:class:`InboxEdit` operations: remove, replace, splice, clear, append, prepend."""
    msgs = messages if messages is not None else user_messages()
    pick = st.integers(min_value=0, max_value=6)
    return st.one_of(
        st.builds(InboxEdit, kind=st.just("remove"), pick=pick),
        st.builds(
            InboxEdit, kind=st.just("replace"), pick=pick, messages=st.tuples(msgs)
        ),
        st.builds(
            InboxEdit,
            kind=st.just("splice"),
            target=inbox_targets(),
            start=st.integers(min_value=-3, max_value=4),
            delete_count=st.integers(min_value=-1, max_value=3),
            messages=st.lists(msgs, max_size=2).map(tuple),
        ),
        st.just(InboxEdit(kind="clear")),
        st.builds(
            InboxEdit,
            kind=st.sampled_from(("append", "prepend")),
            target=inbox_targets(),
            messages=st.tuples(msgs),
        ),
    )


def cancels() -> st.SearchStrategy[Cancel]:
    """:class:`Cancel` operations: every cause, ``keep_inbox`` on/off, then sends and cancels."""
    again = st.builds(Cancel, cause=cancel_causes(), keep_inbox=st.booleans())
    return st.builds(
        Cancel,
        cause=cancel_causes(),
        keep_inbox=st.booleans(),
        then=st.lists(st.one_of(sends(), again), max_size=3).map(tuple),
    )


_ANSWERS: Final[Mapping[AnswerKind, st.SearchStrategy[Answer]]] = {
    "reply": st.builds(
        Answer, kind=st.just("reply"), text=st.sampled_from(("ok", "partial", " ", ""))
    ),
    "max-tokens": st.builds(
        Answer, kind=st.just("max-tokens"), text=st.sampled_from(("cut", " ", ""))
    ),
    "tool-calls": st.builds(
        Answer, kind=st.just("tool-calls"), calls=st.integers(min_value=1, max_value=2)
    ),
    "fail": st.builds(
        Answer,
        kind=st.just("fail"),
        code=st.sampled_from(("AUTH", "RATE_LIMIT", "SERVER", "ABORTED")),
    ),
    "fail-in-band": st.builds(
        Answer,
        kind=st.just("fail-in-band"),
        code=st.sampled_from(("AUTH", "RATE_LIMIT", "SERVER", "ABORTED")),
    ),
    "raise": st.just(Answer(kind="raise")),
    "hang": st.builds(
        Answer, kind=st.just("hang"), text=st.sampled_from(("partial", " ", ""))
    ),
    "gate": st.builds(
        Answer,
        kind=st.just("gate"),
        text=st.just("gated"),
        after=st.integers(min_value=0, max_value=3),
    ),
}


def answers(*kinds: AnswerKind) -> st.SearchStrategy[Answer]:
    """:class:`Answer` values of the given kinds (all kinds by default).

    Kinds: ``reply``, ``max-tokens``, ``tool-calls``, ``fail``, ``fail-in-band``,
    ``raise``, ``hang``, ``gate``.

    Raises:
        KeyError: an unknown kind.
    """
    chosen = kinds or tuple(_ANSWERS)
    return st.one_of(*(_ANSWERS[k] for k in chosen))


def maintenances() -> st.SearchStrategy[Maintenance]:
    """:class:`Maintenance` operations: a task that blocks, completes or fails."""
    return st.builds(Maintenance, mode=st.sampled_from(("block", "complete", "fail")))


def operations() -> st.SearchStrategy[Operation]:
    """Any single :data:`Operation`."""
    return st.one_of(
        sends(),
        inbox_edits(),
        cancels(),
        maintenances(),
        st.builds(ReleaseMaintenance, fail=st.booleans()),
        answers(),
        st.builds(ReleaseGate, fail_code=st.sampled_from((None, "AUTH", "SERVER"))),
        st.builds(Advance, seconds=st.sampled_from((15.0, 1.0, 0.25))),
        st.just(WaitIdle()),
        st.just(Dispose()),
    )


def operation_sequences(*, max_size: int = 30) -> st.SearchStrategy[list[Operation]]:
    """Lists of :data:`Operation` values, for :meth:`AgentStateMachine.check_operations`."""
    return st.lists(operations(), max_size=max_size)
