"""``EventBus._target``: the listeners one scope admits, kept for a burst of emits.

A model attempt emits its frames through one target, so a frame costs one lookup
however many listeners other scopes registered; the target still follows every
change of the listener set, as ``emit`` does.
"""

from __future__ import annotations

import logging

import attrs
import pytest

from dsh_trio.events import EventBus

NAME = "agent/assistant-stream"


@attrs.frozen(eq=False)
class Payload:
    agent: object = None
    n: int = 0


class Node:
    def __init__(self, parent: Node | None = None) -> None:
        self.parent = parent


def tree_bus() -> EventBus:
    return EventBus(
        parent_of=lambda s: s.parent if isinstance(s, Node) else None,
    )


def test_a_target_admits_what_emit_admits() -> None:
    bus = tree_bus()
    root = Node()
    child = Node(root)
    sibling = Node(root)
    heard: list[str] = []
    bus.on(NAME, lambda p: heard.append("global"))
    bus.on(NAME, lambda p: heard.append("root"), scope=root)
    bus.on(NAME, lambda p: heard.append("child"), scope=child)
    bus.on(NAME, lambda p: heard.append("sibling"), scope=sibling)
    target = bus._target(NAME, child)
    assert len(target.current()) == 3
    target.emit(Payload(child))
    by_target = list(heard)
    heard.clear()
    bus.emit(NAME, Payload(child))
    assert by_target == heard == ["global", "root", "child"]


def test_a_target_follows_listeners_added_and_removed_between_emits() -> None:
    bus = tree_bus()
    scope = Node()
    heard: list[str] = []
    target = bus._target(NAME, scope)
    assert target.current() == ()
    dispose = bus.on(NAME, lambda p: heard.append("a"), scope=scope)
    if target.current():
        target.emit(Payload(scope, 1))
    bus.on(NAME, lambda p: heard.append("b"))
    bus.on(NAME, lambda p: heard.append("other"), scope=Node())
    if target.current():
        target.emit(Payload(scope, 2))
    dispose()
    if target.current():
        target.emit(Payload(scope, 3))
    assert heard == ["a", "a", "b", "b"]


def test_a_listener_added_inside_an_emit_hears_the_next_one() -> None:
    bus = tree_bus()
    scope = Node()
    heard: list[str] = []

    def first(p: Payload) -> None:
        heard.append(f"first {p.n}")
        if p.n == 1:
            bus.on(NAME, lambda q: heard.append(f"late {q.n}"), scope=scope)

    bus.on(NAME, first, scope=scope)
    target = bus._target(NAME, scope)
    for n in (1, 2):
        if target.current():
            target.emit(Payload(scope, n))
    assert heard == ["first 1", "first 2", "late 2"]


def test_a_failing_or_async_listener_is_logged_and_the_rest_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bus = tree_bus()
    scope = Node()
    heard: list[int] = []

    def boom(p: Payload) -> None:
        raise RuntimeError("boom")

    class Misfire:
        def __call__(self, p: Payload) -> object:
            async def later() -> None:
                pass

            return later()

    bus.on(NAME, boom, scope=scope)
    bus.on("custom", Misfire(), scope=scope)
    bus.on(NAME, lambda p: heard.append(p.n), scope=scope)
    with caplog.at_level(logging.ERROR, logger="dsh_trio"):
        bus._target(NAME, scope).emit(Payload(scope, 1))
        target = bus._target("custom", scope)
        target.emit(Payload(scope, 2))
    assert heard == [1]
    assert 'listener of event "agent/assistant-stream" raised' in caplog.text
    assert 'listener of emit event "custom" returned an awaitable' in caplog.text


def test_a_frame_costs_the_same_lookup_however_many_scopes_listen() -> None:
    """Many scoped listeners elsewhere do not reach a target's resolution."""
    bus = tree_bus()
    scope = Node()
    others = [Node() for _ in range(1_000)]
    for other in others:
        bus.on(NAME, lambda p: None, scope=other)
    mine: list[int] = []
    bus.on(NAME, lambda p: mine.append(p.n), scope=scope)
    calls = 0
    parent_of = bus._parent_of

    def counting(s: object) -> object | None:
        nonlocal calls
        calls += 1
        return parent_of(s)

    bus._parent_of = counting
    target = bus._target(NAME, scope)
    resolved = calls
    for n in range(100):
        if target.current():
            target.emit(Payload(scope, n))
    # The owner chain is read when the target resolves, not per emit.
    assert calls == resolved
    assert mine == list(range(100))
