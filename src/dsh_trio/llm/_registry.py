"""Which adapter serves which provider, and with which retry policy."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from ..errors import DuplicateProviderError
from ._types import ModelAdapter

__all__ = ["DEFAULT_RETRY_POLICY", "ModelRegistry", "RetryPolicy"]


def _non_negative_int(
    _inst: object, attribute: attrs.Attribute[Any], value: object
) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            f"RetryPolicy.{attribute.name} must be a non-negative int, got {value!r}"
        )


def _non_negative_number(
    _inst: object, attribute: attrs.Attribute[Any], value: object
) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
    ):
        raise ValueError(
            f"RetryPolicy.{attribute.name} must be a finite number >= 0, got {value!r}"
        )


def _ratio(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    _non_negative_number(inst, attribute, value)
    if isinstance(value, (int, float)) and value > 1:
        raise ValueError(f"RetryPolicy.{attribute.name} must be <= 1, got {value!r}")


def _codes(value: object) -> frozenset[str]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ValueError(
            f"RetryPolicy.retryable_codes must be a collection of codes, got {value!r}"
        )
    codes: list[str] = []
    for code in value:
        if not isinstance(code, str) or not code:
            raise ValueError(
                f"RetryPolicy.retryable_codes must hold non-empty strings, got {code!r}"
            )
        codes.append(code)
    return frozenset(codes)


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """How the retry listener retries a provider's failed requests.

    A failure whose code is in ``retryable_codes`` is retried up to ``max_retries``
    times within one step; retry ``n`` waits ``min(initial_delay_ms * 2**(n-1),
    max_delay_ms)`` milliseconds, spread by ``± jitter`` (a ratio) and capped at
    ``max_delay_ms``. A provider's ``retry_after_ms`` is waited instead when it is not
    above ``max_delay_ms``; when it is, the failure is not retried and the turn's error
    says how long the provider asked to wait.

    Raises:
        ValueError: a field is out of range (negative counts or delays, a jitter
            outside ``0..1``, ``max_delay_ms < initial_delay_ms``, non-string codes).
    """

    max_retries: int = attrs.field(default=5, validator=_non_negative_int)
    retryable_codes: frozenset[str] = attrs.field(
        default=frozenset(
            {"EMPTY_RESPONSE", "RATE_LIMIT", "SERVER", "TIMEOUT", "TRANSPORT"}
        ),
        converter=_codes,
    )
    initial_delay_ms: float = attrs.field(default=500, validator=_non_negative_number)
    max_delay_ms: float = attrs.field(default=10_000, validator=_non_negative_number)
    jitter: float = attrs.field(default=0.1, validator=_ratio)

    def __attrs_post_init__(self) -> None:
        if self.max_delay_ms < self.initial_delay_ms:
            raise ValueError(
                f"RetryPolicy.max_delay_ms ({self.max_delay_ms!r}) must not be below "
                f"initial_delay_ms ({self.initial_delay_ms!r})"
            )


#: The policy a provider gets unless its registration says otherwise.
DEFAULT_RETRY_POLICY = RetryPolicy()


@attrs.frozen(eq=False)
class _Route:
    adapter: ModelAdapter
    retry_policy: RetryPolicy | None


@attrs.define(eq=False)
class ModelRegistry:
    """Model adapters by provider name, each with its retry policy.

    The routing key of a request is its ``provider``; the model name is the adapter's
    business. Registration order is kept.

    Example::

        models = ModelRegistry()
        unregister = models.register("deepseek", adapter)
        assert models.get("deepseek") is adapter
        unregister()
    """

    _routes: dict[str, _Route] = attrs.field(factory=dict, init=False)

    def register(
        self,
        provider: str,
        adapter: ModelAdapter,
        *,
        retry_policy: RetryPolicy | None = DEFAULT_RETRY_POLICY,
    ) -> Callable[[], None]:
        """Serve ``provider`` with ``adapter``.

        Never blocks.

        Args:
            provider: the provider name requests route by (non-empty).
            adapter: the adapter; anything with a ``stream(request)`` method.
            retry_policy: how failures of this provider are retried; ``None`` turns
                retries off.

        Returns:
            An idempotent disposer removing this registration (and only this one: after
            the provider was registered again, an old disposer does nothing).

        Raises:
            DuplicateProviderError: ``provider`` already has an adapter.
            ValueError: ``provider`` is empty or not a string.
            TypeError: ``adapter`` has no callable ``stream`` or ``retry_policy`` is
                not a :class:`RetryPolicy`.
        """
        raw: object = provider
        if not isinstance(raw, str) or not raw:
            raise ValueError(f"provider must be a non-empty str, got {provider!r}")
        if not callable(getattr(adapter, "stream", None)):
            raise TypeError(
                f'adapter for provider "{provider}" has no stream() method: {adapter!r}'
            )
        if retry_policy is not None and not isinstance(retry_policy, RetryPolicy):
            raise TypeError(
                f'retry_policy for provider "{provider}" must be a RetryPolicy or None, '
                f"got {retry_policy!r}"
            )
        if provider in self._routes:
            raise DuplicateProviderError(provider)
        route = _Route(adapter, retry_policy)
        self._routes[provider] = route

        def unregister() -> None:
            if self._routes.get(provider) is route:
                del self._routes[provider]

        return unregister

    def get(self, provider: str) -> ModelAdapter | None:
        """The adapter serving ``provider``, or ``None``."""
        route = self._routes.get(provider)
        return route.adapter if route is not None else None

    def retry_policy(self, provider: str) -> RetryPolicy | None:
        """The retry policy of ``provider``; ``None`` when it has retries off or no adapter."""
        route = self._routes.get(provider)
        return route.retry_policy if route is not None else None

    def providers(self) -> list[str]:
        """The registered provider names, in registration order."""
        return list(self._routes)
