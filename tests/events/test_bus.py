from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import attrs
import pytest
import trio
import trio.testing

from dsh_trio.events import EventBus


@attrs.frozen(eq=False)
class Payload:
    agent: object = None
    text: str = ""


class Node:
    """A scope with an owner, like an agent with its parent."""

    def __init__(self, name: str, parent: Node | None = None) -> None:
        self.name = name
        self.parent = parent

    def __repr__(self) -> str:
        return f"Node({self.name})"


def tree_bus() -> EventBus:
    def parent_of(scope: object) -> object | None:
        return scope.parent if isinstance(scope, Node) else None

    return EventBus(parent_of=parent_of)


# --------------------------------------------------------------------------- emit


def test_emit_calls_listeners_in_order_with_payload() -> None:
    bus = EventBus()
    seen: list[tuple[str, object]] = []
    bus.on("x", lambda p: seen.append(("a", p)))
    bus.on("x", lambda p: seen.append(("b", p)))
    bus.on("y", lambda p: seen.append(("other", p)))
    payload = Payload()
    bus.emit("x", payload)
    assert seen == [("a", payload), ("b", payload)]


def test_emit_contains_failures_and_logs_them(caplog: pytest.LogCaptureFixture) -> None:
    bus = EventBus()
    seen: list[str] = []

    def boom(_p: object) -> None:
        raise RuntimeError("listener exploded")

    bus.on("agent/status", lambda _p: seen.append("first"))
    bus.on("agent/status", boom)
    bus.on("agent/status", lambda _p: seen.append("last"))
    with caplog.at_level(logging.ERROR, logger="dsh_trio"):
        bus.emit("agent/status", Payload())
    assert seen == ["first", "last"]
    records = [r for r in caplog.records if r.name == "dsh_trio"]
    assert len(records) == 1
    assert "agent/status" in records[0].getMessage()
    assert records[0].exc_info is not None
    assert isinstance(records[0].exc_info[1], RuntimeError)


def test_emit_lets_keyboard_interrupt_through() -> None:
    bus = EventBus()

    def interrupt(_p: object) -> None:
        raise KeyboardInterrupt

    bus.on("x", interrupt)
    with pytest.raises(KeyboardInterrupt):
        bus.emit("x", Payload())


def test_emit_rejects_async_listener_without_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bus = EventBus()

    async def wrong(_p: object) -> None:
        raise AssertionError("never awaited")

    bus.on("x", wrong)
    with caplog.at_level(logging.ERROR, logger="dsh_trio"):
        bus.emit(
            "x", Payload()
        )  # filterwarnings=error: an unawaited coroutine would fail
    assert any("plain callables" in r.getMessage() for r in caplog.records)


def test_emit_uses_snapshot_taken_at_dispatch_start() -> None:
    bus = EventBus()
    seen: list[str] = []
    disposers: list[Callable[[], None]] = []

    def first(_p: object) -> None:
        seen.append("first")
        disposers[0]()  # remove the second listener mid-dispatch
        bus.on("x", lambda _p: seen.append("added"))

    disposers.append(bus.on("x", first))
    disposers.insert(0, bus.on("x", lambda _p: seen.append("second")))
    bus.emit("x", Payload())
    assert seen == ["first", "second"]
    seen.clear()
    bus.emit("x", Payload())
    assert seen == ["first", "added"]


def test_prepend_runs_first() -> None:
    bus = EventBus()
    seen: list[str] = []
    bus.on("x", lambda _p: seen.append("a"))
    bus.on("x", lambda _p: seen.append("b"))
    bus.on("x", lambda _p: seen.append("front"), prepend=True)
    bus.emit("x", Payload())
    assert seen == ["front", "a", "b"]


def test_disposer_is_idempotent_and_removes_only_its_registration() -> None:
    bus = EventBus()
    seen: list[str] = []

    def listener(_p: object) -> None:
        seen.append("hit")

    dispose_one = bus.on("x", listener)
    bus.on("x", listener)  # a second, independent registration of the same callable
    dispose_one()
    dispose_one()
    bus.emit("x", Payload())
    assert seen == ["hit"]


