"""The turn/step driver: what the driver task runs between ``turn/start`` and ``turn/end``."""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from ..errors import LlmError, PersistenceError
from ..llm import error_chain
from ..values import (
    CANCEL_CAUSES,
    Aborted,
    CallConfig,
    CancelCause,
    DisposedCancel,
    Enter,
    Errored,
    HookCancel,
    InboxTarget,
    LegacyCancel,
    LlmFailure,
    MaxTokens,
    ParentCancel,
    PreStepDecision,
    Reject,
    Retry,
    StepEnd,
    StepStart,
    ToolCallBlock,
    TurnEnd,
    TurnEndReason,
    UserCancel,
    UserMessage,
    builder,
)
from ._answers import answer_calls
from ._attempt import Attempts
from ._context import render_prompt
from ._lane import FastTurn, admits, boundary
from ._payloads import (
    AgentErrorEvent,
    PreStep,
    RequestFailed,
    RequestProposal,
    TurnStopping,
)
from ._steps import (
    COMPLETED as _COMPLETED,
    AgentConfigError,
    StepRequests,
    ends_before_step,
)

if TYPE_CHECKING:
    from ._output import TurnOutput
    from ._signal import CancelSignal
    from ._work import AgentWork

__all__ = ["AgentConfigError", "OpenedTurn", "TurnDriver"]

logger = logging.getLogger("dsh_trio")

# Built every turn or step from checked parts (see ``values.builder``).
_turn_end = builder(TurnEnd)
_step_start = builder(StepStart)
_step_end = builder(StepEnd)
_aborted = builder(Aborted)


#: The cause classes ``turn/end`` records as they are: the library's own.
_PLAIN_CAUSES: Final = frozenset(CANCEL_CAUSES.values())


def _plain_cause(cause: CancelCause) -> CancelCause:
    """A plain copy of a cause (what ``turn/end`` records), also for user subclasses."""
    if cause.__class__ in _PLAIN_CAUSES:
        return cause  # already plain: a frozen value of one of the library's classes
    if isinstance(cause, HookCancel):
        return HookCancel(cause.reason)
    for cls in (UserCancel, ParentCancel, DisposedCancel, LegacyCancel):
        if isinstance(cause, cls):
            return cls()
    return cause


def _failure_of(exc: BaseException) -> LlmFailure:
    if isinstance(exc, LlmError):
        return exc.failure
    if isinstance(exc, PersistenceError):
        return LlmFailure(message=str(exc), code="PERSISTENCE")
    return LlmFailure(message=error_chain(exc), code="UNKNOWN")


@attrs.define(eq=False, slots=True)
class OpenedTurn:
    """A turn whose synchronous head ran (``turn/start`` written, the first batch
    claimed), and where it stands between its steps.

    Made by ``AgentWork.open_turn``; the step boundaries (:meth:`TurnDriver.next_step`,
    :meth:`TurnDriver.step_ended`) keep the rest up to date and
    :meth:`TurnDriver.close_turn` reads it.
    """

    turn: int
    signal: CancelSignal
    #: The batch the next step boundary enters (``None``: it claims its own).
    claimed: list[UserMessage] | None
    error: Exception | None = None
    fresh: bool = False  #: opened before its driver task started (see ``boundary``)
    #: The list the next boundary claims from.
    target: InboxTarget = InboxTarget.NEXT_TURN
    #: The batch the step about to run claimed (validated by the inbox).
    entered: list[UserMessage] = attrs.Factory(list)
    #: How the turn ends if no step runs after the last one, and whether the driver
    #: stops after it (a rejected or empty first step).
    turn_ends: TurnEndReason | None = None
    stop: bool = False


