"""The ``agent/request-error`` listener that retries failed model requests."""

from __future__ import annotations

import functools
import math
import random as _random
import uuid
from collections.abc import Awaitable, Callable, Sequence

import attrs
import trio

from ..errors import LlmError
from ..events import EventBus
from ..llm import ModelRegistry, RetryPolicy
from ..loop import RequestFailed
from ..values import (
    JsonValue,
    LlmFailure,
    RequestErrorAction,
    Retry,
    SessionEvent,
    to_json,
)

__all__ = ["install_retry_listener", "retry_delay_ms"]


def retry_delay_ms(
    policy: RetryPolicy,
    retry: int,
    failure: LlmFailure,
    random: Callable[[], float] = _random.random,
) -> int | None:
    """How long to wait before retry number ``retry`` (from 1), in milliseconds.

    A valid (positive, finite) ``failure.retry_after_ms`` is used as-is when it is not
    above ``policy.max_delay_ms``; above it, ``None`` says "do not retry". Otherwise
    ``min(initial * 2**(retry-1), max) * (1 - jitter + 2 * jitter * random())``, capped
    at ``max``. The result is rounded to whole milliseconds.
    """
    after = failure.retry_after_ms
    if (
        after is not None
        and not isinstance(after, bool)
        and math.isfinite(after)
        and after > 0
    ):
        if after > policy.max_delay_ms:
            return None
        return round(after)
    # The exponent is capped so huge retry counts cannot overflow a float.
    base = min(policy.initial_delay_ms * 2.0 ** min(retry - 1, 64), policy.max_delay_ms)
    jitter = policy.jitter
    delay = base * (1 - jitter + 2 * jitter * random())
    return round(min(delay, policy.max_delay_ms))


def _previous_retry(
    events: Sequence[SessionEvent], turn: int, step: int, provider: str
) -> tuple[int, str | None]:
    """``(retry number, retry id)`` of the latest ``llm/retry`` of this turn, step and
    provider, or ``(0, None)``. Scans back from the end, over the current turn only."""
    for index in range(len(events) - 1, -1, -1):
        event = events[index]
        kind = event.type
        if kind == "turn/start":
            break
        if kind != "llm/retry":
            continue
        data = event.data
        if (
            isinstance(data, dict)
            and data.get("turn") == turn
            and data.get("step") == step
            and data.get("provider") == provider
        ):
            number = data.get("retry")
            retry_id = data.get("retryId")
            return (
                number
                if isinstance(number, int) and not isinstance(number, bool)
                else 1,
                retry_id if isinstance(retry_id, str) else None,
            )
    return 0, None


def install_retry_listener(
    bus: EventBus,
    models: ModelRegistry,
    *,
    random: Callable[[], float] = _random.random,
) -> Callable[[], None]:
    """Register the retry listener on ``agent/request-error`` and return its disposer.

    For a failed request the listener reads the provider's policy from the payload's
    ``retry_policy`` (the loop passes ``models.retry_policy(provider)``) and delegates
    to the rest of the chain (``await next()``) when there is none, when the failure
    code is not retryable, when the step already used ``max_retries`` retries of this
    provider, or when the provider asks to wait longer than ``max_delay_ms``.
    Otherwise it appends ``llm/retry`` to the agent's session, sleeps the delay (see
    :func:`retry_delay_ms`), appends ``llm/retry-started`` and returns ``Retry()``.

    When the provider asked for a longer wait (``retry_after_ms`` above
    ``max_delay_ms``) and no later listener retries either, the listener raises
    :class:`~dsh_trio.errors.LlmError` with the same failure (same code, status and
    ``retry_after_ms``) whose message says when to retry, e.g. ``rate limited; the
    provider asks to retry after 60 s, more than max_delay_ms=10000: ...``; the turn
    ends ``Errored`` with it.

    The sleep is cancelled with the turn: ``trio.Cancelled`` propagates and no
    ``llm/retry-started`` is written. Listeners registered later run only when this
    one delegates; ``prepend=True`` listeners run before it.

    Args:
        bus: the bus to register on.
        models: the registry the policies come from.
        random: a ``[0, 1)`` source for the jitter (tests pass a constant).

    Returns:
        An idempotent disposer that removes the listener.
    """
    # The loop resolves each provider's policy from ``models`` into the payload, so
    # the listener itself reads only the payload.
    del models
    return bus.on(
        "agent/request-error", functools.partial(_on_request_error, random=random)
    )


def _too_long_to_wait(failure: LlmFailure, policy: RetryPolicy) -> LlmFailure:
    """``failure`` with a message saying when the provider lets the request be retried."""
    after = failure.retry_after_ms
    assert after is not None  # only then does retry_delay_ms refuse
    what = "rate limited" if failure.code == "RATE_LIMIT" else "request failed"
    message = (
        f"{what}; the provider asks to retry after {after / 1000:g} s, more than "
        f"max_delay_ms={policy.max_delay_ms:g}: {failure.message}"
    )
    return attrs.evolve(failure, message=message)


async def _on_request_error(
    payload: RequestFailed,
    next_: Callable[[], Awaitable[RequestErrorAction]],
    *,
    random: Callable[[], float],
) -> RequestErrorAction:
    """The listener :func:`install_retry_listener` registers (``random`` bound)."""
    policy = payload.retry_policy
    failure = payload.failure
    if policy is None or failure.code not in policy.retryable_codes:
        return await next_()
    session = payload.agent.session
    turn, step, provider = payload.turn, payload.step, payload.provider
    previous, retry_id = _previous_retry(session.events, turn, step, provider)
    retry = previous + 1
    if retry > policy.max_retries:
        return await next_()
    delay_ms = retry_delay_ms(policy, retry, failure, random)
    if delay_ms is None:
        action = await next_()
        if action is None:
            raise LlmError(_too_long_to_wait(failure, policy))
        return action
    if retry_id is None:
        retry_id = str(uuid.uuid4())
    data: dict[str, JsonValue] = {
        "retryId": retry_id,
        "turn": turn,
        "step": step,
        "provider": provider,
        # The reference's fields: the retry mode and the key of the policy used
        # (policies are chosen per provider).
        "mode": "normal",
        "policyKey": provider,
        "retry": retry,
        "maxRetries": policy.max_retries,
        "delayMs": delay_ms,
        "failure": to_json(failure),
    }
    session.append("llm/retry", data)
    await trio.sleep(delay_ms / 1000)
    session.append(
        "llm/retry-started",
        {"retryId": retry_id, "turn": turn, "step": step, "retry": retry},
    )
    return Retry()