def test_has_listeners_tracks_registrations() -> None:
    bus = EventBus()
    assert not bus.has_listeners("x")
    dispose = bus.on("x", lambda _p: None)
    assert bus.has_listeners("x")
    assert not bus.has_listeners("y")
    dispose()
    assert not bus.has_listeners("x")


def test_on_rejects_bad_arguments() -> None:
    bus = EventBus()
    with pytest.raises(TypeError, match="not callable"):
        bus.on("x", 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="event name"):
        bus.on(b"x", lambda _p: None)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- scopes


def test_scope_filtering_flows_up_the_owner_chain() -> None:
    bus = tree_bus()
    root = Node("root")
    child = Node("child", root)
    grandchild = Node("grandchild", child)
    sibling = Node("sibling", root)
    heard: dict[str, list[str]] = {
        k: [] for k in ("root", "child", "sibling", "grandchild", "all")
    }
    for node in (root, child, sibling, grandchild):
        bus.on("x", lambda p, n=node.name: heard[n].append(p.agent.name), scope=node)
    bus.on("x", lambda p: heard["all"].append(p.agent.name if p.agent else "-"))

    bus.emit("x", Payload(agent=child))
    assert heard == {
        "root": ["child"],  # ancestor listener hears its descendant
        "child": ["child"],  # own
        "sibling": [],  # never a sibling
        "grandchild": [],  # never flows down
        "all": ["child"],
    }
    bus.emit("x", Payload(agent=grandchild))
    assert heard["root"] == ["child", "grandchild"]
    assert heard["child"] == ["child", "grandchild"]
    assert heard["grandchild"] == ["grandchild"]
    assert heard["sibling"] == []


def test_event_without_scope_reaches_only_unscoped_listeners() -> None:
    bus = tree_bus()
    scoped: list[object] = []
    unscoped: list[object] = []
    bus.on("session/event", scoped.append, scope=Node("a"))
    bus.on("session/event", unscoped.append)
    payload = Payload(agent=None)
    bus.emit("session/event", payload)
    assert scoped == []
    assert unscoped == [payload]


def test_explicit_scope_overrides_payload_agent() -> None:
    bus = tree_bus()
    a, b = Node("a"), Node("b")
    heard: list[str] = []
    bus.on("x", lambda _p: heard.append("a"), scope=a)
    bus.on("x", lambda _p: heard.append("b"), scope=b)
    bus.emit("x", Payload(agent=a), scope=b)
    assert heard == ["b"]
    bus.emit("x", Payload(agent=a), scope=None)
    assert heard == ["b"]


def test_scope_chain_cycle_does_not_hang() -> None:
    a = Node("a")
    b = Node("b", a)
    a.parent = b
    bus = tree_bus()
    heard: list[str] = []
    bus.on("x", lambda _p: heard.append("other"), scope=Node("c"))
    bus.on("x", lambda _p: heard.append("b"), scope=b)
    bus.emit("x", Payload(agent=a))
    assert heard == ["b"]


async def test_serial_and_waterfall_filter_scopes_too() -> None:
    bus = tree_bus()
    root, child, sibling = Node("root"), Node("r"), Node("s")
    child.parent = root
    sibling.parent = root

    async def bail_sibling(_p: object) -> str:
        return "sibling"

    async def wrap_sibling(_p: object, _next: Callable[[], Awaitable[str]]) -> str:
        return "sibling"

    bus.on("s", bail_sibling, scope=sibling)
    bus.on("w", wrap_sibling, scope=sibling)
    assert await bus.serial("s", Payload(agent=child)) is None
    assert await bus.waterfall("w", Payload(agent=child), "default") == "default"
    assert await bus.serial("s", Payload(agent=sibling)) == "sibling"
    assert await bus.waterfall("w", Payload(agent=sibling), "default") == "sibling"


# --------------------------------------------------------------------------- serial


async def test_serial_bails_on_first_meaningful_value() -> None:
    bus = EventBus()
    seen: list[str] = []

    def listener(name: str, result: object) -> Callable[[object], Awaitable[object]]:
        async def run(_p: object) -> object:
            seen.append(name)
            await trio.lowlevel.checkpoint()
            return result

        return run

    bus.on("x", listener("none", None))
    bus.on("x", listener("false", False))
    bus.on("x", listener("zero", 0))
    bus.on("x", listener("after", "unreached"))
    assert await bus.serial("x", Payload()) == 0
    assert seen == ["none", "false", "zero"]


