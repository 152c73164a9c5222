"""Cancel causes, model failures, turn-end reasons, hook decisions and options."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar, TypeAlias

import attrs

from ._content import UserMessage

# --------------------------------------------------------------------------- causes


@attrs.frozen
class CancelCause:
    """Why an activity was cancelled. Match on the subclasses."""

    kind: ClassVar[str] = "unknown"


@attrs.frozen
class UserCancel(CancelCause):
    """The user cancelled (Ctrl-C, a stop button)."""

    kind: ClassVar[str] = "user"


@attrs.frozen
class ParentCancel(CancelCause):
    """The owning agent cancelled."""

    kind: ClassVar[str] = "parent"


@attrs.frozen
class HookCancel(CancelCause):
    """A hook cancelled, giving a reason."""

    kind: ClassVar[str] = "hook"
    reason: str


@attrs.frozen
class DisposedCancel(CancelCause):
    """The agent is being disposed."""

    kind: ClassVar[str] = "disposed"


@attrs.frozen
class LegacyCancel(CancelCause):
    """A cause read from an old log that recorded none (load only)."""

    kind: ClassVar[str] = "legacy"


CANCEL_CAUSES: dict[str, type[CancelCause]] = {
    c.kind: c
    for c in (UserCancel, ParentCancel, HookCancel, DisposedCancel, LegacyCancel)
}

# --------------------------------------------------------------------------- failures


@attrs.frozen
class LlmFailure:
    """The facts of a failed model call.

    ``code`` is one of the reference's codes (``RATE_LIMIT``, ``SERVER``, ``TIMEOUT``,
    ``TRANSPORT``, ``AUTH``, ``INVALID_REQUEST``, ``CONTEXT_WINDOW_EXCEEDED``,
    ``EMPTY_RESPONSE``, ``ABORTED``, ``UNKNOWN``, ...), or one of dsh_trio's own:
    ``PERSISTENCE`` (the session log could not be written) and ``OUTPUT_INVALID``
    (a turn asked for typed output got no valid final result within its tries).
    """

    message: str
    code: str
    status: int | None = None
    retry_after_ms: int | float | None = None
    request_id: str | None = None


# --------------------------------------------------------------------------- reasons


@attrs.frozen
class Completed:
    """The turn ended naturally."""

    TAG: ClassVar[str] = "completed"


@attrs.frozen
class MaxTokens:
    """A step of the turn hit the output-token limit (sticky for the turn)."""

    TAG: ClassVar[str] = "max-tokens"


@attrs.frozen
class Blocked:
    """``agent/pre-step`` rejected the batch."""

    TAG: ClassVar[str] = "blocked"


@attrs.frozen
class Aborted:
    """The turn was cancelled; ``reason`` is the first cause."""

    TAG: ClassVar[str] = "aborted"
    reason: CancelCause


@attrs.frozen
class Errored:
    """The turn failed."""

    TAG: ClassVar[str] = "error"
    error: LlmFailure


@attrs.frozen
class Interrupted:
    """The process stopped mid-turn; written only by crash repair."""

    TAG: ClassVar[str] = "interrupted"


TurnEndReason: TypeAlias = (
    Completed | MaxTokens | Blocked | Aborted | Errored | Interrupted
)

# --------------------------------------------------------------------------- decisions


@attrs.frozen
class Reject:
    """``agent/pre-step``: end the turn ``Blocked``; the batch is dropped."""


def _message_tuple(messages: Iterable[UserMessage]) -> tuple[UserMessage, ...]:
    return tuple(messages)


@attrs.frozen
class Enter:
    """``agent/pre-step``: run a step with ``messages``.

    ``starts_request_series`` asks the first request of the step to start a new
    request series (system prompt normalised to node 0, header logged as a series).
    """

    messages: tuple[UserMessage, ...] = attrs.field(converter=_message_tuple)
    starts_request_series: bool = False


PreStepDecision: TypeAlias = Reject | Enter


@attrs.frozen
class Retry:
    """``agent/request-error``: run the failed attempt again inside the same step."""


RequestErrorAction: TypeAlias = Retry | None

# --------------------------------------------------------------------------- options


def _check_max_tokens(_inst: object, _attr: object, value: int | None) -> None:
    raw: object = value  # callers may pass anything at runtime
    if raw is None:
        return
    if isinstance(raw, bool) or not isinstance(raw, int) or raw <= 0:
        raise ValueError(
            f"AgentOptions.max_tokens must be a positive int, got {value!r}"
        )


def _check_optional_str(
    _inst: object, attr: attrs.Attribute[str | None], value: str | None
) -> None:
    raw: object = value  # callers may pass anything at runtime
    if raw is not None and not isinstance(raw, str):
        raise TypeError(
            f"AgentOptions.{attr.name} must be a str or None, got "
            f"{type(raw).__name__} {raw!r}"
        )


def _check_optional_bool(
    _inst: object, attr: attrs.Attribute[bool | None], value: bool | None
) -> None:
    raw: object = value  # callers may pass anything at runtime
    if raw is not None and not isinstance(raw, bool):
        raise TypeError(
            f"AgentOptions.{attr.name} must be True, False or None, got "
            f"{type(raw).__name__} {raw!r}"
        )


@attrs.frozen(kw_only=True)
class AgentOptions:
    """Per-agent model route and limits.

    ``thinking`` switches the model's thinking on (``True``) or off (``False``) in
    every request of the agent; ``None`` (the default) sends no switch and leaves the
    provider's default. It is the ``thinking`` of every request's
    :class:`CallConfig` (logged in ``request/header`` when set), and reaches the
    adapter as ``ModelRequest.thinking``; the OpenAI-compatible adapter sends it to
    DeepSeek as ``"thinking": {"type": "enabled" | "disabled"}`` and other servers
    ignore it. A resumed agent takes it from its own options: pass it again when
    resuming.

    Example::

        options = AgentOptions(provider="deepseek", model="deepseek-flash", thinking=False)

    Raises:
        TypeError: ``provider``, ``model`` or ``reasoning_effort`` is neither a
            ``str`` nor ``None``, or ``thinking`` is neither a ``bool`` nor ``None``.
        ValueError: ``max_tokens`` is not a positive ``int`` (bools and floats too).
    """

    provider: str | None = attrs.field(default=None, validator=_check_optional_str)
    model: str | None = attrs.field(default=None, validator=_check_optional_str)
    reasoning_effort: str | None = attrs.field(
        default=None, validator=_check_optional_str
    )
    max_tokens: int | None = attrs.field(default=None, validator=_check_max_tokens)
    thinking: bool | None = attrs.field(default=None, validator=_check_optional_bool)


@attrs.frozen(kw_only=True)
class CallConfig:
    """The route and knobs of one model request (what ``agent/request`` shapes).

    It is logged as the ``config`` of ``request/header``. ``thinking`` is the
    thinking switch that was asked for (``AgentOptions.thinking``, or what an
    ``agent/request`` listener set): written as ``"thinking": true | false`` only
    when set, so a log without it (an older one, or one that never switched) reads
    as ``None``, the provider's default. The reference's ``LlmCallConfig`` has no
    such field.
    """

    provider: str
    model: str
    reasoning_effort: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    stop: tuple[str, ...] | None = None
    thinking: bool | None = None
