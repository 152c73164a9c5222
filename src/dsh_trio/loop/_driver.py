"""The turn/step driver: what the driver task runs between ``turn/start`` and ``turn/end``."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import attrs
import trio

from ..errors import DshError, LlmError, PersistenceError
from ..llm import ModelRequest, error_chain
from ..values import (
    Aborted,
    Blocked,
    CallConfig,
    CancelCause,
    Completed,
    DisposedCancel,
    Enter,
    Errored,
    HookCancel,
    InboxTarget,
    JsonValue,
    LegacyCancel,
    LlmFailure,
    MaxTokens,
    ParentCancel,
    PreStepDecision,
    Reject,
    RequestContextData,
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
from ._context import RuntimeContextProjection, render_prompt
from ._header_log import header_event
from ._payloads import (
    AgentErrorEvent,
    PreStep,
    RequestFailed,
    RequestProposal,
    TurnStopping,
)
from ._prompt import SystemPromptProjection
from ._requests import request_seed

if TYPE_CHECKING:
    from ._agent import Agent
    from ._services import AgentServices
    from ._signal import CancelSignal

__all__ = ["AgentConfigError", "OpenedTurn", "TurnDriver"]

logger = logging.getLogger("dsh_trio")

# Built every turn or step from checked parts (see ``values.builder``).
_turn_end = builder(TurnEnd)
_step_start = builder(StepStart)
_step_end = builder(StepEnd)
_model_request = builder(ModelRequest)
_COMPLETED = Completed()  # shared: a frozen value with no fields


class AgentConfigError(DshError, ValueError):
    """A request could not be built: no provider/model after ``agent/request``."""


def _plain_cause(cause: CancelCause) -> CancelCause:
    """A plain copy of a cause (what ``turn/end`` records), also for user subclasses."""
    if isinstance(cause, HookCancel):
        return HookCancel(cause.reason)
    for cls in (UserCancel, ParentCancel, DisposedCancel, LegacyCancel):
        if isinstance(cause, cls):
            return cls()
    return cause


def _ends_before_step(
    decision: PreStepDecision, turn_ends: TurnEndReason | None, first: bool
) -> tuple[TurnEndReason | None, bool] | None:
    """How the turn ends before the step ``decision`` is for: ``(reason, stop)``.

    ``None`` when the step runs; ``first`` when no step of the turn ran yet.
    """
    if isinstance(decision, Reject):
        return Blocked(), True
    if turn_ends is not None and not decision.messages:
        return turn_ends, False
    if first and not decision.messages:
        return _COMPLETED, True
    return None


def _boundary(fresh: bool) -> Callable[[], Awaitable[None]]:
    """What a step boundary awaits after its claim: a checkpoint, or only a check for
    a cancel when nothing but synchronous code ran since the last yield: the first
    boundary of a driver task that just started (its start was that yield), and the
    boundary after a tool round (``ToolRegistry.execute`` returns right after a
    checkpoint; the step's remaining bookkeeping is synchronous)."""
    lowlevel = trio.lowlevel
    return lowlevel.checkpoint_if_cancelled if fresh else lowlevel.checkpoint


def _failure_of(exc: BaseException) -> LlmFailure:
    if isinstance(exc, LlmError):
        return exc.failure
    if isinstance(exc, PersistenceError):
        return LlmFailure(message=str(exc), code="PERSISTENCE")
    return LlmFailure(message=error_chain(exc), code="UNKNOWN")


@attrs.define(eq=False, slots=True)
class OpenedTurn:
    """A turn whose synchronous head ran: ``turn/start`` written, the first batch claimed."""

    turn: int
    signal: CancelSignal
    claimed: list[UserMessage] | None
    error: Exception | None = None
    fresh: bool = False  #: opened before its driver task started (see ``_boundary``)


class TurnDriver:
    """The turns of one agent: steps, requests, model attempts and tool rounds.

    Runtime use only: the agent's driver task calls :meth:`run_turn` for each turn the
    agent opened. The per-agent request state (system-prompt projection, logged
    header, replace generation, attempt numbering) lives here.

    Hot path: every coroutine frame on the driver's stack is resumed once per streamed
    chunk, so the stack stays ``run_turn`` -> ``_run_step`` -> ``Attempts.run``; helpers
    that run while a stream is open are synchronous.
    """

    __slots__ = (
        "_agent",
        "_attempts",
        "_contexts",
        "_header_logged",
        "_inbox",
        "_last_generation",
        "_projection",
        "_services",
        "_session",
        "_step",
    )

    def __init__(self, agent: Agent, services: AgentServices) -> None:
        self._agent = agent
        self._session = agent.session
        self._inbox = agent.inbox
        self._services = services
        self._attempts = Attempts(agent, services.bus, services.models)
        self._projection: SystemPromptProjection | None = None
        self._contexts = RuntimeContextProjection(agent.session)
        self._header_logged = False
        self._last_generation = -1
        self._step = 0  # the step of the open turn (0 before its first step/start)

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

    async def run_turn(self, opened: OpenedTurn) -> bool:
        """Run one opened turn to its ``turn/end``; True if the driver should go on.

        A failure in the turn is reported (``agent/error``) and ends it ``Errored``;
        its own cancellation ends it ``Aborted(first cause)``; one from outside (the
        owner shutting down) is recorded as a disposal, closes the turn, propagates.
        """
        signal, turn, inbox = opened.signal, opened.turn, self._inbox
        self._step = 0
        turn_ends: TurnEndReason | None = None
        failure: Exception | None = None
        stop = False
        outer: BaseException | None = None
        try:
            with signal.scope:
                try:
                    if opened.error is not None:
                        raise opened.error
                    claimed, fresh = opened.claimed, opened.fresh
                    target = InboxTarget.NEXT_TURN
                    while True:
                        if claimed is None:
                            claimed = inbox._claim(target, turn)
                        await _boundary(fresh)()
                        step = self._step + 1
                        decision = await self._pre_step(claimed, turn, step, signal)
                        claimed_ids = set(map(id, claimed))
                        claimed = None
                        ends = _ends_before_step(decision, turn_ends, self._step == 0)
                        if ends is not None:
                            turn_ends, stop = ends
                            break
                        assert isinstance(decision, Enter)
                        step_end = await self._run_step(
                            turn, step, decision, signal, claimed_ids
                        )
                        fresh = step_end is None  # a tool round ends with a yield
                        if not isinstance(turn_ends, MaxTokens):
                            turn_ends = step_end
                        await trio.lowlevel.checkpoint_if_cancelled()
                        if turn_ends is not None and not inbox.next_step:
                            if self._services.bus.has_listeners("agent/turn-stopping"):
                                await self._turn_stopping(turn, signal)
                            if not inbox.next_step:
                                break
                        target = InboxTarget.NEXT_STEP
                    # No success is reported for events the log has not taken.
                    await self._agent._wait_written()
                except Exception as exc:
                    failure = exc
        except BaseException as exc:  # noqa: ASYNC103  # re-raised below, after turn/end is written
            # From outside the turn (owner shutting down) or ^C: a disposal, if first.
            outer = exc
            signal._cancel(DisposedCancel())
        stop = not self._end_turn(turn, signal, failure, turn_ends) or stop
        if outer is not None:
            raise outer
        if stop or failure is not None or signal.cancelled:
            return False  # noqa: ASYNC910
        return inbox.has_pending  # noqa: ASYNC910

    def _end_turn(
        self,
        turn: int,
        signal: CancelSignal,
        failure: Exception | None,
        turn_ends: TurnEndReason | None,
    ) -> bool:
        """Write ``turn/end`` with the turn's reason; False if that append failed."""
        reason: TurnEndReason
        if signal.cancelled:
            assert signal.cause is not None
            reason = Aborted(_plain_cause(signal.cause))
        elif failure is not None:
            self.report_error(turn, self._step, failure)
            reason = Errored(_failure_of(failure))
        else:
            reason = turn_ends if turn_ends is not None else _COMPLETED
        try:
            self._session._append_trusted("turn/end", _turn_end(turn, reason))
        except Exception as exc:
            self.report_error(turn, self._step, exc)
            return False
        return True

    async def _turn_stopping(self, turn: int, signal: CancelSignal) -> None:
        agent = self._agent
        await self._services.bus.serial(
            "agent/turn-stopping", TurnStopping(agent, turn, signal), scope=agent
        )
        await trio.lowlevel.checkpoint_if_cancelled()

    async def _pre_step(  # hot path: with no listener the caller's pre-step yield is the checkpoint
        self, claimed: list[UserMessage], turn: int, step: int, signal: CancelSignal
    ) -> PreStepDecision:
        bus = self._services.bus
        default = Enter(tuple(claimed))
        if (
            self._step == 0
        ):  # the turn's first proposal carries a changed runtime context
            default = self._contexts.propose(default, self._services, self._agent)
        if not bus.has_listeners("agent/pre-step"):
            return default  # noqa: ASYNC910
        agent = self._agent
        decision = await bus.waterfall(
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
        claimed_ids: set[int],
    ) -> TurnEndReason | None:
        """One step, ``step/start`` to ``step/end``: requests (retried), then tool calls.

        However the step ends (a result, a failure, a cancellation), each tool call
        of its assistant message has a ``tool/result`` before ``step/end``
        (:func:`answer_calls`), so the history stays well-formed.

        Returns how the step ends the turn, or ``None`` when the turn goes on.
        """
        session = self._session
        session._append_trusted("step/start", _step_start(turn, step))
        self._step = step
        calls: list[ToolCallBlock] = []
        mark = 0  # the seq from which this step's tool events are appended
        try:
            services = self._services
            agent = self._agent
            rendered = render_prompt(services, agent)
            tools = services.tools.schemas(agent)
            entering: Enter | None = decision  # on the step's first attempt only
            while True:
                config = await self._prepare_request(turn, step, signal)
                request = self._next_request(
                    turn, step, config, entering, claimed_ids, rendered, tools
                )
                entering = None
                await trio.lowlevel.checkpoint_if_cancelled()
                outcome = await self._attempts.run(turn, step, request, signal)
                if isinstance(outcome, LlmFailure):
                    if await self._retry_requested(turn, step, config, outcome, signal):
                        continue
                    raise LlmError(outcome)
                message, finish = outcome
                if finish.kind == "max-tokens":
                    return MaxTokens()
                calls = [b for b in message.content if isinstance(b, ToolCallBlock)]
                if not calls:
                    return _COMPLETED
                mark = session.next_seq
                concluded = await services.tools.execute(
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
            session._append_trusted("step/end", _step_end(turn, step))

    def _next_request(
        self,
        turn: int,
        step: int,
        config: CallConfig,
        entering: Enter | None,
        claimed_ids: set[int],
        rendered: str,
        tools: tuple[JsonValue, ...],
    ) -> ModelRequest:
        """The request of one attempt: project the prompt, enter messages, build it.

        ``entering`` is the step's decision on its first attempt, else ``None``.
        """
        series = self._starts_series(
            entering is not None and entering.starts_request_series, tools
        )
        if self._projection is None:
            self._projection = SystemPromptProjection(self._session)
        self._projection.project(rendered, turn=turn, step=step)
        if entering is not None:
            self._enter_messages(entering, claimed_ids)
        return self._build_request(config, tools, series)

    def _starts_series(self, first: bool, tools: tuple[JsonValue, ...]) -> bool:
        """Whether this request starts a new request series (a fresh header run)."""
        session = self._session
        persisted = session.request_header()
        series = first or (
            self._last_generation >= 0
            and session.replace_generation != self._last_generation
        )
        if persisted is not None and (persisted.tools or ()) != tools:
            series = True
        return series

    def _enter_messages(self, decision: Enter, claimed_ids: set[int]) -> None:
        """Append the step's entered messages (``user/message``) to the session."""
        session = self._session
        for entered in decision.messages:
            if id(entered) in claimed_ids:  # straight from the inbox: validated there
                session._append_trusted("user/message", entered, surface_op="append")
            else:  # a pre-step listener supplied it: outside data
                session.append("user/message", entered, surface_op="append")

    async def _retry_requested(
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

    async def _prepare_request(  # hot path: with no listener there is nothing to wait for
        self, turn: int, step: int, signal: CancelSignal
    ) -> CallConfig:
        agent = self._agent
        seed = request_seed(
            agent.options, self._session.request_header(), self._header_logged
        )
        bus = self._services.bus
        if bus.has_listeners("agent/request"):
            config = await bus.waterfall(
                "agent/request",
                RequestProposal(agent, turn, step, signal),
                seed,
                scope=agent,
            )
            if not isinstance(config, CallConfig):
                raise TypeError(
                    f"agent/request must return a CallConfig, got {config!r}"
                )
            await trio.lowlevel.checkpoint_if_cancelled()
        else:
            config = seed
        if not config.provider or not config.model:
            raise AgentConfigError(
                f'agent "{agent.id}" has no provider/model: set AgentOptions.provider and '
                "AgentOptions.model or supply both via the agent/request waterfall"
            )
        return config  # noqa: ASYNC910

    def _build_request(
        self, config: CallConfig, tools: tuple[JsonValue, ...], series: bool
    ) -> ModelRequest:
        session = self._session
        header = header_event(
            session.request_header(), self._header_logged, config, tools, series
        )
        if header is not None:
            session.append("request/header", header)
            self._header_logged = True
        context = session.request_context()
        if (
            context is None
            or context.provider != config.provider
            or context.model != config.model
        ):
            session.append(
                "request/context",
                RequestContextData(provider=config.provider, model=config.model),
            )
        self._last_generation = session.replace_generation
        return _model_request(
            config.provider,
            config.model,
            session.derive_messages(),
            tools,
            config.max_tokens,
            config.reasoning_effort,
            config.temperature,
            config.stop,
            self._agent.id,
        )
