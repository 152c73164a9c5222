from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing

import dsh_trio as dsh
from dsh_trio.errors import LlmError
from dsh_trio.events import EventBus, RequestFailed
from dsh_trio.llm import ModelRegistry, RetryPolicy
from dsh_trio.nursery import install_retry_listener
from dsh_trio.testing import ScriptedModel, fail
from dsh_trio.values import (
    JsonValue,
    LlmFailure,
    RequestErrorAction,
    Retry,
    SessionEvent,
    TurnEnd,
    TurnStart,
)


def as_dict(value: object) -> dict[str, JsonValue]:
    assert isinstance(value, dict)
    return value


class FakeSession:
    """The two members of a session the retry listener uses."""

    def __init__(self) -> None:
        self.events: list[SessionEvent] = []

    def append(self, type: str, data: JsonValue | TurnStart) -> SessionEvent:
        event = SessionEvent(
            seq=len(self.events),
            time=int(trio.current_time() * 1000),
            type=type,
            data=data,
        )
        self.events.append(event)
        return event

    def of_type(self, type: str) -> list[dict[str, JsonValue]]:
        return [as_dict(e.data) for e in self.events if e.type == type]


class FakeAgent:
    def __init__(self) -> None:
        self.session = FakeSession()


DEFAULT_POLICY = RetryPolicy()


def failed(
    agent: FakeAgent,
    failure: LlmFailure,
    *,
    policy: RetryPolicy | None = DEFAULT_POLICY,
    turn: int = 1,
    step: int = 1,
    provider: str = "p",
) -> RequestFailed:
    return RequestFailed(
        agent,  # type: ignore[arg-type]
        turn,
        step,
        provider,
        failure,
        policy,
        None,  # type: ignore[arg-type]
    )


