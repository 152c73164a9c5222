from __future__ import annotations

from collections.abc import AsyncIterator

import attrs
import pytest

from dsh_trio.errors import DshError, DuplicateProviderError
from dsh_trio.llm import ModelRegistry, ModelRequest, RetryPolicy
from dsh_trio.values import Finish, FinishReason, StreamChunk


class Adapter:
    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        yield Finish(FinishReason("stop"))


def test_retry_policy_defaults() -> None:
    policy = RetryPolicy()
    assert policy.max_retries == 5
    assert policy.retryable_codes == frozenset(
        {"EMPTY_RESPONSE", "RATE_LIMIT", "SERVER", "TIMEOUT", "TRANSPORT"}
    )
    assert policy.initial_delay_ms == 500
    assert policy.max_delay_ms == 10_000
    assert policy.jitter == 0.1
    assert attrs.evolve(policy, max_retries=1).max_retries == 1


def test_retry_policy_converts_codes_to_frozenset() -> None:
    policy = RetryPolicy(retryable_codes=["SERVER", "SERVER"])
    assert policy.retryable_codes == frozenset({"SERVER"})


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_retries": -1},
        {"max_retries": True},
        {"max_retries": 1.5},
        {"initial_delay_ms": -1},
        {"max_delay_ms": float("inf")},
        {"initial_delay_ms": 200, "max_delay_ms": 100},
        {"jitter": 1.5},
        {"jitter": -0.1},
        {"retryable_codes": "SERVER"},
        {"retryable_codes": [""]},
        {"retryable_codes": [1]},
    ],
)
def test_retry_policy_validation(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="RetryPolicy"):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_register_get_and_providers() -> None:
    models = ModelRegistry()
    a, b = Adapter(), Adapter()
    custom = RetryPolicy(max_retries=1)
    models.register("b", b, retry_policy=custom)
    models.register("a", a)
    models.register("off", Adapter(), retry_policy=None)
    assert models.get("a") is a
    assert models.get("b") is b
    assert models.get("missing") is None
    assert models.providers() == ["b", "a", "off"]
    assert models.retry_policy("a") == RetryPolicy()
    assert models.retry_policy("b") is custom
    assert models.retry_policy("off") is None
    assert models.retry_policy("missing") is None


def test_duplicate_provider_is_rejected() -> None:
    models = ModelRegistry()
    first = Adapter()
    models.register("p", first)
    with pytest.raises(DuplicateProviderError, match='"p"') as info:
        models.register("p", Adapter())
    assert isinstance(info.value, DshError)
    assert isinstance(info.value, ValueError)
    assert info.value.provider == "p"
    assert models.get("p") is first


def test_disposer_is_idempotent_and_scoped_to_its_registration() -> None:
    models = ModelRegistry()
    dispose_old = models.register("p", Adapter())
    dispose_old()
    dispose_old()
    assert models.get("p") is None
    assert models.providers() == []
    newer = Adapter()
    models.register("p", newer)
    dispose_old()  # an old disposer must not remove the newer registration
    assert models.get("p") is newer


def test_register_validates_arguments() -> None:
    models = ModelRegistry()
    with pytest.raises(ValueError, match="provider"):
        models.register("", Adapter())
    with pytest.raises(TypeError, match="stream"):
        models.register("p", object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="RetryPolicy"):
        models.register("p", Adapter(), retry_policy={"max_retries": 1})  # type: ignore[arg-type]
    assert models.providers() == []
