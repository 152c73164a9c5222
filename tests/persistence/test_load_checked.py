"""The log reader's checked events: restore skips only what the decoder checked.

The reader decodes event data through generated decoders that also apply the
checkers ``Session.restore`` runs; restore then skips the second check for those
events only. Data that the converter takes but a checker refuses (a lone surrogate
escaped in a text, an empty message id) is decoded the general way, marked
unchecked, and still refused at restore with the log left as it is.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from dsh_trio import user_message
from dsh_trio.errors import SessionCorruptError
from dsh_trio.persistence._jsonl import JsonlPersistence
from dsh_trio.persistence._jsonl_load import scan_log
from dsh_trio.persistence._persistence import load_session
from dsh_trio.persistence._recorder import persist_new_session
from dsh_trio.session import Session
from dsh_trio.session._compact import DecodedEvents
from dsh_trio.values import (
    Completed,
    SessionEvent,
    StepEnd,
    StepStart,
    TurnEnd,
    TurnStart,
    UserMessage,
)

from ..support import ticking_clock


def _session() -> Session:
    s = Session.create("checked", cwd="/w/p", clock=ticking_clock())
    for turn in (1, 2):
        s.append("turn/start", TurnStart(turn))
        s.append("step/start", StepStart(turn, 1))
        s.append(
            "user/message",
            user_message(f"hi {turn}", id=f"u{turn}"),
            surface_op="append",
        )
        s.append("step/end", StepEnd(turn, 1))
        s.append("turn/end", TurnEnd(turn, Completed()))
    return s


async def _store(root: Path, session: Session) -> Path:
    writer = await persist_new_session(JsonlPersistence(root), session)
    await writer.close()
    return _log_of(root)


def _log_of(root: Path) -> Path:
    (path,) = root.rglob("session.v3.jsonl")
    return path


def _rewrite_line(path: Path, seq: int, edit: Any) -> bytes:
    lines = path.read_bytes().split(b"\n")
    obj = json.loads(lines[seq + 1])
    edit(obj)
    lines[seq + 1] = json.dumps(obj, separators=(",", ":")).encode("ascii")
    data = b"\n".join(lines)
    path.write_bytes(data)
    return data


def _scan(path: Path) -> DecodedEvents:
    fd = os.open(path, os.O_RDONLY)
    try:
        events = scan_log(fd, str(path), None).events
    finally:
        os.close(fd)
    assert isinstance(events, DecodedEvents)
    return events


async def test_clean_log_is_decoded_checked_and_restores_equal(tmp_path: Path) -> None:
    original = _session()
    path = await _store(tmp_path, original)
    events = _scan(path)
    assert events.unchecked == set()
    restored = Session.restore(original.header, events)
    plain = Session.restore(original.header, list(events))
    assert list(restored.events) == list(original.events) == list(plain.events)
    assert restored.surface == original.surface
    assert list(restored.derive_messages()) == list(original.derive_messages())


@pytest.mark.parametrize(
    ("edit", "what"),
    [
        (
            lambda o: o["data"]["content"][0].__setitem__("text", "\ud800"),
            "lone surrogate",
        ),
        (lambda o: o["data"].__setitem__("id", ""), "non-empty message id"),
    ],
)
async def test_data_the_checkers_refuse_is_still_refused(
    tmp_path: Path, edit: Any, what: str
) -> None:
    path = await _store(tmp_path, _session())
    before = _rewrite_line(path, 7, edit)  # the second user/message
    events = _scan(path)
    assert events.unchecked == {7}
    with pytest.raises(SessionCorruptError, match=what) as info:
        await load_session(JsonlPersistence(tmp_path), "checked")
    assert info.value.seq == 7
    assert path.read_bytes() == before


def test_unchecked_positions_of_a_decoded_list_are_checked_by_restore() -> None:
    # A DecodedEvents whose position is marked unchecked gets the full check, so a
    # bad value placed there is refused; a plain list is always checked.
    good = list(_session().events)
    bad_message = UserMessage(id="", content=())  # type: ignore[arg-type]
    bad = SessionEvent(
        seq=2, time=1, type="user/message", data=bad_message, surface_op="append"
    )
    events = DecodedEvents()
    events.extend([*good[:2], bad, *good[3:]])
    events.unchecked.add(2)
    header = _session().header
    with pytest.raises(SessionCorruptError, match="non-empty message id"):
        Session.restore(header, events)
    with pytest.raises(SessionCorruptError, match="non-empty message id"):
        Session.restore(header, list(events))
