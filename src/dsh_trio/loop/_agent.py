"""The agent: the public face that composes its work, its inbox and its turn waits."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from ..values import (
    AgentOptions,
    AgentStatus,
    CancelCause,
    InboxTarget,
    SessionId,
    UserMessage,
)
from ._output import TurnOutput, typed_output
from ._scope import AgentScope
from ._signal import CancelSignal
from ._turns import OpenTurnStream, TurnResult, TurnStream, TurnWatch
from ._waits import as_message

if TYPE_CHECKING:
    from ..session import Session
    from ._inbox import Inbox
    from ._work import AgentWork

__all__ = ["Agent"]

T = TypeVar("T")


class Agent:
    """A live agent: a session, an inbox, and a driver that runs turns on demand.

    Created by the runtime (``runtime.agents.create`` / ``open`` / ``resume``); there
    is no public constructor. An idle agent holds no task: a waking input runs the
    turn's synchronous prefix inline (durable splice, ``running`` status,
    ``turn/start``, claim) and only then starts the driver task in the owning
    nursery. Every activity (each turn, each maintenance task) runs in its own
    :class:`trio.CancelScope`; :meth:`cancel` records the first cause and cancels it.

    All input methods are synchronous, never block and must be called from within
    the trio run that owns the agent.
    """

    __slots__ = (
        "__weakref__",
        "_work",
        "id",
        "inbox",
        "options",
        "scope",
        "session",
    )

    def __init__(self, work: AgentWork, options: AgentOptions) -> None:
        session = work.session
        self.id: SessionId = session.id
        self.options = options
        self.session: Session = session
        self.scope = AgentScope(self, work.services)
        self.inbox: Inbox = work.inbox
        self._work = work
        work.bind(self)

    def __repr__(self) -> str:
        return f"<Agent {self.id!r} {self.status.value}>"

    # ------------------------------------------------------------------ reads

    @property
    def status(self) -> AgentStatus:
        """``RUNNING`` while a driver runs turns; ``IDLE`` otherwise (maintenance included)."""
        return self._work.phase.status

    @property
    def disposed(self) -> bool:
        """Whether :meth:`AgentHandle.dispose` has completed for this agent."""
        return self._work.disposed

    # ------------------------------------------------------------------ input

    def send(
        self, message: UserMessage, target: InboxTarget | str, wakeup: bool
    ) -> None:
        """Queue ``message`` on ``target``'s list; wake the driver if ``wakeup``.

        A waking send to an idle agent starts a turn before returning (the message
        is already claimed when this returns). A waking send that arrives after the
        current activity was cancelled goes to next-turn and runs once that activity
        has wound down (the wake latch), except under :class:`DisposedCancel`.

        Raises:
            TypeError: ``wakeup`` is not a bool.
            AgentDisposedError: the agent was disposed (or its disposal has drained
                it).
            PersistenceError: ``wakeup`` and the session's log cannot be written
                (nothing was queued); :meth:`flush` retries the writes.
            DuplicateMessageError: a message with this id is already pending.
            InvalidSpliceError: unknown target, or the message is not a valid UserMessage.
        """
        if wakeup is not True and wakeup is not False:
            raise TypeError(f"send() takes wakeup=True or wakeup=False, got {wakeup!r}")
        self._work.accept(message, target, wakeup)

    def followup(self, message: UserMessage) -> None:
        """Queue ``message`` as the prompt of its own turn (next-turn) and wake the driver.

        Raises as :meth:`send` (``PersistenceError`` while the log cannot be written).
        """
        self.send(message, InboxTarget.NEXT_TURN, True)

    def steer(self, message: UserMessage) -> None:
        """Queue ``message`` for the nearest step boundary (next-step) and wake the driver.

        Raises as :meth:`send` (``PersistenceError`` while the log cannot be written).
        """
        self.send(message, InboxTarget.NEXT_STEP, True)

    def inject(self, message: UserMessage) -> None:
        """Queue ``message`` for the next step boundary without waking the driver."""
        self.send(message, InboxTarget.NEXT_STEP, False)

    def cancel(self, cause: CancelCause, *, keep_inbox: bool = False) -> None:
        """Cancel the current activity with ``cause`` (the first cause wins).

        Unless ``keep_inbox``, everything pending is durably discarded first (also
        on an idle agent) and a latched wake is dropped. The activity's scope is
        cancelled, so whatever it awaits raises :class:`trio.Cancelled` at its next
        checkpoint; the turn ends ``Aborted(first cause)``. Never blocks.

        Raises:
            TypeError: ``cause`` is not a :class:`CancelCause`.
        """
        if not isinstance(cause, CancelCause):
            raise TypeError(
                f"cancel() takes a CancelCause (UserCancel(), HookCancel(reason), ...), got {cause!r}"
            )
        self._work.cancel(cause, keep_inbox)

    async def when_idle(self) -> None:
        """Return once no driver or maintenance task remains.

        Always checkpoints, also on an idle agent. Follows replacement drivers
        started before the observed one retired. Never raises a turn's failure;
        cancelling the caller only cancels the wait.
        """
        work = self._work
        while True:
            done = work.phase.done
            if done is None:
                await trio.lowlevel.checkpoint()
                return
            await done.wait()  # a checkpoint, also when ``done`` is already set
            current = work.phase.done
            if current is None or current is done:
                return  # idle now: the wait was this call's checkpoint

    async def flush(self) -> None:
        """Wait until every event appended before the call is written and durable.

        The durability barrier: once it returns, the session's persistence holds
        those events (fsynced unless its durability is ``"none"``), e.g.
        ``await agent.when_idle(); await agent.flush()``. Blocks on the disk (in a
        worker thread); with no persistence it returns after one checkpoint. A
        success ends a persistence fault: the agent accepts waking input again. If
        cancelled, whatever was not written stays queued. Never raises
        :class:`AgentDisposedError`.

        Raises:
            PersistenceError: a write failed (``__cause__`` is the writer's error,
                ``errno`` its errno); the events stay queued for the next flush.
                After disposal: events were left unwritten.
        """
        await self._work.recording.flush()

    async def run(
        self,
        message: UserMessage | str,
        *,
        output_type: Any = None,
        output_retries: int = 1,
        check: bool = True,
    ) -> TurnResult:
        """Queue ``message`` as a follow-up, wait for the turn that claims it, return its result.

        ``message`` is queued exactly as :meth:`followup` queues it (a string becomes
        ``user_message(message)``). The turn awaited is the one that claims this
        message, not merely the next turn to end: input queued before it runs first.
        Blocks until that turn's ``turn/end`` is written; the agent may go on with
        later input afterwards. Not idempotent: each call queues its message and
        runs a turn.

        Cancellation: cancelling the caller cancels *that* turn with
        :class:`UserCancel` (only that turn; the rest of the inbox is kept), waits
        for it to wind down (in a shielded scope: the turn's own scope is cancelled,
        so it ends at its next checkpoint) and then raises the caller's
        :class:`trio.Cancelled`, unchanged. By then the turn's
        ``turn/end`` is ``Aborted(UserCancel())``, its partial reply is kept and the
        driver that ran it has let go of the agent. If no turn has claimed the
        message yet, it is removed from the inbox instead and no turn runs for it.
        :meth:`stream` follows the same rule when its block is left early.

        If the agent goes idle with the message still queued (work parks after an
        errored, blocked or aborted turn), ``run`` wakes it again: a waiting ``run``
        gets its turn unless its message is removed from the inbox. It cannot be
        awaited from inside this agent's own turn (one of its tools or hooks, or a
        task they started) or maintenance task: the turn it would wait for cannot
        start before the current one ends, so it raises
        :class:`AgentReentrancyError` at once (queue with :meth:`followup` there).

        Typed output: with ``output_type``, the turn that claims the message (and no
        other turn) offers the model one more tool, ``final_result``, whose arguments
        schema is the type's JSON schema. A call whose arguments structure (with the
        project's cattrs converter) and validate gets a success result and ends the
        turn ``Completed`` after that tool round, with no further model step;
        ``result.output`` holds the value. Invalid arguments are answered with what
        was wrong and where (``$.lines[0].qty: expected an integer, got string
        "1"``) as that call's error result, and a reply that calls no tool gets a
        reminder (a next-step user message); each counts as a failed try, and after
        ``output_retries`` more failed tries than the first the turn ends
        ``Errored`` with code ``OUTPUT_INVALID``. ``output_type`` is an attrs class
        (the arguments object itself) or ``str``, ``int``, ``float``, ``bool``,
        ``list[X]``, ``tuple[X, ...]``, ``dict[str, X]``, ``X | None``,
        ``Literal[...]`` or an :class:`enum.Enum` (the arguments' ``response``
        key), nested freely but not recursively; attrs fields are written under the
        converter's wire keys (``line_items`` → ``lineItems``). The calls, results
        and reminders are ordinary session events, so a resumed session's history
        is coherent; the output type and the value are not persisted (a turn run
        after a resume offers no ``final_result`` unless asked again).

        Example::

            result = await agent.run("What is a nursery?")
            print(result.text)

            @attrs.frozen
            class Verdict:
                correct: bool
                reason: str

            verdict = (await agent.run("Is 7 prime?", output_type=Verdict)).output

        Args:
            message: the prompt, a :class:`UserMessage` or plain text.
            output_type: the type of the turn's typed output (see above), or
                ``None`` for none.
            output_retries: how many more tries the model gets after its first
                failed one (typed output only).
            check: raise :class:`TurnFailedError` for a failed turn (the default);
                with ``False``, return its result instead.

        Returns:
            The :class:`TurnResult`: the turn's number, its ``turn/end`` reason, its
            final assistant text, the messages it appended, its summed usage and
            its typed ``output``: the value of the accepted ``final_result``
            call, whatever the turn's end; ``None`` without ``output_type`` and
            when no call was accepted (the turn ended ``MaxTokens`` or
            ``Blocked``, another tool concluded it, or it failed first).

        Raises:
            TurnFailedError: ``check`` and the turn errored (``result.reason`` is
                ``Errored(failure)``; ``failure.code`` is ``OUTPUT_INVALID`` when
                the model gave no valid final result) or was aborted
                (``Aborted(cause)``), also when the message was discarded from the
                inbox before a turn claimed it (``result.turn`` is ``None``).
            ToolDefinitionError: ``output_type`` is not a type typed output
                supports (the message names the part), or the agent already offers
                a tool named ``final_result`` (nothing was queued).
            AgentDisposedError: the agent was disposed (nothing was queued).
            AgentReentrancyError: called from inside this agent's own turn or
                maintenance task (nothing was queued).
            PersistenceError, DuplicateMessageError, InvalidSpliceError: as
                :meth:`followup` (nothing was queued).
            TypeError: ``message`` is neither a :class:`UserMessage` nor a str, or
                ``output_retries`` is not an int or is given without
                ``output_type``.
            ValueError: ``output_retries`` is negative.
        """
        queued = as_message(message)
        output = (
            None
            if output_type is None and output_retries == 1
            else self._output(output_type, output_retries)
        )
        waits = self._work.waits()
        waits.refuse_reentry("run()")
        await trio.lowlevel.checkpoint_if_cancelled()
        watch = TurnWatch(queued.id, output=output)
        waits.follow(queued, watch)
        return await waits.outcome(watch, check=check, owned=True)

    def stream(
        self,
        message: UserMessage | str,
        *,
        output_type: Any = None,
        output_retries: int = 1,
        detach: bool = False,
    ) -> AbstractAsyncContextManager[TurnStream]:
        """Queue ``message`` as a follow-up and follow its turn live.

        ``async with agent.stream(message) as turn:`` queues the message (as
        :meth:`run`) on entry and yields a :class:`TurnStream`:
        ``async for delta in turn.text()`` gives the turn's text deltas as they
        stream, ``turn.frames()`` every live frame of the turn, and
        ``await turn.result()`` its :class:`TurnResult` exactly as :meth:`run`
        returns it (raising :class:`TurnFailedError` likewise). Frames are buffered
        without bound from entry until the block is left, so a reader that stops
        reading never holds the turn up.

        The block owns the turn, as a nursery owns its tasks: leaving it before the
        turn ended (``break`` out of ``turn.text()``, an exception, the caller
        cancelled) cancels that turn with :class:`UserCancel` (the cause of a
        cancelled :meth:`run` caller: whoever follows the turn gave up on it; no
        hook, parent or disposal did) and waits for it to wind down before the
        block exits. The wait runs in a shielded scope and is bounded: the turn's
        own scope is cancelled, so it ends at its next checkpoint (after whatever
        it shields). Once the block has exited, the turn's ``turn/end`` is
        ``Aborted(UserCancel())`` (or the earlier cause, if it was cancelled
        already), no more of the model's reply is read, the partial reply is kept
        (an interrupted assistant message) and the driver has let go of the agent. The exception leaving the block (a
        :class:`trio.Cancelled` included) propagates unchanged. If no turn has
        claimed the message yet, it is removed from the inbox instead. Leaving the
        block after the turn ended changes nothing.

        With ``detach=True`` the block does not own the turn: leaving it, however
        it is left, only stops the buffering, and the turn runs on (``await
        agent.when_idle()`` waits for it).

        ``output_type`` and ``output_retries`` ask the turn for a typed output, as
        :meth:`run` does; ``turn.result()`` carries it in ``output``. Both are
        checked when this is called.

        This call itself does nothing and never blocks; entering the block
        checkpoints. Each call queues its own message; a context can be entered once.

        Example::

            async with agent.stream("Tell me a story") as turn:
                async for delta in turn.text():
                    print(delta, end="", flush=True)
                result = await turn.result()

        Raises (on entry):
            AgentReentrancyError: entered from inside this agent's own turn (one of
                its tools or hooks) or maintenance task, where it could never be
                followed to its end (nothing was queued).
            AgentDisposedError, PersistenceError, DuplicateMessageError,
            InvalidSpliceError: as :meth:`followup` (nothing was queued).

        Raises:
            TypeError: ``message`` is neither a :class:`UserMessage` nor a str,
                ``detach`` is not a bool, or ``output_retries`` is not an int or is
                given without ``output_type``.
            ValueError: ``output_retries`` is negative.
            ToolDefinitionError: as :meth:`run`, for ``output_type``.
        """
        if detach is not True and detach is not False:
            raise TypeError(
                f"stream() takes detach=True or detach=False, got {detach!r}"
            )
        queued = as_message(message)
        output = self._output(output_type, output_retries)
        return OpenTurnStream(self._work.waits(), queued, detach=detach, output=output)

    def _output(self, output_type: Any, output_retries: int) -> TurnOutput | None:
        """The typed output ``run``/``stream`` ask for, checked (``None`` for none)."""
        if output_type is not None:
            return typed_output(
                self, self._work.services.tools, output_type, output_retries
            )
        if output_retries != 1:
            raise TypeError(
                f"output_retries={output_retries!r} was given without output_type: "
                "it counts the tries of a typed output"
            )
        return None

    async def run_maintenance(self, task: Callable[[CancelSignal], Awaitable[T]]) -> T:
        """Run ``task(signal)`` as a maintenance activity from the idle phase.

        The phase is claimed before the first checkpoint; status stays ``idle``.
        Blocks for as long as ``task`` runs, in the caller's task. Waking input sent
        meanwhile is queued and starts its turn when the task ends. If :meth:`cancel`
        interrupts the task, raise :class:`AgentCancelled`; otherwise return or raise
        exactly what ``task`` did.

        Raises:
            AgentBusyError: a turn or another maintenance task is active.
            AgentDisposedError: the agent was disposed.
        """
        return await self._work.maintain(task)