class TurnDriver:
    """The turns of one agent: steps, requests, model attempts and tool rounds.

    Runtime use only: the agent's driver task calls :meth:`run_turn` for each turn the
    agent opened. The per-agent request state (system-prompt projection, logged
    header, replace generation, attempt numbering) lives here.

    The common turn is run by the fast lane (:class:`~._lane.FastTurn`), one
    coroutine from ``turn/start`` to ``turn/end``; every other turn by the plain code
    here (:meth:`run_turn` picks). Every coroutine frame on the driver's stack is
    resumed once per streamed chunk, so the plain stack stays ``_run_turn`` ->
    ``_run_step`` -> ``Attempts.finish``; helpers that run while a stream is open are
    synchronous.
    """

    __slots__ = (
        "_agent",
        "_attempts",
        "_inbox",
        "_lane",
        "_output",
        "_requests",
        "_services",
        "_session",
        "_work",
        "step",
    )

    def __init__(self, work: AgentWork) -> None:
        agent = self._agent = work.agent
        self._work = work
        self._session = work.session
        self._inbox = work.inbox
        services = self._services = work.services
        self._attempts = Attempts(agent, services.bus, services.models)
        self._requests = StepRequests(agent, services)
        #: The step of the open turn (0 before its first ``step/start``).
        self.step = 0
        self._lane = FastTurn(self, agent, services, self._attempts, self._requests)
        # The typed output of the turn armed for it (see ``arm_output``), else None.
        self._output: TurnOutput | None = None

    def arm_output(self, output: TurnOutput) -> None:
        """The turn about to run claimed a message that asks for typed output.

        Called at the claim, in the turn's synchronous head (``open_turn``), so the
        next :meth:`run_turn` is that turn's: it (only) runs its steps' tools
        through ``output``, the runtime's tools plus ``final_result`` (see
        :mod:`._output`), and disarms it as it ends.
        """
        self._output = output

    def report_error(self, turn: int, step: int, exc: Exception) -> None:
        """Log ``exc`` and emit ``agent/error`` for ``turn``/``step``. Never blocks."""
        agent = self._agent
        logger.debug("agent %s: turn %d step %d failed: %r", agent.id, turn, step, exc)
        bus = self._services.bus
        if bus.has_listeners("agent/error"):
            bus.emit(
                "agent/error", AgentErrorEvent(agent, turn, step, exc), scope=agent
            )

    # ------------------------------------------------------------------ turns

    def run_turn(self, opened: OpenedTurn) -> Coroutine[Any, Any, bool]:
        """Run one opened turn to its ``turn/end``; True if the driver should go on.

        A failure in the turn is reported (``agent/error``) and ends it ``Errored``;
        its own cancellation ends it ``Aborted(first cause)``; one from outside (the
        owner shutting down) is recorded as a disposal, closes the turn, propagates.

        The common turn (:func:`~._lane.admits`; not a typed-output turn, whose
        tools and end are its output's) is run by the fast lane; the
        coroutine returned is the lane's or the plain path's, so no frame of this
        method stays on the stack.
        """
        if self._output is None and admits(self._services.bus):
            return self._lane.run_turn(opened)
        return self._run_turn(opened)

    async def _run_turn(self, opened: OpenedTurn) -> bool:
        """:meth:`run_turn` on the plain path."""
        signal = opened.signal
        self.step = 0
        failure: Exception | None = None
        outer: BaseException | None = None
        try:
            with signal.scope:
                try:
                    while (decision := await self.next_step(opened)) is not None:
                        step_end = await self._run_step(
                            opened.turn, self.step + 1, decision, signal, opened.entered
                        )
                        if not await self.step_ended(opened, step_end):
                            break
                    # No success is reported for events the log has not taken.
                    if signal.cause is None:
                        await self.wait_written()
                except Exception as exc:
                    failure = exc
        except BaseException as exc:  # noqa: ASYNC103  # re-raised by ``close_turn``, after turn/end is written
            # From outside the turn (owner shutting down) or ^C: a disposal, if first.
            outer = exc
            signal.cancel(DisposedCancel())
        return self.close_turn(opened, failure, outer)  # noqa: ASYNC910

    async def next_step(self, opened: OpenedTurn) -> Enter | None:
        """The boundary before a step of ``opened``: claim, checkpoint, pre-step.

        Returns the decision of the step to run (its number is ``step + 1``, the
        batch it claimed ``opened.entered``), or ``None`` when the turn ends before
        it (``opened.turn_ends`` and ``opened.stop`` say how). Raises the failure of
        the turn's head.
        """
        if opened.error is not None:
            raise opened.error
        claimed = opened.claimed
        turn = opened.turn
        if claimed is None:
            claimed = self._inbox.claim(opened.target, turn)
        await boundary(opened.fresh)()
        step = self.step + 1
        default = self._requests.proposal(claimed, step == 1)
        decision: PreStepDecision = default
        if self._services.bus.has_listeners("agent/pre-step"):
            decision = await self.pre_step(default, claimed, turn, step, opened.signal)
        opened.entered, opened.claimed = claimed, None
        # An ``Enter`` with messages runs its step (``ends_before_step``).
        if decision.__class__ is not Enter or not decision.messages:
            ends = ends_before_step(decision, opened.turn_ends, step == 1)
            if ends is not None:
                opened.turn_ends, opened.stop = ends
                return None
        assert isinstance(decision, Enter)
        return decision

    async def step_ended(
        self, opened: OpenedTurn, step_end: TurnEndReason | None
    ) -> bool:
        """The boundary after a step of ``opened`` that ended the turn as
        ``step_end`` (``None``: it goes on): True to run another step."""
        signal = opened.signal
        if signal.cause is not None:
            # Cancelled since the step's last checkpoint (by a listener, say): the
            # turn ends Aborted as if ``Cancelled`` had been raised, without the
            # unwinding.
            return False  # noqa: ASYNC910  # the turn's scope is cancelled and left at once
        opened.fresh = step_end is None  # a tool round ends with a yield
        if not isinstance(opened.turn_ends, MaxTokens):
            opened.turn_ends = step_end
        await trio.lowlevel.checkpoint_if_cancelled()
        inbox = self._inbox
        if opened.turn_ends is not None and not inbox.next_step:
            if self._services.bus.has_listeners("agent/turn-stopping"):
                await self.turn_stopping(opened.turn, signal)
            if not inbox.next_step:
                return False
        opened.target = InboxTarget.NEXT_STEP
        return True

    def close_turn(
        self,
        opened: OpenedTurn,
        failure: Exception | None,
        outer: BaseException | None,
    ) -> bool:
        """Write ``turn/end`` of ``opened``, which ``failure`` failed (else ``None``);
        True if the driver should go on to the next turn.

        Raises ``outer``, the exception from outside the turn, once the turn ended.
        """
        signal = opened.signal
        turn_ends = opened.turn_ends
        stop = (
            not self._end_turn(opened.turn, signal, failure, turn_ends) or opened.stop
        )
        self._output = None  # typed output is the claiming turn's only
        if outer is not None:
            raise outer
        if stop or failure is not None or signal.cause is not None:
            return False
        return self._inbox.has_pending

    async def wait_written(self) -> None:
        """Wait until the turn's events so far are written (see ``AgentWork``)."""
        await self._work.recording.wait_written()

    def _end_turn(
        self,
        turn: int,
        signal: CancelSignal,
        failure: Exception | None,
        turn_ends: TurnEndReason | None,
    ) -> bool:
        """Write ``turn/end`` with the turn's reason; False if that append failed."""
        reason: TurnEndReason
        cause = signal.cause
        if cause is not None:
            reason = _aborted(_plain_cause(cause))
        elif failure is not None:
            self.report_error(turn, self.step, failure)
            reason = Errored(_failure_of(failure))
        else:
            reason = turn_ends if turn_ends is not None else _COMPLETED
        try:
            self._session.append_trusted("turn/end", _turn_end(turn, reason))
        except Exception as exc:
            self.report_error(turn, self.step, exc)
            return False
        return True

    async def turn_stopping(self, turn: int, signal: CancelSignal) -> None:
        agent = self._agent
        await self._services.bus.serial(
            "agent/turn-stopping", TurnStopping(agent, turn, signal), scope=agent
        )
        await trio.lowlevel.checkpoint_if_cancelled()

    async def pre_step(
        self,
        default: Enter,
        claimed: list[UserMessage],
        turn: int,
        step: int,
        signal: CancelSignal,
    ) -> PreStepDecision:
        """The ``agent/pre-step`` waterfall's decision, from ``default`` (awaited only
        with a listener: with none, the caller's pre-step yield is the checkpoint)."""
        agent = self._agent
        decision = await self._services.bus.waterfall(
            "agent/pre-step",
            PreStep(agent, tuple(claimed), turn, step, signal),
            default,
            scope=agent,
        )
        if not isinstance(decision, (Reject, Enter)):
            raise TypeError(
                f"agent/pre-step must return Reject() or Enter(messages), got {decision!r}"
            )
        await trio.lowlevel.checkpoint_if_cancelled()
        return decision

    # ------------------------------------------------------------------ steps

    async def _run_step(
        self,
        turn: int,
        step: int,
        decision: Enter,
        signal: CancelSignal,
        claimed: list[UserMessage],
    ) -> TurnEndReason | None:
        """One step, ``step/start`` to ``step/end``: requests (retried), then tool calls.

        However the step ends (a result, a failure, a cancellation), each tool call
        of its assistant message has a ``tool/result`` before ``step/end``
        (:func:`answer_calls`), so the history stays well-formed.

        Returns how the step ends the turn, or ``None`` when the turn goes on.
        """
        session = self._session
        session.append_trusted("step/start", _step_start(turn, step))
        self.step = step
        calls: list[ToolCallBlock] = []
        mark = 0  # the seq from which this step's tool events are appended
        try:
            services = self._services
            agent = self._agent
            requests = self._requests
            rendered = render_prompt(services, agent)
            output = self._output
            # A typed-output turn's tools: the runtime's plus ``final_result``.
            executor = services.tools if output is None else output
            tools = executor.schemas(agent)
            entering: Enter | None = decision  # on the step's first attempt only
            while True:
                if services.bus.has_listeners("agent/request"):
                    config = await self.requested(turn, step, signal)
                else:  # nothing to wait for
                    config = requests.seed()
                request = requests.next_request(
                    turn, step, config, entering, claimed, rendered, tools
                )
                entering = None
                await trio.lowlevel.checkpoint_if_cancelled()
                outcome = await self._attempts.run(turn, step, request, signal)
                if outcome is None:  # cancelled, prefix settled; the turn sees why
                    return None
                if isinstance(outcome, LlmFailure):
                    if await self.retry_requested(turn, step, config, outcome, signal):
                        continue
                    raise LlmError(outcome)
                message, finish = outcome
                if finish.kind == "max-tokens":
                    return MaxTokens()
                for block in message.content:
                    if isinstance(block, ToolCallBlock):
                        break
                else:  # no tool call
                    if output is not None:
                        output.missed(agent)  # typed output: remind, or fail the turn
                    return _COMPLETED
                calls = [b for b in message.content if isinstance(b, ToolCallBlock)]
                mark = session.next_seq
                concluded = await executor.execute(
                    agent, turn=turn, step=step, calls=calls, signal=signal
                )
                answer_calls(session, agent.id, turn, step, calls, mark, None, signal)
                return _COMPLETED if concluded else None
        except BaseException as exc:
            if calls:
                answer_calls(
                    session, self._agent.id, turn, step, calls, mark, exc, signal
                )
            raise
        finally:
            session.append_trusted("step/end", _step_end(turn, step))

    async def retry_requested(
        self,
        turn: int,
        step: int,
        config: CallConfig,
        failure: LlmFailure,
        signal: CancelSignal,
    ) -> bool:
        """Ask ``agent/request-error`` what to do about ``failure``; True to retry."""
        no_action: Retry | None = None
        action = no_action
        services = self._services
        bus = services.bus
        if bus.has_listeners("agent/request-error"):
            agent = self._agent
            action = await bus.waterfall(
                "agent/request-error",
                RequestFailed(
                    agent,
                    turn,
                    step,
                    config.provider,
                    failure,
                    services.models.retry_policy(config.provider),
                    signal,
                ),
                no_action,
                scope=agent,
            )
        await trio.lowlevel.checkpoint_if_cancelled()
        return isinstance(action, Retry)

    # ------------------------------------------------------------------ requests

    async def requested(self, turn: int, step: int, signal: CancelSignal) -> CallConfig:
        """The config the ``agent/request`` waterfall gives (awaited only with a
        listener: with none, the seed is the config)."""
        agent = self._agent
        config = await self._services.bus.waterfall(
            "agent/request",
            RequestProposal(agent, turn, step, signal),
            self._requests.seed(),
            scope=agent,
        )
        if not isinstance(config, CallConfig):
            raise TypeError(f"agent/request must return a CallConfig, got {config!r}")
        await trio.lowlevel.checkpoint_if_cancelled()
        return config