async def test_serial_returns_none_when_nobody_bails() -> None:
    bus = EventBus()

    async def quiet(_p: object) -> None:
        return None

    bus.on("x", quiet)
    bus.on("x", quiet)
    assert await bus.serial("x", Payload()) is None


async def test_serial_failure_propagates_and_skips_the_rest() -> None:
    bus = EventBus()
    seen: list[str] = []

    async def boom(_p: object) -> None:
        seen.append("boom")
        raise ValueError("veto")

    async def later(_p: object) -> None:
        seen.append("later")

    bus.on("agent/created", boom)
    bus.on("agent/created", later)
    with pytest.raises(ValueError, match="veto"):
        await bus.serial("agent/created", Payload())
    assert seen == ["boom"]


async def test_serial_and_waterfall_checkpoint_without_listeners() -> None:
    bus = EventBus()
    with trio.CancelScope() as scope:
        scope.cancel()
        with pytest.raises(trio.Cancelled):
            await bus.serial("x", Payload())
    with trio.CancelScope() as scope:
        scope.cancel()
        with pytest.raises(trio.Cancelled):
            await bus.waterfall("x", Payload(), 1)
    with trio.testing.assert_checkpoints():
        await bus.serial("x", Payload())
    with trio.testing.assert_checkpoints():
        await bus.waterfall("x", Payload(), 1)


async def test_serial_checkpoints_with_listeners_that_do_not() -> None:
    bus = EventBus()

    async def instant(_p: object) -> None:
        return None

    bus.on("x", instant)
    with trio.testing.assert_checkpoints():
        await bus.serial("x", Payload())


# --------------------------------------------------------------------------- waterfall


async def test_waterfall_default_when_no_listeners() -> None:
    bus = EventBus()
    sentinel = object()
    assert await bus.waterfall("x", Payload(), sentinel) is sentinel


async def test_waterfall_order_first_registered_is_outermost() -> None:
    bus = EventBus()
    trace: list[str] = []

    def middleware(name: str) -> Callable[..., Awaitable[str]]:
        async def run(_p: object, next_: Callable[[], Awaitable[str]]) -> str:
            trace.append(f"enter {name}")
            result = await next_()
            trace.append(f"leave {name}")
            return f"{name}({result})"

        return run

    bus.on("x", middleware("a"))
    bus.on("x", middleware("b"))
    bus.on("x", middleware("front"), prepend=True)
    assert await bus.waterfall("x", Payload(), "default") == "front(a(b(default)))"
    assert trace == [
        "enter front",
        "enter a",
        "enter b",
        "leave b",
        "leave a",
        "leave front",
    ]


async def test_waterfall_short_circuits_when_next_is_not_called() -> None:
    bus = EventBus()
    seen: list[str] = []

    async def owner(_p: object, _next: Callable[[], Awaitable[str]]) -> str:
        seen.append("owner")
        return "owned"

    async def inner(_p: object, next_: Callable[[], Awaitable[str]]) -> str:
        seen.append("inner")
        return await next_()

    bus.on("x", owner)
    bus.on("x", inner)
    assert await bus.waterfall("x", Payload(), "default") == "owned"
    assert seen == ["owner"]


async def test_waterfall_next_shares_one_cursor() -> None:
    bus = EventBus()
    seen: list[str] = []

    async def twice(_p: object, next_: Callable[[], Awaitable[str]]) -> str:
        first = await next_()
        second = await next_()
        return f"{first}+{second}"

    async def b(_p: object, _next: Callable[[], Awaitable[str]]) -> str:
        seen.append("b")
        return "b"

    async def c(_p: object, _next: Callable[[], Awaitable[str]]) -> str:
        seen.append("c")
        return "c"

    bus.on("x", twice)
    bus.on("x", b)
    bus.on("x", c)
    # The second next() advances past b to c instead of re-running b.
    assert await bus.waterfall("x", Payload(), "default") == "b+c"
    assert seen == ["b", "c"]


