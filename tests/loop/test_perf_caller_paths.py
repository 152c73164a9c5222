"""The caller side of a turn takes direct paths; each must match the general one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings, strategies as st

import dsh_trio as dsh
from dsh_trio.loop import _inbox, _work
from dsh_trio.loop._inbox import Inbox
from dsh_trio.session import Session

from .conftest import OPTIONS
from .test_inbox_fast_paths import TARGETS, _general_insert, _outcome

_FINISH = (
    dsh.BlockStart(0, "text"),
    dsh.BlockEnd(0, dsh.TextBlock("ok")),
    dsh.Usage(input_tokens=1, output_tokens=1),
    dsh.Finish(dsh.FinishReason("stop")),
)


class _TaskNames:
    """A model that records the name of the task its stream runs in."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def stream(self, request: Any) -> AsyncIterator[Any]:
        return self._stream()

    async def _stream(self) -> AsyncIterator[Any]:
        self.names.append(trio.lowlevel.current_task().name)
        await trio.lowlevel.checkpoint()
        for chunk in _FINISH:
            yield chunk


async def test_the_driver_task_has_the_name_trio_derives_from_drive() -> None:
    model = _TaskNames()
    async with dsh.open_runtime(models={"scripted": model}) as runtime:
        agent = (await runtime.agents.create(options=OPTIONS)).agent
        agent.followup(dsh.user_message("one"))
        await agent.when_idle()
        agent.followup(dsh.user_message("two"))
        await agent.when_idle()
    drive = _work.AgentWork.drive
    assert model.names == [f"{drive.__module__}.{drive.__qualname__}"] * 2
    assert model.names[0] == _work._DRIVER_TASK


async def test_spawn_without_a_name_lets_trio_name_the_task() -> None:
    names: list[str] = []

    async def job() -> None:
        names.append(trio.lowlevel.current_task().name)
        await trio.lowlevel.checkpoint()

    async with dsh.open_runtime() as runtime:
        runtime._spawn(job)
        runtime._spawn(job, name="given")
        await trio.testing.wait_all_tasks_blocked()
    assert sorted(names) == sorted([f"{job.__module__}.{job.__qualname__}", "given"])


# ------------------------------------------------------------------ the inbox's plain messages


class _Str(str):
    __slots__ = ()


class _Block(dsh.TextBlock):
    pass


class _Source(dsh.UserSource):
    pass


def _raw(cls: type, **fields: Any) -> Any:
    """An instance built field by field, past the constructor (as a careless caller can)."""
    value: Any = object.__new__(cls)
    for name, field in fields.items():
        object.__setattr__(value, name, field)
    return value


def _message(message_id: Any, content: Any, source: Any = None) -> Any:
    return _raw(
        dsh.UserMessage,
        id=message_id,
        content=content,
        source=dsh.UserSource() if source is None else source,
    )


_TEXTS = st.one_of(
    st.sampled_from(["", "hi", "h\u00e9", "\ud800", "\U0001f600"]).map(
        lambda t: dsh.TextBlock(t)
    ),
    st.builds(lambda: _raw(dsh.TextBlock, text=7)),
    st.builds(lambda: _raw(dsh.TextBlock, text=_Str("x"))),
    st.builds(lambda: _Block("x")),
    st.just(dsh.ReasoningBlock("r")),
    st.just("not a block"),
)
_IDS = st.sampled_from(["m", "", "m\u00e9", "\ud800", 5, None, _Str("m")])
_SOURCES = st.sampled_from(
    [None, _Source(), dsh.PluginSource("p"), dsh.ModelSource("p", "m"), "user"]
)
_CONTENTS = st.one_of(
    st.lists(_TEXTS, max_size=2).map(tuple),
    st.lists(_TEXTS, min_size=1, max_size=1),
)


@settings(max_examples=400, deadline=None)
@given(_IDS, _CONTENTS, _SOURCES)
def test_a_plain_message_is_one_its_checker_accepts(
    message_id: Any, content: Any, source: Any
) -> None:
    message = _message(message_id, content, source)
    if _inbox._plain_text(message):
        _inbox._check_user_message(message)  # never raises


@settings(max_examples=300, deadline=None)
@given(_IDS, _CONTENTS, _SOURCES, st.sampled_from(TARGETS))
def test_insert_refuses_and_accepts_as_the_general_splice(
    message_id: Any, content: Any, source: Any, target: dsh.InboxTarget
) -> None:
    message = _message(message_id, content, source)
    fast = Inbox(Session.create("fast"))
    general = Inbox(Session.create("general"))
    got = _outcome(fast.insert, target, message)
    want = _outcome(_general_insert, general, target, message)
    assert got == want
    assert fast._list(target) == general._list(target)
    assert [(e.type, e.data) for e in fast._session.events] == [
        (e.type, e.data) for e in general._session.events
    ]


def test_user_message_text_takes_the_plain_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(message: Any) -> None:
        raise AssertionError("the checker ran for a plain message")

    monkeypatch.setattr(_inbox, "_check_user_message", refuse)
    inbox = Inbox(Session.create("s"))
    for target in TARGETS:
        inbox.insert(target, dsh.user_message("hello"))
        inbox.insert(target, dsh.user_message("again", id=f"given-{target}"))
    assert [len(inbox.next_turn), len(inbox.next_step)] == [2, 2]
    with pytest.raises(AssertionError, match="the checker ran"):
        inbox.insert(TARGETS[0], dsh.user_message("h\u00e9llo"))  # not ASCII
