"""The request side of a step: the pre-step proposal, the messages a step enters, the
header and context markers, and the model request of each attempt.

Synchronous: the turn driver awaits the listeners (``agent/pre-step``,
``agent/request``) itself and hands their results here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ..errors import DshError
from ..llm import ModelRequest
from ..values import (
    Blocked,
    CallConfig,
    Completed,
    Enter,
    EpochHeader,
    JsonValue,
    PreStepDecision,
    Reject,
    RequestContextData,
    TurnEndReason,
    UserMessage,
    builder,
)
from ._context import RuntimeContextProjection
from ._header_log import header_event
from ._prompt import SystemPromptProjection
from ._requests import request_seed

if TYPE_CHECKING:
    from ._agent import Agent
    from ._services import AgentServices

__all__ = ["COMPLETED", "AgentConfigError", "StepRequests", "ends_before_step"]

_model_request = builder(ModelRequest)
COMPLETED: Final = Completed()  # shared: a frozen value with no fields
# The default proposal of a step that claimed nothing (shared: a frozen value).
_ENTER_NOTHING: Final = Enter(())

# The default proposal is built from a fresh tuple, which is what the field's
# converter would give.
_enter = builder(Enter, converted=("messages",))


class AgentConfigError(DshError, ValueError):
    """A request could not be built: no provider/model after ``agent/request``."""


def ends_before_step(
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
        return COMPLETED, True
    return None


class StepRequests:
    """The per-agent request state of a turn driver and what it builds from it.

    Runtime use only. Holds the system-prompt and runtime-context projections,
    whether this driver logged a ``request/header`` yet and the surface's replace
    generation at the last request. Synchronous; never blocks.
    """

    __slots__ = (
        "_agent",
        "_contexts",
        "_header_logged",
        "_last_generation",
        "_projection",
        "_services",
        "_session",
    )

    def __init__(self, agent: Agent, services: AgentServices) -> None:
        self._agent = agent
        self._session = agent.session
        self._services = services
        self._projection: SystemPromptProjection | None = None
        self._contexts = RuntimeContextProjection(agent.session)
        self._header_logged = False
        self._last_generation = -1

    def proposal(self, claimed: list[UserMessage], first: bool) -> Enter:
        """The default pre-step decision: enter ``claimed``; on a turn's ``first``
        step, with the changed runtime-context snapshot appended last.

        Raises:
            TypeError: a context rendered something other than a ``str`` or ``None``.
            Exception: whatever a context's ``render`` raised.
        """
        default = _enter(tuple(claimed), False) if claimed else _ENTER_NOTHING
        if first:
            return self._contexts.propose(default, self._services, self._agent)
        return default

    def seed(self) -> CallConfig:
        """The config the ``agent/request`` waterfall starts from."""
        return request_seed(
            self._agent.options, self._session.request_header(), self._header_logged
        )

    def next_request(
        self,
        turn: int,
        step: int,
        config: CallConfig,
        entering: Enter | None,
        claimed: list[UserMessage],
        rendered: str,
        tools: tuple[JsonValue, ...],
    ) -> ModelRequest:
        """The request of one attempt: project the prompt, enter messages, build it.

        ``entering`` is the step's decision on its first attempt, else ``None``;
        ``claimed`` the batch the step's turn claimed for it (validated by the inbox).

        Raises:
            AgentConfigError: ``config`` names no provider or no model.
        """
        if not config.provider or not config.model:
            raise AgentConfigError(
                f'agent "{self._agent.id}" has no provider/model: set '
                "AgentOptions.provider and AgentOptions.model or supply both via the "
                "agent/request waterfall"
            )
        session = self._session
        # Only surface events are appended before the header below: no header changes.
        persisted = session.request_header()
        series = (entering is not None and entering.starts_request_series) or (
            self._last_generation >= 0
            and session.replace_generation != self._last_generation
        )
        if persisted is not None and (persisted.tools or ()) != tools:
            series = True
        projection = self._projection
        if projection is None:
            projection = self._projection = SystemPromptProjection(session)
        projection.project(rendered, turn=turn, step=step)
        if entering is not None:
            self._enter_messages(entering, claimed)
        return self._build_request(persisted, config, tools, series)

    def _enter_messages(self, decision: Enter, claimed: list[UserMessage]) -> None:
        """Append the step's entered messages (``user/message``) to the session."""
        session = self._session
        ids: set[int] | None = None  # the claimed messages' ids, made when needed
        for index, entered in enumerate(decision.messages):
            if index < len(claimed) and claimed[index] is entered:
                trusted = True  # the default proposal's order
            else:
                if ids is None:
                    ids = set(map(id, claimed))
                trusted = id(entered) in ids
            if trusted:  # straight from the inbox: validated there
                session.append_trusted("user/message", entered, surface_op="append")
            else:  # a pre-step listener supplied it: outside data
                session.append("user/message", entered, surface_op="append")

    def _build_request(
        self,
        persisted: EpochHeader | None,
        config: CallConfig,
        tools: tuple[JsonValue, ...],
        series: bool,
    ) -> ModelRequest:
        session = self._session
        header = header_event(persisted, self._header_logged, config, tools, series)
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
            config.thinking,
        )
