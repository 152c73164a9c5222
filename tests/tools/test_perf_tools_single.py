"""The shortcuts of the one-call tool round give what the general paths give.

The short decode of small ASCII argument objects is compared with the general
decode on generated text and shown to be taken for the common case; the cancel
check by task status is compared with the effective-deadline check.
"""

from __future__ import annotations

import json
import math

import pytest
import trio
from hypothesis import HealthCheck, given, settings, strategies as st

from dsh_trio.tools import _arguments, _scheduler

from .test_fast_paths import json_texts

FAST = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

short_objects = st.one_of(
    json_texts,
    st.dictionaries(
        st.text(alphabet="abx", max_size=3),
        st.one_of(st.integers(), st.floats(), st.text(max_size=4), st.none()),
        max_size=3,
    ).map(json.dumps),
    st.text(alphabet='{}[]":,0123456789.eE-+ abx\\', max_size=20).map(
        lambda t: "{" + t
    ),
)


def _result(raw: str) -> tuple[str, object]:
    try:
        return "ok", _arguments.parse_arguments(raw, "t")
    except Exception as exc:  # the comparison is the point
        return "error", (type(exc), str(exc))


@FAST
@given(raw=short_objects)
def test_the_short_decode_matches_the_general_decode(
    raw: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = _result(raw)
    with monkeypatch.context() as m:
        m.setattr(_arguments, "_decode_short", lambda raw: _arguments._UNDECIDED)
        general = _result(raw)
    assert fast == general


def test_the_short_decode_is_taken_for_a_plain_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(raw: str) -> object:
        raise AssertionError("the general decoder ran")

    monkeypatch.setattr(_arguments, "_decode", refuse)
    assert _arguments.parse_arguments('{"x": 1}', "t") == {"x": 1}
    assert _arguments.parse_arguments('{"a": "b", "c": [1, 2.5]}', "t") == {
        "a": "b",
        "c": [1, 2.5],
    }


async def test_the_status_cancel_check_matches_the_deadline_check() -> None:
    def both() -> tuple[bool, bool]:
        return (
            _scheduler._scope_cancelled(),
            trio.current_effective_deadline() == -math.inf,
        )

    assert both() == (False, False)
    with trio.CancelScope() as outer:  # noqa: ASYNC100  # read synchronously
        assert both() == (False, False)
        outer.cancel()
        assert both() == (True, True)
        with trio.CancelScope(shield=True):  # noqa: ASYNC100  # read synchronously
            assert both() == (False, False)
        with trio.CancelScope():  # noqa: ASYNC100  # read synchronously
            assert both() == (True, True)