async def test_waterfall_next_past_the_end_returns_default() -> None:
    bus = EventBus()

    async def greedy(_p: object, next_: Callable[[], Awaitable[int]]) -> int:
        return await next_() + await next_()

    bus.on("x", greedy)
    assert await bus.waterfall("x", Payload(), 21) == 42


async def test_waterfall_failure_propagates() -> None:
    bus = EventBus()
    seen: list[str] = []

    async def outer(_p: object, next_: Callable[[], Awaitable[str]]) -> str:
        seen.append("outer")
        return await next_()

    async def failing(_p: object, _next: Callable[[], Awaitable[str]]) -> str:
        raise LookupError("no route")

    async def unreached(_p: object, next_: Callable[[], Awaitable[str]]) -> str:
        seen.append("unreached")
        return await next_()

    bus.on("agent/request", outer)
    bus.on("agent/request", failing)
    bus.on("agent/request", unreached)
    with pytest.raises(LookupError, match="no route"):
        await bus.waterfall("agent/request", Payload(), "default")
    assert seen == ["outer"]


async def test_waterfall_payload_reaches_every_listener() -> None:
    bus = EventBus()
    got: list[object] = []

    async def record(p: object, next_: Callable[[], Awaitable[None]]) -> None:
        got.append(p)
        return await next_()

    bus.on("x", record)
    bus.on("x", record)
    payload = Payload(text="p")
    await bus.waterfall("x", payload, None)
    assert got == [payload, payload]


async def test_waterfall_listener_cancellation_propagates() -> None:
    bus = EventBus()
    entered = trio.Event()

    async def hang(_p: object, _next: Callable[[], Awaitable[None]]) -> None:
        entered.set()
        await trio.sleep_forever()

    bus.on("x", hang)
    async with trio.open_nursery() as nursery:
        scope = trio.CancelScope()

        async def run() -> None:
            with scope:
                await bus.waterfall("x", Payload(), None)
                raise AssertionError("unreachable")

        nursery.start_soon(run)
        await entered.wait()
        scope.cancel()
    assert scope.cancelled_caught


# --------------------------------------------------------------------------- async emit listeners


def test_async_listener_for_a_runtime_emit_event_is_refused_at_registration() -> None:
    bus = EventBus()

    async def on_stream(_p: object) -> None:
        raise AssertionError("never called")

    class AsyncCallable:
        async def __call__(self, _p: object) -> None:
            raise AssertionError("never called")

    for listener in (on_stream, AsyncCallable()):
        with pytest.raises(TypeError, match=r"emit event.*plain") as info:
            bus.on("agent/assistant-stream", listener)
        assert "memory channel" in str(info.value)  # says what to do instead
    assert not bus.has_listeners("agent/assistant-stream")
    bus.on("agent/pre-step", on_stream)  # a waterfall event takes async listeners


# --------------------------------------------------------------------------- resolution cache


def test_scoped_resolution_follows_owner_changes_and_registrations() -> None:
    bus = tree_bus()
    root, child = Node("root"), Node("child")
    heard: list[str] = []
    bus.on("x", lambda _p: heard.append("root"), scope=root)
    bus.emit("x", Payload(agent=child))
    assert heard == []
    child.parent = root  # the owner chain changed after a resolution was kept
    bus.emit("x", Payload(agent=child))
    assert heard == ["root"]
    dispose = bus.on("x", lambda _p: heard.append("child"), scope=child)
    bus.emit("x", Payload(agent=child))
    assert heard == ["root", "root", "child"]
    dispose()
    child.parent = None
    bus.emit("x", Payload(agent=child))
    assert heard == ["root", "root", "child"]


def test_many_scoped_listeners_each_hear_only_their_scope() -> None:
    bus = tree_bus()
    nodes = [Node(str(k)) for k in range(200)]
    heard: list[str] = []
    for node in nodes:
        bus.on("x", lambda _p, n=node.name: heard.append(n), scope=node)
    for node in nodes:
        bus.emit("x", Payload(agent=node))
        bus.emit("x", Payload(agent=node))
    assert heard == [n.name for n in nodes for _ in range(2)]
