"""The fast lane (``loop/_lane.py``) is the general path, only faster.

Random scripts of turns (text, tool calls and the steps after them, reasoning,
non-ASCII text, chunks of other kinds inside a text run, request errors and retries,
max-tokens, cancels at random frames) on one to three agents at once, with random
listeners (none, one, several, one that raises) and hooks (some that can change a
turn, some that only observe) run once as they are and once with the lane switched
off (:func:`general_path`). Both runs must write the same log bytes (times
and ids normalised), show the same live frames in the same order and make the same
hook and listener calls. The mutation tests show the comparison notices a lane that
writes one byte, one frame or one listener call differently; the entry tests show
the lane is taken on the common turn, and not when a hook can change the turn.
"""

from __future__ import annotations

import json
import random
import re
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, event, example, given, settings, strategies as st

import dsh_trio as dsh
from dsh_trio.errors import LlmError
from dsh_trio.events import (
    AssistantStream,
    PreStep,
    RequestFailed,
    RequestProposal,
    SessionEventAppended,
    StreamChunkFrame,
    TurnStopping,
)
from dsh_trio.llm import ModelRequest
from dsh_trio.loop import _lane
from dsh_trio.loop._lane import LANE, general_path
from dsh_trio.persistence._jsonl_lines import encode_events
from dsh_trio.testing import (
    chunks,
    fail,
    max_tokens,
    reply,
    tool_calls,
)
from dsh_trio.testing._script import Script, _Chunks

#: The generator trio's scheduler draws its task order from (seeded by hypothesis).
_SCHEDULER: random.Random = trio._core._run._r
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TIME_KEYS = frozenset(("time", "time0"))


@dsh.tool
async def echo(x: int) -> str:
    """Echo ``x``."""
    return f"echo {x}"


# ------------------------------------------------------------------ scenarios

#: Hooks a scenario may install. The first three can change a turn (no attempt
#: takes the lane while one listens); the others only observe.
HOOKS = (
    "pre-step",
    "request",
    "turn-stopping",
    "request-error",
    "status",
    "claimed",
    "session-event",
)


@attrs.frozen
class Scenario:
    #: The script entries pushed before each turn (the model's default is "done").
    turns: tuple[tuple[Script, ...], ...]
    #: ``agent/assistant-stream`` listeners, in order: "record", "raise" or "swap"
    #: (on its third frame it leaves and registers its successor: the listener set
    #: changes between two frames of one attempt).
    listeners: tuple[str, ...] = ()
    hooks: frozenset[str] = frozenset()
    #: Cancel the running turn from a listener of this chunk frame (counted over
    #: the whole scenario), if any.
    cancel_at: int | None = None
    #: Cancel the first turn from another task after this many of its checkpoints
    #: (a cancel that lands while the driver waits to be resumed), if any.
    cancel_after: int | None = None
    #: The model waits shielded before each chunk: a cancel from another task
    #: lands while it waits, and the chunk still comes.
    shielded: bool = False
    #: Agents running the same turns at once, each with its own model and
    #: listeners (the cancels are the first agent's).
    agents: int = 1


_texts = st.text(alphabet="ab c\u00e9\u2603", min_size=1, max_size=8)
_UNUSUAL = (
    # A run interrupted by a chunk the lane does not take, then continued.
    chunks(
        dsh.BlockStart(0, "text"),
        dsh.TextDelta(0, "ab"),
        dsh.TextDelta(0, "c"),
        dsh.ReasoningDelta(1, "r"),
        dsh.TextDelta(0, "d"),
        dsh.BlockEnd(0, dsh.TextBlock("abcd")),
        dsh.Usage(3, 4),
        dsh.Finish(dsh.FinishReason("stop")),
    ),
    # Deltas of a block that was never started, and a text run re-opened.
    chunks(
        dsh.TextDelta(0, "x"),
        dsh.TextDelta(0, "y"),
        dsh.BlockStart(1, "text"),
        dsh.TextDelta(1, "z"),
        dsh.TextDelta(0, "w"),
        dsh.TextDelta(0, "v"),
        dsh.Finish(dsh.FinishReason("stop")),
    ),
)


@st.composite
def entries(draw: st.DrawFn) -> Script:
    kind = draw(
        st.sampled_from(("reply", "reply", "reply", "tools", "fail", "max", "unusual"))
    )
    if kind == "reply":
        return reply(
            draw(_texts),
            chunks=draw(st.none() | st.integers(1, 4)),
            reasoning=draw(st.none() | _texts),
        )
    if kind == "tools":
        n = draw(st.integers(1, 2))
        calls = [(f"c{k}", "echo", f'{{"x": {k}}}') for k in range(n)]
        if draw(st.booleans()):
            calls.append(("bad", "missing", "{}"))
        return tool_calls(*calls, text=draw(st.none() | _texts))
    if kind == "fail":
        code = draw(st.sampled_from(("RATE_LIMIT", "SERVER", "BAD_REQUEST")))
        return fail(code, in_band=draw(st.booleans()))
    if kind == "max":
        return max_tokens(draw(_texts))
    return draw(st.sampled_from(_UNUSUAL))


