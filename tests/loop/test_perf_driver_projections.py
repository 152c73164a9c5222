"""The prompt projections skip the new surface nodes while the session's prompt mark
says no system node and no sourced user message came since their last look."""

from __future__ import annotations

from typing import Any

import pytest

import dsh_trio as dsh
from dsh_trio import new_message_id
from dsh_trio.loop._context import RuntimeContextProjection
from dsh_trio.loop._prompt import SystemPromptProjection
from dsh_trio.session import Session
from dsh_trio.values import (
    SYSTEM_PROMPT_PLUGIN,
    PluginSource,
    UserMessage,
)


def _forbid_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    def events(self: Session) -> Any:
        raise AssertionError("the projection read the log")

    monkeypatch.setattr(Session, "events", property(events))


def test_plain_appends_are_not_read_by_either_projection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    session = Session.create()
    prompt = SystemPromptProjection(session)
    contexts = RuntimeContextProjection(session)
    prompt.project("p", turn=1, step=1)
    assert contexts.retained_text is None
    prompt.project("p", turn=1, step=1)
    for _ in range(3):
        session.append("user/message", dsh.user_message("hi"), surface_op="append")
    _forbid_reads(monkeypatch)
    prompt.project("p", turn=2, step=1)
    assert contexts.project(()) is None
    assert session._prompt_seq == 0


def test_a_sourced_user_message_moves_the_mark() -> None:
    session = Session.create()
    contexts = RuntimeContextProjection(session)
    assert contexts.retained_text is None
    owned = UserMessage(
        id=new_message_id(),
        content=(dsh.TextBlock("snap"),),
        source=PluginSource(SYSTEM_PROMPT_PLUGIN, form="snapshot"),
    )
    session.append("user/message", dsh.user_message("hi"), surface_op="append")
    assert session._prompt_seq == -1
    session.append("user/message", owned, surface_op="append")
    assert session._prompt_seq == 1
    assert contexts.retained_text == "snap"