class Fallback:
    """A listener after the retry listener: records that it was delegated to."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(
        self, payload: RequestFailed, next_: Callable[[], Awaitable[RequestErrorAction]]
    ) -> RequestErrorAction:
        self.calls += 1
        return await next_()


def setup(
    random: Callable[[], float] = lambda: 0.5,
) -> tuple[EventBus, Fallback, Callable[[], None]]:
    bus = EventBus()
    dispose = install_retry_listener(bus, ModelRegistry(), random=random)
    fallback = Fallback()
    bus.on("agent/request-error", fallback)
    return bus, fallback, dispose


RATE_LIMIT = LlmFailure("busy", "RATE_LIMIT")
NO_ACTION: RequestErrorAction = None


async def dispatch(
    bus: EventBus, payload: RequestFailed
) -> tuple[RequestErrorAction, float]:
    start = trio.current_time()
    action = await bus.waterfall("agent/request-error", payload, NO_ACTION)
    return action, trio.current_time() - start


async def test_backoff_doubles_until_max_retries_then_delegates(
    autojump_clock: trio.testing.MockClock,
) -> None:
    bus, fallback, _ = setup()
    agent = FakeAgent()
    waits: list[float] = []
    for _ in range(5):
        action, waited = await dispatch(bus, failed(agent, RATE_LIMIT))
        assert action == Retry()
        waits.append(waited)
    assert waits == pytest.approx([0.5, 1.0, 2.0, 4.0, 8.0])
    assert fallback.calls == 0
    action, waited = await dispatch(bus, failed(agent, RATE_LIMIT))
    assert action is None
    assert waited == 0
    assert fallback.calls == 1

    retries = agent.session.of_type("llm/retry")
    started = agent.session.of_type("llm/retry-started")
    assert [r["retry"] for r in retries] == [1, 2, 3, 4, 5]
    assert [r["delayMs"] for r in retries] == [500, 1000, 2000, 4000, 8000]
    retry_ids = {r["retryId"] for r in retries}
    assert len(retry_ids) == 1  # one id for the whole chain
    first = retries[0]
    assert first == {
        "retryId": first["retryId"],
        "turn": 1,
        "step": 1,
        "provider": "p",
        "mode": "normal",
        "policyKey": "p",
        "retry": 1,
        "maxRetries": 5,
        "delayMs": 500,
        "failure": {"message": "busy", "code": "RATE_LIMIT"},
    }
    assert started[0] == {
        "retryId": first["retryId"],
        "turn": 1,
        "step": 1,
        "retry": 1,
    }
    # Each wait sits between its llm/retry and its llm/retry-started.
    types = [e.type for e in agent.session.events]
    assert types == ["llm/retry", "llm/retry-started"] * 5
    gap = agent.session.events[1].time - agent.session.events[0].time
    assert gap == 500


async def test_delay_is_capped_at_max(autojump_clock: trio.testing.MockClock) -> None:
    bus, _, _ = setup(random=lambda: 0.999999)
    agent = FakeAgent()
    policy = RetryPolicy(
        max_retries=10, initial_delay_ms=1000, max_delay_ms=3000, jitter=0.5
    )
    waits = []
    for _ in range(4):
        _, waited = await dispatch(bus, failed(agent, RATE_LIMIT, policy=policy))
        waits.append(waited)
    # 1000 * 1.5 = 1500, 2000 * 1.5 = 3000 (cap), then capped base * 1.5 capped again.
    assert waits == pytest.approx([1.5, 3.0, 3.0, 3.0])


async def test_jitter_lower_bound(autojump_clock: trio.testing.MockClock) -> None:
    bus, _, _ = setup(random=lambda: 0.0)
    _, waited = await dispatch(bus, failed(FakeAgent(), RATE_LIMIT))
    assert waited == pytest.approx(0.45)


async def test_retry_after_is_honoured(autojump_clock: trio.testing.MockClock) -> None:
    bus, fallback, _ = setup()
    agent = FakeAgent()
    failure = LlmFailure("slow down", "RATE_LIMIT", status=429, retry_after_ms=1234)
    action, waited = await dispatch(bus, failed(agent, failure))
    assert action == Retry()
    assert waited == pytest.approx(1.234)
    (retry,) = agent.session.of_type("llm/retry")
    assert retry["delayMs"] == 1234
    assert retry["failure"] == {
        "message": "slow down",
        "code": "RATE_LIMIT",
        "status": 429,
        "providerRetryAfterMs": 1234,
    }
    assert fallback.calls == 0


async def test_retry_after_above_max_delegates_then_says_when_to_retry(
    autojump_clock: trio.testing.MockClock,
) -> None:
    bus, fallback, _ = setup()
    agent = FakeAgent()
    failure = LlmFailure(
        "HTTP 429 from u: later", "RATE_LIMIT", status=429, retry_after_ms=60_000
    )
    start = trio.current_time()
    with pytest.raises(LlmError) as info:
        await dispatch(bus, failed(agent, failure))
    assert trio.current_time() == start  # no wait at all
    assert fallback.calls == 1  # later listeners were asked first
    assert agent.session.events == []
    assert info.value.failure == LlmFailure(
        "rate limited; the provider asks to retry after 60 s, more than "
        "max_delay_ms=10000: HTTP 429 from u: later",
        "RATE_LIMIT",
        status=429,
        retry_after_ms=60_000,
    )


async def test_retry_after_above_max_of_another_code_names_no_rate_limit() -> None:
    bus, _, _ = setup()
    failure = LlmFailure("overloaded", "SERVER", status=503, retry_after_ms=90_500)
    policy = RetryPolicy(max_delay_ms=2_000)
    with pytest.raises(LlmError) as info:
        await dispatch(bus, failed(FakeAgent(), failure, policy=policy))
    assert info.value.failure.code == "SERVER"
    assert info.value.failure.message == (
        "request failed; the provider asks to retry after 90.5 s, more than "
        "max_delay_ms=2000: overloaded"
    )


async def test_retry_after_above_max_lets_a_later_listener_retry() -> None:
    bus, _, _ = setup()

    async def own(
        _p: RequestFailed, _next: Callable[[], Awaitable[RequestErrorAction]]
    ) -> RequestErrorAction:
        return Retry()

    bus.on("agent/request-error", own)
    failure = LlmFailure("later", "RATE_LIMIT", retry_after_ms=60_000)
    action, _ = await dispatch(bus, failed(FakeAgent(), failure))
    assert action == Retry()


async def test_retry_after_above_max_ends_the_turn_with_a_clear_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel(
        fail("RATE_LIMIT", "slow down", status=429, retry_after_ms=60_000)
    )
    async with dsh.open_runtime(models={"p": model}) as runtime:
        async with runtime.agents.open(
            options=dsh.AgentOptions(provider="p", model="m")
        ) as agent:
            agent.followup(dsh.user_message("hi"))
            await agent.when_idle()
            ends = [e.data for e in agent.session.events if isinstance(e.data, TurnEnd)]
    assert len(model.requests) == 1  # not retried
    assert ends == [
        TurnEnd(
            1,
            dsh.Errored(
                LlmFailure(
                    "rate limited; the provider asks to retry after 60 s, more than "
                    "max_delay_ms=10000: slow down",
                    "RATE_LIMIT",
                    status=429,
                    retry_after_ms=60_000,
                )
            ),
        )
    ]


@pytest.mark.parametrize("code", ["AUTH", "INVALID_REQUEST", "CONTEXT_WINDOW_EXCEEDED"])
async def test_non_retryable_code_delegates(code: str) -> None:
    bus, fallback, _ = setup()
    agent = FakeAgent()
    action, _ = await dispatch(bus, failed(agent, LlmFailure("no", code)))
    assert action is None
    assert fallback.calls == 1
    assert agent.session.events == []


async def test_policy_none_delegates() -> None:
    bus, fallback, _ = setup()
    agent = FakeAgent()
    action, _ = await dispatch(bus, failed(agent, RATE_LIMIT, policy=None))
    assert action is None
    assert fallback.calls == 1
    assert agent.session.events == []


async def test_delegation_returns_what_later_listeners_decide() -> None:
    bus, _, _ = setup()

    async def own(
        _p: RequestFailed, _next: Callable[[], Awaitable[RequestErrorAction]]
    ) -> RequestErrorAction:
        return Retry()

    bus.on("agent/request-error", own)
    action, _ = await dispatch(bus, failed(FakeAgent(), LlmFailure("no", "AUTH")))
    assert action == Retry()


async def test_prepended_listener_runs_first() -> None:
    bus, _, _ = setup()
    agent = FakeAgent()

    async def veto(
        _p: RequestFailed, _next: Callable[[], Awaitable[RequestErrorAction]]
    ) -> RequestErrorAction:
        return None

    bus.on("agent/request-error", veto, prepend=True)
    action, _ = await dispatch(bus, failed(agent, RATE_LIMIT))
    assert action is None
    assert agent.session.events == []


async def test_counts_only_this_turn_step_and_provider(
    autojump_clock: trio.testing.MockClock,
) -> None:
    bus, fallback, _ = setup()
    agent = FakeAgent()
    policy = RetryPolicy(max_retries=1)
    session = agent.session
    # An earlier turn's retry of the same turn/step numbers (a previous driver life, say)
    # lies before this turn's turn/start and must not count.
    session.append(
        "llm/retry",
        {"retryId": "old", "turn": 2, "step": 1, "provider": "p", "retry": 1},
    )
    session.append("turn/start", TurnStart(2))
    session.append(
        "llm/retry",
        {"retryId": "q", "turn": 2, "step": 1, "provider": "other", "retry": 1},
    )
    session.append(
        "llm/retry",
        {"retryId": "s", "turn": 2, "step": 0, "provider": "p", "retry": 1},
    )
    action, _ = await dispatch(bus, failed(agent, RATE_LIMIT, policy=policy, turn=2))
    assert action == Retry()
    new_id = as_dict(session.events[-2].data)["retryId"]
    assert new_id not in {"old", "q", "s"}
    action, _ = await dispatch(bus, failed(agent, RATE_LIMIT, policy=policy, turn=2))
    assert action is None
    assert fallback.calls == 1
    # A new step starts a new chain.
    action, _ = await dispatch(
        bus, failed(agent, RATE_LIMIT, policy=policy, turn=2, step=2)
    )
    assert action == Retry()


async def test_zero_max_retries_never_retries() -> None:
    bus, fallback, _ = setup()
    action, _ = await dispatch(
        bus, failed(FakeAgent(), RATE_LIMIT, policy=RetryPolicy(max_retries=0))
    )
    assert action is None
    assert fallback.calls == 1


async def test_cancel_during_wait_propagates(
    autojump_clock: trio.testing.MockClock,
) -> None:
    bus, fallback, _ = setup()
    agent = FakeAgent()
    with trio.move_on_after(0.2) as scope:
        await bus.waterfall("agent/request-error", failed(agent, RATE_LIMIT), None)
        raise AssertionError("the wait must be cancelled")
    assert scope.cancelled_caught
    assert [e.type for e in agent.session.events] == ["llm/retry"]
    assert fallback.calls == 0


async def test_disposer_removes_the_listener() -> None:
    bus, fallback, dispose = setup()
    dispose()
    dispose()
    agent = FakeAgent()
    action, _ = await dispatch(bus, failed(agent, RATE_LIMIT))
    assert action is None
    assert fallback.calls == 1
    assert agent.session.events == []