scenarios = st.builds(
    Scenario,
    turns=st.lists(
        st.lists(entries(), min_size=0, max_size=3).map(tuple), min_size=1, max_size=3
    ).map(tuple),
    listeners=st.lists(st.sampled_from(("record", "raise", "swap")), max_size=3).map(
        tuple
    ),
    hooks=st.frozensets(st.sampled_from(HOOKS), max_size=2),
    cancel_at=st.none() | st.integers(1, 30),
    cancel_after=st.none() | st.integers(0, 30),
    shielded=st.booleans(),
    agents=st.sampled_from((1, 1, 2, 3)),
)


# ------------------------------------------------------------------ one run


class Model:
    """Plays the pushed entries (default "done"), a checkpoint before each chunk:
    shielded or not."""

    def __init__(self, shielded: bool) -> None:
        self.script: deque[Script] = deque()
        self.shielded = shielded

    def stream(self, request: ModelRequest) -> AsyncIterator[dsh.StreamChunk]:
        entry = self.script.popleft() if self.script else _DONE
        assert isinstance(entry, _Chunks)
        return self._play(entry)

    async def _play(self, entry: _Chunks) -> AsyncIterator[dsh.StreamChunk]:
        for chunk in entry.chunks:
            with trio.CancelScope(shield=self.shielded):
                await trio.lowlevel.checkpoint()
            yield chunk
        await trio.lowlevel.checkpoint()
        if entry.failure is not None:
            raise LlmError(entry.failure)


_DONE = reply("done")


@attrs.frozen
class Observed:
    log: list[str]
    frames: list[str]
    calls: list[str]


def _normal(value: Any, ids: dict[str, str]) -> Any:
    """``value`` (decoded JSON) with every time zeroed and every uuid numbered."""
    if isinstance(value, dict):
        return {
            k: 0 if k in _TIME_KEYS else [0] * len(v) if k == "dt" else _normal(v, ids)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_normal(v, ids) for v in value]
    if isinstance(value, str):
        return _UUID.sub(lambda m: ids.setdefault(m[0], f"<id{len(ids)}>"), value)
    return value


def normalised_log(data: bytes) -> list[str]:
    """The log's lines, times zeroed and ids numbered in order of appearance."""
    ids: dict[str, str] = {}
    return [
        json.dumps(_normal(json.loads(line), ids), ensure_ascii=False)
        for line in data.decode("utf-8").splitlines()
    ]


def _frame(payload: AssistantStream) -> str:
    frame = payload.frame
    if isinstance(frame, StreamChunkFrame):
        frame = attrs.evolve(frame, time=0)
    return repr(frame)


