"""The agent driver: inbox, turns, steps, cancellation, maintenance."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

import attrs
import trio

from ..errors import (
    AgentBusyError,
    AgentCancelled,
    AgentDisposedError,
    DshError,
    LlmError,
)
from ..events import (
    Abandoned,
    Committed,
    StreamChunkFrame,
    StreamEndFrame,
    StreamStartFrame,
)
from ..llm import BlockAssembler, ModelRequest, error_chain, stream_model
from ..session import StreamAccumulator
from ..values import (
    Aborted,
    AgentOptions,
    AgentStatus,
    AssistantAttemptData,
    AssistantMessage,
    AssistantMessageData,
    Blocked,
    CallConfig,
    CancelCause,
    Completed,
    DisposedCancel,
    Enter,
    EpochHeader,
    Errored,
    FinishReason,
    HookCancel,
    InboxTarget,
    JsonValue,
    LegacyCancel,
    LlmFailure,
    MaxTokens,
    ModelSource,
    ParentCancel,
    PreStepDecision,
    Reject,
    RequestContextData,
    RequestHeaderData,
    Retry,
    SessionEvent,
    SessionId,
    StepEnd,
    StepStart,
    ToolCallBlock,
    TurnEnd,
    TurnEndReason,
    TurnStart,
    UserCancel,
    UserMessage,
    new_message_id,
    now_ms,
)
from ._inbox import Inbox, coerce_target
from ._initiator import _initiator
from ._payloads import (
    AgentErrorEvent,
    AgentStatusChanged,
    AssistantStream,
    InboxClaimed,
    InboxDiscarded,
    InboxInserted,
    PreStep,
    RequestFailed,
    RequestProposal,
    SessionEventAppended,
    TurnStopping,
)
from ._prompt import SystemPromptProjection
from ._signal import CancelSignal

if TYPE_CHECKING:
    from ..session import Session
    from ._services import AgentServices

__all__ = ["Agent", "AgentConfigError", "AgentScope"]

T = TypeVar("T")

logger = logging.getLogger("dsh_trio")

_IDLE: Final = 0
_MAINTENANCE: Final = 1
_RUNNING: Final = 2


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


def _failure_of(exc: BaseException) -> LlmFailure:
    if isinstance(exc, LlmError):
        return exc.failure
    return LlmFailure(message=error_chain(exc), code="UNKNOWN")


class AgentScope:
    """Agent-local registrations, unwound when the agent is disposed.

    Listeners registered here are scoped to the agent: they hear events about
    this agent and about the agents it owns. Registering after disposal raises
    :class:`AgentDisposedError`.

    Example::

        agent.scope.on("agent/status", lambda e: print(e.status))
    """

    __slots__ = ("_agent", "_cleanups", "_closed")

    def __init__(self, agent: Agent) -> None:
        self._agent = agent
        self._cleanups: list[Callable[[], object]] = []
        self._closed = False

    @property
    def agent(self) -> Agent:
        """The agent this scope belongs to."""
        return self._agent

    def _check(self) -> None:
        if self._closed:
            raise AgentDisposedError(
                f'agent "{self._agent.id}" is disposed: its scope accepts no registration'
            )

    def on(
        self, name: str, listener: Callable[..., Any], *, prepend: bool = False
    ) -> Callable[[], None]:
        """Register an agent-scoped listener; returns its disposer (also run at dispose)."""
        self._check()
        dispose = self._agent._services.bus.on(
            name, listener, scope=self._agent, prepend=prepend
        )
        self._cleanups.append(dispose)
        return dispose

    def add_section(
        self, name: str, text: str | Callable[[object], str]
    ) -> Callable[[], None]:
        """Add a system-prompt section that applies to this agent only."""
        self._check()
        dispose = self._agent._services.prompt.add_section(
            name, text, scope=self._agent
        )
        self._cleanups.append(dispose)
        return dispose

    def add_cleanup(self, fn: Callable[[], object]) -> None:
        """Run ``fn()`` when the agent is disposed (last added runs first)."""
        self._check()
        self._cleanups.append(fn)

    def _unwind(self) -> list[Exception]:
        self._closed = True
        errors: list[Exception] = []
        while self._cleanups:
            fn = self._cleanups.pop()
            try:
                fn()
            except Exception as exc:  # collected; dispose reports them
                errors.append(exc)
        return errors


@attrs.define(eq=False, slots=True)
class _OpenedTurn:
    turn: int
    signal: CancelSignal
    claimed: list[UserMessage] | None
    error: Exception | None = None


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
        "_activity_done",
        "_attempts",
        "_disposed",
        "_draining",
        "_header_logged",
        "_kind",
        "_last_generation",
        "_projection",
        "_revision",
        "_services",
        "_signal",
        "_step",
        "_turn",
        "_unsubscribe",
        "_wake",
        "id",
        "inbox",
        "options",
        "scope",
        "session",
    )

    def __init__(
        self, *, session: Session, options: AgentOptions, services: AgentServices
    ) -> None:
        self.id: SessionId = session.id
        self.options = options
        self.session = session
        self._services = services
        self.scope = AgentScope(self)
        self.inbox = Inbox(
            session,
            notify=self,
            check_alive=self._check_alive,
        )
        self._kind: int = _IDLE
        self._signal: CancelSignal | None = None
        self._turn = session.last_turn
        self._step = 0
        self._wake = False
        self._activity_done: trio.Event | None = None
        self._projection: SystemPromptProjection | None = None
        self._header_logged = False
        self._last_generation = -1
        self._attempts = 0
        self._revision = 0
        self._disposed = False
        self._draining = False
        self._unsubscribe = session.subscribe(self._on_session_event)

    def __repr__(self) -> str:
        return f"<Agent {self.id!r} {self.status.value}>"

    # ------------------------------------------------------------------ reads

    @property
    def status(self) -> AgentStatus:
        """``RUNNING`` while a driver runs turns; ``IDLE`` otherwise (maintenance included)."""
        return AgentStatus.RUNNING if self._kind == _RUNNING else AgentStatus.IDLE

    @property
    def disposed(self) -> bool:
        """Whether :meth:`AgentHandle.dispose` has completed for this agent."""
        return self._disposed

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
            AgentDisposedError: the agent was disposed.
            DuplicateMessageError: a message with this id is already pending.
            InvalidSpliceError: unknown target, or the message is not a valid UserMessage.
        """
        self._check_alive()
        t = coerce_target(target)
        after_abort = (
            wakeup
            and self._kind != _IDLE
            and self._signal is not None
            and self._signal.cancelled
        )
        self.inbox._insert(InboxTarget.NEXT_TURN if after_abort else t, message)
        if wakeup:
            self._wake_driver(after_abort)

    def followup(self, message: UserMessage) -> None:
        """Queue ``message`` as the prompt of its own turn (next-turn) and wake the driver."""
        self.send(message, InboxTarget.NEXT_TURN, True)

    def steer(self, message: UserMessage) -> None:
        """Queue ``message`` for the nearest step boundary (next-step) and wake the driver."""
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
        if not keep_inbox and not self._disposed:
            self.inbox._clear()
            if self._kind != _IDLE:
                self._wake = False
        if self._kind != _IDLE and self._signal is not None:
            self._signal._cancel(cause)

    async def when_idle(self) -> None:
        """Return once no driver or maintenance task remains.

        Follows replacement drivers started before the observed one retired. Never
        raises a turn's failure; cancelling the caller only cancels the wait.
        """
        while True:
            done = self._activity_done
            if done is None:
                await trio.lowlevel.checkpoint()
                return
            await done.wait()
            if done is self._activity_done:
                return

    async def run_maintenance(self, task: Callable[[CancelSignal], Awaitable[T]]) -> T:
        """Run ``task(signal)`` as a maintenance activity from the idle phase.

        The phase is claimed before the first checkpoint; status stays ``idle``.
        Waking input sent meanwhile is queued and starts its turn when the task
        ends. If :meth:`cancel` interrupts the task, raise :class:`AgentCancelled`;
        otherwise return or raise exactly what ``task`` did.

        Raises:
            AgentBusyError: a turn or another maintenance task is active.
            AgentDisposedError: the agent was disposed.
        """
        self._check_alive()
        if self._kind != _IDLE:
            raise AgentBusyError(f'agent "{self.id}" already has active work')
        signal = CancelSignal()
        done = trio.Event()
        self._activity_done = done
        self._kind = _MAINTENANCE
        self._signal = signal
        self._wake = False
        try:
            with signal.scope:
                result = await task(signal)
        finally:
            wake = self._wake
            self._kind = _IDLE
            self._signal = None
            self._wake = False
            if (
                wake
                and self.inbox.has_pending
                and not isinstance(signal.cause, DisposedCancel)
            ):
                self._wake_driver()
            done.set()
            if self._activity_done is done:
                self._activity_done = None
        if signal.scope.cancelled_caught:
            assert signal.cause is not None
            raise AgentCancelled(signal.cause)
        return result

    # ------------------------------------------------------------------ notifications

    def _check_alive(self) -> None:
        if self._disposed:
            raise AgentDisposedError(f'agent "{self.id}" is disposed')

    def _inbox_inserted(self, message: UserMessage) -> None:
        if self._services.bus.has_listeners("agent/inbox/inserted"):
            self._services.bus.emit(
                "agent/inbox/inserted", InboxInserted(self, message), scope=self
            )

    def _inbox_discarded(self, message: UserMessage) -> None:
        if self._services.bus.has_listeners("agent/inbox/discarded"):
            self._services.bus.emit(
                "agent/inbox/discarded", InboxDiscarded(self, message), scope=self
            )

    def _inbox_claimed(self, message: UserMessage, turn: int) -> None:
        if self._services.bus.has_listeners("agent/inbox/claimed"):
            self._services.bus.emit(
                "agent/inbox/claimed", InboxClaimed(self, message, turn), scope=self
            )

    def _on_session_event(self, event: SessionEvent) -> None:
        if self._services.bus.has_listeners("session/event"):
            self._services.bus.emit(
                "session/event", SessionEventAppended(self.session, event), scope=self
            )

    def _emit_status(self, status: AgentStatus) -> None:
        if self._services.bus.has_listeners("agent/status"):
            self._services.bus.emit(
                "agent/status", AgentStatusChanged(self, status), scope=self
            )

    def _emit_error(self, exc: Exception) -> None:
        logger.debug(
            "agent %s: turn %d step %d failed: %r", self.id, self._turn, self._step, exc
        )
        if self._services.bus.has_listeners("agent/error"):
            self._services.bus.emit(
                "agent/error",
                AgentErrorEvent(self, self._turn, self._step, exc),
                scope=self,
            )

    # ------------------------------------------------------------------ driver

    def _wake_driver(self, after_abort: bool = False) -> None:
        if self._draining:
            return  # a disposing agent parks input; it never starts work again
        if self._kind != _IDLE:
            signal = self._signal
            disposed = signal is not None and isinstance(signal.cause, DisposedCancel)
            if not disposed and (self._kind == _MAINTENANCE or after_abort):
                self._wake = True
            return
        done = trio.Event()
        self._activity_done = done
        self._kind = _RUNNING
        self._signal = CancelSignal()
        self._step = 0
        self._wake = False
        self._emit_status(AgentStatus.RUNNING)
        opened = self._open_turn()
        self._services.spawn(self._drive, done, opened)

    def _open_turn(self) -> _OpenedTurn | None:
        """The synchronous head of a turn: ``turn/start`` and the turn-boundary claim."""
        if self._kind != _RUNNING:
            return None  # a status listener already wound the driver down
        signal = self._signal
        assert signal is not None
        if signal.cancelled:
            return None
        turn = self._turn + 1
        try:
            self.session._append_trusted("turn/start", TurnStart(turn))
        except Exception as exc:
            self._emit_error(exc)
            return None
        self._turn = turn
        self._step = 0
        try:
            claimed = self.inbox._claim(InboxTarget.NEXT_TURN, turn)
        except Exception as exc:
            return _OpenedTurn(turn, signal, [], exc)
        return _OpenedTurn(turn, signal, claimed)

    async def _drive(  # noqa: ASYNC910
        self, done: trio.Event, opened: _OpenedTurn | None
    ) -> None:  # a task with no turn to run ends at once
        _initiator.set(self)
        try:
            while opened is not None:
                if not await self._run_turn(opened):
                    break
                self._signal = CancelSignal()
                self._wake = False
                self._step = 0
                opened = self._open_turn()
        finally:
            wake = self._wake
            if self._kind == _RUNNING:
                self._kind = _IDLE
                self._signal = None
                self._step = 0
                self._wake = False
                self._emit_status(AgentStatus.IDLE)
            if wake and self.inbox.has_pending:
                self._wake_driver()
            done.set()
            if self._activity_done is done:
                self._activity_done = None

    async def _run_turn(
        self, opened: _OpenedTurn
    ) -> (
        bool
    ):  # checkpoints at each pre-step yield; a failed claim ends the turn at once
        """Run one opened turn to its ``turn/end``; True if the driver should go on."""
        signal, turn = opened.signal, opened.turn
        session = self.session
        turn_ends: TurnEndReason | None = None
        failure: Exception | None = None
        stop = False
        outer: BaseException | None = None
        try:
            with signal.scope:
                try:
                    if opened.error is not None:
                        raise opened.error
                    claimed = opened.claimed
                    target = InboxTarget.NEXT_TURN
                    while True:
                        if claimed is None:
                            claimed = self.inbox._claim(target, turn)
                        await trio.lowlevel.checkpoint()
                        step = self._step + 1
                        decision = await self._pre_step(claimed, turn, step, signal)
                        claimed_ids = {id(x) for x in claimed}
                        claimed = None
                        if isinstance(decision, Reject):
                            turn_ends, stop = Blocked(), True
                            break
                        if turn_ends is not None and not decision.messages:
                            break
                        if self._step == 0 and not decision.messages:
                            turn_ends, stop = Completed(), True
                            break
                        session._append_trusted("step/start", StepStart(turn, step))
                        self._step = step
                        try:
                            step_end = await self._run_step(
                                turn, step, decision, signal, claimed_ids
                            )
                            if not isinstance(turn_ends, MaxTokens):
                                turn_ends = step_end
                        finally:
                            session._append_trusted("step/end", StepEnd(turn, step))
                        await trio.lowlevel.checkpoint_if_cancelled()
                        if turn_ends is not None and not self.inbox.next_step:
                            bus = self._services.bus
                            if bus.has_listeners("agent/turn-stopping"):
                                await bus.serial(
                                    "agent/turn-stopping",
                                    TurnStopping(self, turn, signal),
                                    scope=self,
                                )
                                await trio.lowlevel.checkpoint_if_cancelled()
                            if not self.inbox.next_step:
                                break
                        target = InboxTarget.NEXT_STEP
                except Exception as exc:
                    failure = exc
        except BaseException as exc:  # noqa: ASYNC103  # re-raised below, after turn/end is written
            # Cancelled from outside the turn (the owner is shutting down), or a
            # KeyboardInterrupt: record it as a disposal unless a cause came first.
            outer = exc
            signal._cancel(DisposedCancel())
        reason: TurnEndReason
        if signal.cancelled:
            assert signal.cause is not None
            reason = Aborted(_plain_cause(signal.cause))
        elif failure is not None:
            self._emit_error(failure)
            reason = Errored(_failure_of(failure))
        else:
            reason = turn_ends if turn_ends is not None else Completed()
        try:
            session._append_trusted("turn/end", TurnEnd(turn, reason))
        except Exception as exc:
            self._emit_error(exc)
            stop = True
        if outer is not None:
            raise outer
        if stop or failure is not None or signal.cancelled:
            return False  # noqa: ASYNC910
        return self.inbox.has_pending  # noqa: ASYNC910

    async def _pre_step(  # hot path: with no listener the caller's pre-step yield is the checkpoint
        self, claimed: list[UserMessage], turn: int, step: int, signal: CancelSignal
    ) -> PreStepDecision:
        bus = self._services.bus
        default = Enter(tuple(claimed))
        if not bus.has_listeners("agent/pre-step"):
            return default  # noqa: ASYNC910
        decision = await bus.waterfall(
            "agent/pre-step",
            PreStep(self, tuple(claimed), turn, step, signal),
            default,
            scope=self,
        )
        if not isinstance(decision, (Reject, Enter)):
            raise TypeError(
                f"agent/pre-step must return Reject() or Enter(messages), got {decision!r}"
            )
        await trio.lowlevel.checkpoint_if_cancelled()
        return decision

    async def _run_step(
        self,
        turn: int,
        step: int,
        decision: Enter,
        signal: CancelSignal,
        claimed_ids: set[int],
    ) -> TurnEndReason | None:
        services = self._services
        session = self.session
        rendered = services.prompt.render(self)
        tools = services.tools.schemas(self)
        attempt = 0
        while True:
            attempt += 1
            config = await self._prepare_request(turn, step, signal)
            persisted = session.request_header()
            series = (attempt == 1 and decision.starts_request_series) or (
                self._last_generation >= 0
                and session.replace_generation != self._last_generation
            )
            if persisted is not None and (persisted.tools or ()) != tools:
                series = True
            if self._projection is None:
                self._projection = SystemPromptProjection(session)
            self._projection.project(rendered, turn=turn, step=step)
            if attempt == 1:
                for entered in decision.messages:
                    if (
                        id(entered) in claimed_ids
                    ):  # straight from the inbox: validated there
                        session._append_trusted(
                            "user/message", entered, surface_op="append"
                        )
                    else:  # a pre-step listener supplied it: outside data
                        session.append("user/message", entered, surface_op="append")
            request = self._build_request(config, tools, series)
            await trio.lowlevel.checkpoint_if_cancelled()
            outcome = await self._attempt(turn, step, request, signal)
            if isinstance(outcome, LlmFailure):
                no_action: Retry | None = None
                action = no_action
                bus = services.bus
                if bus.has_listeners("agent/request-error"):
                    action = await bus.waterfall(
                        "agent/request-error",
                        RequestFailed(
                            self,
                            turn,
                            step,
                            config.provider,
                            outcome,
                            services.models.retry_policy(config.provider),
                            signal,
                        ),
                        no_action,
                        scope=self,
                    )
                await trio.lowlevel.checkpoint_if_cancelled()
                if isinstance(action, Retry):
                    continue
                raise LlmError(outcome)
            message, finish = outcome
            if finish.kind == "max-tokens":
                return MaxTokens()
            calls = [b for b in message.content if isinstance(b, ToolCallBlock)]
            if not calls:
                return Completed()
            concluded = await services.tools.execute(
                self, turn=turn, step=step, calls=calls, signal=signal
            )
            return Completed() if concluded else None

    async def _prepare_request(  # hot path: with no listener there is nothing to wait for
        self, turn: int, step: int, signal: CancelSignal
    ) -> CallConfig:
        options = self.options
        persisted = self.session.request_header()
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
                RequestProposal(self, turn, step, signal),
                seed,
                scope=self,
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
                f'agent "{self.id}" has no provider/model: set AgentOptions.provider and '
                "AgentOptions.model or supply both via the agent/request waterfall"
            )
        return config  # noqa: ASYNC910

    def _build_request(
        self, config: CallConfig, tools: tuple[JsonValue, ...], series: bool
    ) -> ModelRequest:
        session = self.session
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
            session_id=self.id,
        )

    def _frame(
        self, frame: StreamStartFrame | StreamChunkFrame | StreamEndFrame
    ) -> None:
        self._services.bus.emit(
            "agent/assistant-stream", AssistantStream(self, frame), scope=self
        )

    async def _attempt(
        self, turn: int, step: int, request: ModelRequest, signal: CancelSignal
    ) -> tuple[AssistantMessage, FinishReason] | LlmFailure:
        """Stream one model attempt and settle it durably (exactly one event)."""
        self._attempts += 1
        attempt_id = f"{self.id}:{self._attempts}"
        session = self.session
        frames = self._services.bus.has_listeners("agent/assistant-stream")
        adapter = self._services.models.get(request.provider)
        records = StreamAccumulator()
        assembler = BlockAssembler()
        index = 0
        if frames:
            self._revision += 1
            self._frame(StreamStartFrame(attempt_id, self._revision, turn, step))
        settled: SessionEvent | None = None
        try:
            stream = stream_model(adapter, request)
            try:
                async for chunk in stream:
                    if signal.cancelled:
                        break  # a chunk that arrives after the abort is not kept
                    now = now_ms()
                    records.push(chunk, now)
                    assembler.push(chunk)
                    if frames:
                        self._revision += 1
                        self._frame(
                            StreamChunkFrame(
                                attempt_id, self._revision, index, now, chunk
                            )
                        )
                    index += 1
            finally:
                await stream.aclose()
            await trio.lowlevel.checkpoint_if_cancelled()
        except BaseException as exc:
            interrupted = signal.cancelled or isinstance(exc, trio.Cancelled)
            content = assembler.interrupted_blocks() if interrupted else ()
            try:
                if content:
                    settled = session._append_trusted(
                        "assistant/message",
                        AssistantMessageData(
                            turn=turn,
                            step=step,
                            message=AssistantMessage(
                                id=new_message_id(),
                                content=content,
                                source=ModelSource(request.provider, request.model),
                            ),
                            stream=records.records(),
                            usage=assembler.usage,
                            interrupted=True,
                        ),
                        surface_op="append",
                    )
                else:
                    settled = session._append_trusted(
                        "assistant/attempt",
                        AssistantAttemptData(
                            turn=turn, step=step, stream=records.records()
                        ),
                    )
            finally:
                if frames:
                    self._end_frame(attempt_id, index, settled)
            raise
        finish = assembler.finish
        try:
            if finish.kind in ("error", "aborted"):
                settled = session._append_trusted(
                    "assistant/attempt",
                    AssistantAttemptData(
                        turn=turn, step=step, stream=records.records()
                    ),
                )
                return finish.failure or LlmFailure(
                    message="model call failed", code="UNKNOWN"
                )
            message = AssistantMessage(
                id=new_message_id(),
                content=assembler.blocks(),
                source=ModelSource(
                    request.provider, request.model, assembler.replay_state
                ),
            )
            settled = session._append_trusted(
                "assistant/message",
                AssistantMessageData(
                    turn=turn,
                    step=step,
                    message=message,
                    stream=records.records(),
                    usage=assembler.usage,
                ),
                surface_op="append",
            )
            return message, finish
        finally:
            if frames:
                self._end_frame(attempt_id, index, settled)

    def _end_frame(
        self, attempt_id: str, index: int, settled: SessionEvent | None
    ) -> None:
        self._revision += 1
        outcome = (
            Committed(settled.type, settled.seq) if settled is not None else Abandoned()
        )
        self._frame(StreamEndFrame(attempt_id, self._revision, index, outcome))

    # ------------------------------------------------------------------ disposal support

    def _begin_drain(self) -> None:
        self._draining = True

    def _finish_dispose(self) -> None:
        self._disposed = True
        self._unsubscribe()
