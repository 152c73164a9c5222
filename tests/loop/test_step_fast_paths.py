"""The per-step projections follow the session through its surface: with no replace op
since the last look, only the surface nodes appended since are read, and the system
prompt is not re-checked while its nodes and text are unchanged. Over random histories
(appends, replacements, events off the surface) each must give exactly what the general
path gives: a scan of every new event, a projection rebuilt from the surface."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings, strategies as st

import dsh_trio as dsh
from dsh_trio import new_message_id
from dsh_trio.loop._context import (
    RuntimeContextProjection,
    join_context_sections,
    render_context_sections,
)
from dsh_trio.loop._prompt import SystemPromptProjection
from dsh_trio.session import Session
from dsh_trio.values import (
    SYSTEM_PROMPT_PLUGIN,
    ContextSection,
    PluginSource,
    SurfaceReplace,
    SystemMessage,
    SystemMessageData,
    TextBlock,
    UserMessage,
)

TEXTS = ("", "alpha", "beta")

# A message: ("system", text), ("owned", text or None for two blocks), ("user", text).
messages = st.one_of(
    st.tuples(st.just("system"), st.sampled_from(TEXTS)),
    st.tuples(st.just("owned"), st.sampled_from((*TEXTS, None))),
    st.tuples(st.just("user"), st.sampled_from(TEXTS[1:])),
)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), messages),
        st.tuples(st.just("replace"), st.tuples(messages, st.integers(0, 99))),
        st.tuples(st.just("note"), st.none()),
        st.tuples(st.just("look"), st.sampled_from(TEXTS)),
    ),
    max_size=40,
)


def _message(kind: str, text: str | None) -> tuple[str, Any]:
    if kind == "system":
        content = (TextBlock(text),) if text else ()
        message = SystemMessage(id=new_message_id(), content=content)
        return "system/message", SystemMessageData(turn=1, step=1, message=message)
    if kind == "owned":
        blocks = (
            (TextBlock(text),) if text is not None else (TextBlock("a"), TextBlock("b"))
        )
        source = PluginSource(SYSTEM_PROMPT_PLUGIN, form="snapshot")
        return "user/message", UserMessage(
            id=new_message_id(), content=blocks, source=source
        )
    assert text is not None
    return "user/message", dsh.user_message(text)


def _apply(session: Session, op: str, arg: Any) -> None:
    """Append what ``op`` says (a look appends nothing here)."""
    if op == "note":
        session.append("x/note", {"n": session.next_seq})
    elif op == "append":
        session.append(*_message(*arg), surface_op="append")
    elif op == "replace":
        (kind, text), pick = arg
        nodes = session.surface
        if not nodes:
            return
        i = pick % len(nodes)
        j = i + (pick // len(nodes)) % min(3, len(nodes) - i)
        session.append(
            *_message(kind, text),
            surface_op=SurfaceReplace(nodes[i], nodes[j]),
            source_event_seqs=nodes[i : j + 1],
        )


class _GeneralContexts(RuntimeContextProjection):
    """The general path: every event since the last look is scanned."""

    __slots__ = ()

    def _sync(self) -> None:
        if self._next_seq < 0:
            self._restore()
            return
        end = self._session.next_seq
        self._retained = self._scan(self._retained, end)
        self._next_seq = end


def _shape(message: UserMessage | None) -> object:
    if message is None:
        return None
    return message.content, message.source


@settings(max_examples=300, deadline=None, derandomize=True)
@given(script=operations)
def test_the_context_projection_follows_the_surface_like_a_full_scan(
    script: list[tuple[str, Any]],
) -> None:
    session = Session.create()
    fast = RuntimeContextProjection(session)
    general = _GeneralContexts(session)
    for op, arg in script:
        _apply(session, op, arg)
        if op == "look":
            assert fast.retained_text == general.retained_text
            assert fast._retained == general._retained
            for sections in ((), (ContextSection("c", arg),) if arg else ()):
                assert _shape(fast.project(sections)) == _shape(
                    general.project(sections)
                )


def _trail(session: Session, start: int) -> list[object]:
    """The events from ``start`` on, without the fields that differ by construction."""
    trail: list[object] = []
    for event in session.events[start:]:
        data: object = event.data
        if isinstance(data, SystemMessageData):
            data = (data.turn, data.step, data.message.content, data.message.source)
        elif isinstance(data, UserMessage):
            data = (data.content, data.source)
        trail.append(
            (event.seq, event.type, data, event.surface_op, event.source_event_seqs)
        )
    return trail


@settings(max_examples=300, deadline=None, derandomize=True)
@given(script=operations)
def test_the_system_prompt_projection_appends_what_a_rebuilt_one_appends(
    script: list[tuple[str, Any]],
) -> None:
    fast_session, general_session = Session.create(), Session.create()
    fast = SystemPromptProjection(fast_session)
    for op, arg in script:
        for session in (fast_session, general_session):
            _apply(session, op, arg)
        if op == "look":
            start = fast_session.next_seq
            fast.project(arg, turn=2, step=3)
            SystemPromptProjection(general_session).project(arg, turn=2, step=3)
            assert _trail(fast_session, start) == _trail(general_session, start)
            assert fast._system_nodes() == [
                s
                for s in fast_session.surface
                if fast_session.events[s].type == "system/message"
            ]


def test_an_unchanged_prompt_is_not_checked_again_until_its_nodes_change() -> None:
    session = Session.create()
    projection = SystemPromptProjection(session)
    projection.project("p", turn=1, step=1)  # appends the head node
    projection.project("p", turn=1, step=1)  # checks it
    assert projection._verified == "p"
    session.append("user/message", dsh.user_message("hi"), surface_op="append")
    projection.project("p", turn=1, step=2)  # no system node came: nothing to check
    assert session.next_seq == 2
    session.append(*_message("system", "other"), surface_op="append")
    projection.project("p", turn=1, step=3)  # a new system node: normalised again
    assert projection._verified == "p"
    last = session.events[-1]
    assert last.surface_op == SurfaceReplace(2, 2)
    assert isinstance(last.data, SystemMessageData)
    assert last.data.message.content == ()


def test_no_context_renders_nothing_without_building_a_snapshot() -> None:
    assert join_context_sections(()) == ""

    class Services:
        def __init__(self, composition: object) -> None:
            self.prompt = dsh.SystemPrompt()
            self.composition = composition

    class Composition:
        def __init__(self, extra: list[tuple[str, Any]]) -> None:
            self.extra = extra

        def contexts_for(self, agent: object) -> list[tuple[str, Any]]:
            return self.extra

    agent = object()
    assert render_context_sections(Services(None), agent) == ()  # type: ignore[arg-type]
    assert render_context_sections(Services(Composition([])), agent) == ()  # type: ignore[arg-type]
    services = Services(Composition([("b", lambda a: "two")]))
    services.prompt.context("a", lambda a: "one")
    services.prompt.context("b", lambda a: "first")
    assert render_context_sections(services, agent) == (  # type: ignore[arg-type]
        ContextSection("a", "one"),
        ContextSection("b", "two"),
    )