async def play(scenario: Scenario) -> Observed:
    """Run ``scenario`` on a fresh runtime; what it wrote, showed and called."""
    random.seed(0)  # the retry listener's jitter
    frames: list[str] = []
    calls: list[str] = []
    models = [Model(scenario.shielded) for _ in range(scenario.agents)]
    async with dsh.open_runtime(
        models={f"p{k}": model for k, model in enumerate(models)}, tools=[echo]
    ) as runtime:
        handles = [
            await runtime.agents.create(
                f"a{k}", options=dsh.AgentOptions(provider=f"p{k}", model="m")
            )
            for k in range(scenario.agents)
        ]
        agents = [handle.agent for handle in handles]
        agent = agents[0]
        bus = runtime.events
        hooks = scenario.hooks
        seen = 0

        disposers: dict[tuple[int, int], Callable[[], None]] = {}

        def listener(k: int, n: int, kind: str) -> Callable[[AssistantStream], None]:
            heard_frames = 0

            def heard(payload: AssistantStream) -> None:
                nonlocal heard_frames
                calls.append(f"a{k} stream#{n} {_frame(payload)}")
                if n == 0:  # the frames as the first listener sees them
                    frames.append(f"a{k} {_frame(payload)}")
                if kind == "raise":
                    raise RuntimeError("a listener that raises")
                heard_frames += 1
                if kind == "swap" and heard_frames == 3:
                    # Leave, and register a successor (heard from the next frame).
                    disposers.pop((k, n))()
                    successor = n + 100
                    disposers[k, successor] = agents[k].scope.on(
                        "agent/assistant-stream", listener(k, successor, kind)
                    )

            return heard

        for k, each in enumerate(agents):
            for n, kind in enumerate(scenario.listeners):
                disposers[k, n] = each.scope.on(
                    "agent/assistant-stream", listener(k, n, kind)
                )
        if scenario.cancel_at is not None:

            def canceller(payload: AssistantStream) -> None:
                nonlocal seen
                if isinstance(payload.frame, StreamChunkFrame):
                    seen += 1
                    if seen == scenario.cancel_at:
                        calls.append("cancel")
                        agent.cancel(dsh.UserCancel())

            agent.scope.on("agent/assistant-stream", canceller)
        if "pre-step" in hooks:

            async def pre_step(e: PreStep, next: Callable[[], Awaitable[Any]]) -> Any:
                calls.append(
                    f"{e.agent.id} pre-step t{e.turn}s{e.step} {len(e.messages)}"
                )
                return await next()

            bus.on("agent/pre-step", pre_step)
        if "request" in hooks:

            async def request(
                e: RequestProposal, next: Callable[[], Awaitable[Any]]
            ) -> Any:
                calls.append(f"{e.agent.id} request t{e.turn}s{e.step}")
                config = await next()
                return attrs.evolve(config, max_tokens=64 + e.step)

            bus.on("agent/request", request)
        if "turn-stopping" in hooks:

            async def stopping(e: TurnStopping) -> None:
                calls.append(f"{e.agent.id} turn-stopping t{e.turn}")

            bus.on("agent/turn-stopping", stopping)
        if "request-error" in hooks:

            async def request_error(
                e: RequestFailed, next: Callable[[], Awaitable[Any]]
            ) -> Any:
                calls.append(
                    f"{e.agent.id} request-error t{e.turn}s{e.step} {e.failure.code}"
                )
                return await next()

            bus.on("agent/request-error", request_error, prepend=True)
        if "status" in hooks:
            bus.on(
                "agent/status",
                lambda e: calls.append(f"{e.agent.id} status {e.status.value}"),
            )
        if "claimed" in hooks:
            bus.on(
                "agent/inbox/claimed",
                lambda e: calls.append(f"{e.agent.id} claimed t{e.turn}"),
            )
        if "session-event" in hooks:

            def appended(e: SessionEventAppended) -> None:
                calls.append(f"{e.session.id} #{e.event.seq} {e.event.type}")

            bus.on("session/event", appended)

        async def cancel_later(checkpoints: int) -> None:
            for _ in range(checkpoints):
                await trio.lowlevel.checkpoint()
            calls.append("cancel from a task")
            agent.cancel(dsh.UserCancel())

        for number, turn in enumerate(scenario.turns):
            for model in models:
                model.script.extend(turn)
            async with trio.open_nursery() as nursery:
                for each in agents:
                    each.followup(dsh.user_message(f"prompt {number}", id=f"m{number}"))
                if number == 0 and scenario.cancel_after is not None:
                    nursery.start_soon(cancel_later, scenario.cancel_after)
                for each in agents[1:]:
                    nursery.start_soon(each.when_idle)
                await agent.when_idle()
        log = [
            line
            for each in agents
            for line in normalised_log(encode_events(list(each.session.events)))
        ]
        for handle in handles:
            await handle.dispose()
    return Observed(log, frames, calls)


def observe(scenario: Scenario, *, general: bool = False) -> Observed:
    """``play(scenario)`` in a fresh trio run with a mock clock (retries sleep)."""
    clock = trio.testing.MockClock(autojump_threshold=0)
    if general:
        with general_path():
            return trio.run(play, scenario, clock=clock)
    return trio.run(play, scenario, clock=clock)


def _first_difference(what: str, lane: list[str], general: list[str]) -> None:
    if lane == general:
        return
    at = next(
        (k for k, (a, b) in enumerate(zip(lane, general, strict=False)) if a != b),
        min(len(lane), len(general)),
    )
    raise AssertionError(
        f"{what} differ at {at} (lane {len(lane)}, general {len(general)}):\n"
        f"  lane:    {lane[at] if at < len(lane) else '<none>'}\n"
        f"  general: {general[at] if at < len(general) else '<none>'}"
    )


def assert_same(lane: Observed, general: Observed) -> None:
    """Raise ``AssertionError`` naming the first channel in which the runs differ."""
    _first_difference("log bytes", lane.log, general.log)
    _first_difference("frames", lane.frames, general.frames)
    _first_difference("calls", lane.calls, general.calls)


def differential(scenario: Scenario) -> int:
    """Run ``scenario`` both ways and compare; the attempts the lane read.

    Under hypothesis trio's scheduler orders each batch of runnable tasks from one
    seeded generator; both runs start from the same state of it, so any difference
    comes from the path taken, not from the order the tasks happened to run in.
    """
    scheduling = _SCHEDULER.getstate()
    before = LANE.entries
    lane = observe(scenario)
    entered = LANE.entries - before
    _SCHEDULER.setstate(scheduling)
    general = observe(scenario, general=True)
    assert LANE.entries - before == entered  # the general run never entered it
    assert_same(lane, general)
    return entered


