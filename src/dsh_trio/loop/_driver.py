"""The turn/step driver: what the driver task runs between ``turn/start`` and ``turn/end``."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
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
    EpochHeader,
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
    RequestHeaderData,
    Retry,
    StepEnd,
    StepStart,
    TextBlock,
    ToolCallBlock,
    ToolCallData,
    ToolErrorInfo,
    ToolResultBlock,
    ToolResultData,
    ToolSource,
    TurnEnd,
    TurnEndReason,
    UserCancel,
    UserMessage,
    new_message_id,
)
from ._attempt import Attempts
from ._payloads import (
    AgentErrorEvent,
    PreStep,
    RequestFailed,
    RequestProposal,
    TurnStopping,
)
from ._prompt import SystemPromptProjection

if TYPE_CHECKING:
    from ._agent import Agent
    from ._services import AgentServices
    from ._signal import CancelSignal

__all__ = ["AgentConfigError", "OpenedTurn", "TurnDriver"]

logger = logging.getLogger("dsh_trio")


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


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _unanswered_why(exc: BaseException | None, signal: CancelSignal) -> str:
    """Why a call got no result from the executor, for the text of its stand-in."""
    if signal.cancelled or isinstance(exc, trio.Cancelled):
        return "the turn was cancelled"
    if exc is None:
        return "the tool executor returned without recording its result"
    detail = str(exc)
    name = type(exc).__name__
    if not detail:
        return f"the step failed ({name})"
    return f"the step failed ({name}: {_clip(detail, 200)})"


def _stand_in_result(
    turn: int, step: int, block: ToolCallBlock, started: bool, why: str
) -> ToolResultData:
    """The error result of a call the step ends without answering."""
    name = _clip(block.name, 120)
    if started:
        error = ToolErrorInfo("ToolOutcomeUnknownError", "TOOL_OUTCOME_UNKNOWN")
        text = (
            f'The call to tool "{name}" got no result: {why} after the call '
            "started. Its outcome is unknown; it may have run partly or completely. "
            "Check the current state before retrying; a retry is not safe if the "
            "tool has side effects."
        )
    else:
        error = ToolErrorInfo("ToolNotStartedError", "TOOL_NOT_STARTED")
        text = (
            f'The call to tool "{name}" was not run: {why} before it started, so '
            "it had no effect. It is safe to retry."
        )
    return ToolResultData(
        turn=turn,
        step=step,
        message=UserMessage(
            id=new_message_id(),
            content=(ToolResultBlock(block.id, (TextBlock(text),), is_error=True),),
            source=ToolSource(block.id),
        ),
        error=error,
    )


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

        Checkpoints at each step boundary. A failure inside the turn is reported
        (``agent/error``) and ends it ``Errored``; its own cancellation ends it
        ``Aborted(first cause)``; a cancellation from outside (the owner shutting
        down) is recorded as a disposal, closes the turn, and propagates.
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
                    claimed, target = opened.claimed, InboxTarget.NEXT_TURN
                    while True:
                        if claimed is None:
                            claimed = inbox._claim(target, turn)
                        await trio.lowlevel.checkpoint()
                        step = self._step + 1
                        decision = await self._pre_step(claimed, turn, step, signal)
                        claimed_ids = set(map(id, claimed))
                        claimed = None
                        if isinstance(decision, Reject):
                            turn_ends, stop = Blocked(), True
                            break
                        if turn_ends is not None and not decision.messages:
                            break
                        if self._step == 0 and not decision.messages:
                            turn_ends, stop = Completed(), True
                            break
                        step_end = await self._run_step(
                            turn, step, decision, signal, claimed_ids
                        )
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
            reason = turn_ends if turn_ends is not None else Completed()
        try:
            self._session._append_trusted("turn/end", TurnEnd(turn, reason))
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
        (:meth:`_answer_calls`), so the history stays well-formed.

        Returns how the step ends the turn, or ``None`` when the turn goes on.
        """
        session = self._session
        session._append_trusted("step/start", StepStart(turn, step))
        self._step = step
        calls: list[ToolCallBlock] = []
        mark = 0  # the seq from which this step's tool events are appended
        try:
            services = self._services
            agent = self._agent
            rendered = services.prompt.render(agent)
            tools = services.tools.schemas(agent)
            attempt = 0
            while True:
                attempt += 1
                config = await self._prepare_request(turn, step, signal)
                first = attempt == 1
                series = self._starts_series(
                    first and decision.starts_request_series, tools
                )
                if self._projection is None:
                    self._projection = SystemPromptProjection(session)
                self._projection.project(rendered, turn=turn, step=step)
                if first:
                    self._enter_messages(decision, claimed_ids)
                request = self._build_request(config, tools, series)
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
                    return Completed()
                mark = session.next_seq
                concluded = await services.tools.execute(
                    agent, turn=turn, step=step, calls=calls, signal=signal
                )
                self._answer_calls(turn, step, calls, mark, None, signal)
                return Completed() if concluded else None
        except BaseException as exc:
            if calls:
                self._answer_calls(turn, step, calls, mark, exc, signal)
            raise
        finally:
            session._append_trusted("step/end", StepEnd(turn, step))

    def _answer_calls(
        self,
        turn: int,
        step: int,
        calls: Sequence[ToolCallBlock],
        mark: int,
        exc: BaseException | None,
        signal: CancelSignal,
    ) -> None:
        """Give every call of the step's message that has no ``tool/result`` one.

        Synchronous; O(events appended since ``mark``). The tool executor answers
        every call, even when cancelled or failing, so this normally appends nothing.
        What it does append stands in for a result the executor could not record
        (``exc`` ended it, or it returned without one): ``TOOL_OUTCOME_UNKNOWN`` if the
        call's ``tool/call`` was written, else ``TOOL_NOT_STARTED``. Then the next
        request's history answers every call. Never raises: if the session refuses
        a result, that is logged and ``exc`` (if any) goes on.
        """
        session = self._session
        answered: Counter[str] = Counter()
        started: dict[str, list[int]] = {}
        for event in session.events[mark:]:
            data = event.data
            if data.__class__ is ToolCallData:
                started.setdefault(data.call_id, []).append(event.seq)
            elif data.__class__ is ToolResultData:
                source = data.message.source
                if isinstance(source, ToolSource):
                    answered[source.call_id] += 1
        why: str | None = None
        for block in calls:
            seqs = started.get(block.id)
            call_seq = seqs.pop(0) if seqs else None
            if answered[block.id] > 0:
                answered[block.id] -= 1
                continue
            if why is None:
                why = _unanswered_why(exc, signal)
            try:
                session.append(
                    "tool/result",
                    _stand_in_result(turn, step, block, call_seq is not None, why),
                    surface_op="append",
                    source_event_seqs=None if call_seq is None else (call_seq,),
                )
            except Exception:
                logger.warning(
                    "agent %s: turn %d step %d: could not record a result for tool "
                    "call %r",
                    self._agent.id,
                    turn,
                    step,
                    _clip(block.id, 120),
                    exc_info=True,
                )
                return

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
        options = agent.options
        persisted = self._session.request_header()
        if not self._header_logged or persisted is None:
            effort = options.reasoning_effort
            if (
                effort is None
                and persisted is not None
                and persisted.config.provider == options.provider
                and persisted.config.model == options.model
                and not (
                    persisted.adapter_defaults
                    and persisted.adapter_defaults.reasoning_effort
                )
            ):
                effort = persisted.config.reasoning_effort
            seed = CallConfig(
                provider=options.provider or "",
                model=options.model or "",
                reasoning_effort=effort,
                max_tokens=options.max_tokens,
            )
        else:
            seed = persisted.config
            defaults = persisted.adapter_defaults
            if defaults is not None and (
                defaults.reasoning_effort or defaults.max_tokens
            ):
                seed = attrs.evolve(
                    seed,
                    reasoning_effort=None
                    if defaults.reasoning_effort
                    else seed.reasoning_effort,
                    max_tokens=None if defaults.max_tokens else seed.max_tokens,
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
        persisted = session.request_header()
        header = EpochHeader(config=config, tools=tools or None)
        if not self._header_logged:
            session.append(
                "request/header",
                RequestHeaderData(
                    header=header,
                    reason="resume" if persisted is not None else "initial",
                ),
            )
            self._header_logged = True
        elif persisted is None or header != persisted:
            session.append(
                "request/header",
                RequestHeaderData(
                    header=header,
                    reason="change",
                    starts_series=True if series else None,
                ),
            )
        elif series:
            session.append(
                "request/header", RequestHeaderData(header=header, reason="series")
            )
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
        return ModelRequest(
            provider=config.provider,
            model=config.model,
            messages=session.derive_messages(),
            tools=tools,
            max_tokens=config.max_tokens,
            reasoning_effort=config.reasoning_effort,
            temperature=config.temperature,
            stop=config.stop,
            session_id=self._agent.id,
        )