# ------------------------------------------------------------------ the property

COMMON = Scenario(
    turns=((reply("hello world", chunks=5),), (reply("again"),)),
    listeners=("record", "raise", "record"),
    hooks=frozenset(("status", "session-event")),
)
#: A turn of two steps: a tool call, then the answer after its result.
TOOLS = Scenario(
    turns=((tool_calls(("c0", "echo", '{"x": 1}'), text="let me see"), reply("two")),),
    listeners=("record",),
    hooks=frozenset(("session-event",)),
)


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(scenarios)
@example(COMMON)
@example(attrs.evolve(COMMON, cancel_at=3))
@example(attrs.evolve(COMMON, agents=3, cancel_at=7))
@example(attrs.evolve(TOOLS, agents=2))
@example(attrs.evolve(COMMON, listeners=("swap", "record", "swap")))
@example(Scenario(turns=((_UNUSUAL[0], fail("SERVER"), _UNUSUAL[1]),)))
@example(
    Scenario(
        turns=((reply("abcdefgh"),),),
        listeners=("record",),
        cancel_after=4,
        shielded=True,
    )
)
def test_the_lane_writes_shows_and_calls_what_the_general_path_does(
    scenario: Scenario,
) -> None:
    entered = differential(scenario)
    event(f"attempts the lane read: {min(entered, 3)}")


# ------------------------------------------------------------------ it would notice


def test_a_lane_that_writes_one_byte_differently_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    flush = _lane._flush

    def one_byte_off(records: Any, parts: Any, times: Any, texts: Any) -> None:
        texts[-1] = texts[-1] + "!"  # one more byte in the record of the run
        flush(records, parts, times, texts)

    monkeypatch.setattr(_lane, "_flush", one_byte_off)
    with pytest.raises(AssertionError, match="log bytes differ"):
        differential(COMMON)


def test_a_lane_that_shows_one_frame_differently_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    build = _lane._chunk_payload
    made = 0

    def one_frame_off(
        agent: Any, attempt: str, revision: int, index: int, *rest: Any
    ) -> Any:
        nonlocal made
        made += 1
        return build(agent, attempt, revision + (made == 3), index, *rest)

    monkeypatch.setattr(_lane, "_chunk_payload", one_frame_off)
    with pytest.raises(AssertionError, match="frames differ"):
        differential(COMMON)


def test_a_lane_that_calls_one_listener_differently_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dispatch = _lane.dispatch  # type: ignore[attr-defined]  # what the lane calls
    made = 0

    def one_call_off(name: str, listeners: Any, payload: Any) -> None:
        nonlocal made
        made += 1
        # The third chunk reaches the first listener only: the frames it records
        # stay as they were, the calls of the other two do not.
        dispatch(name, listeners[:1] if made == 3 else listeners, payload)

    monkeypatch.setattr(_lane, "dispatch", one_call_off)
    with pytest.raises(AssertionError, match="calls differ"):
        differential(attrs.evolve(COMMON, listeners=("record", "raise")))


# ------------------------------------------------------------------ when it is taken


def test_the_common_turn_takes_the_lane() -> None:
    # Two turns of one attempt each; observing hooks do not keep it off.
    assert differential(COMMON) == 2


def test_a_tool_step_and_the_step_after_it_take_the_lane() -> None:
    assert differential(TOOLS) == 2


def test_agents_turning_at_once_each_take_the_lane() -> None:
    # Three agents, two turns each, their chunks interleaved.
    assert differential(attrs.evolve(COMMON, agents=3)) == 6


def test_a_hook_that_can_change_the_turn_keeps_it_off() -> None:
    for hook in ("pre-step", "request", "turn-stopping"):
        scenario = attrs.evolve(COMMON, hooks=frozenset((hook,)))
        assert differential(scenario) == 0, hook


def test_a_retried_attempt_takes_the_general_path() -> None:
    # The failed first attempt is read by the lane (which hands its failure on);
    # the retry, asked of the runtime's retry listener, is not.
    scenario = Scenario(turns=((fail("SERVER"), reply("ok")),))
    assert differential(scenario) == 1


def test_a_chunk_of_another_kind_inside_a_text_run_is_taken_in_order() -> None:
    scenario = Scenario(turns=((_UNUSUAL[0],),), listeners=("record",))
    assert differential(scenario) == 1
    shown = observe(scenario).frames
    # Every chunk was shown once, in order.
    indexes = [f for f in shown if f.startswith("a0 StreamChunkFrame")]
    assert len(indexes) == 8
