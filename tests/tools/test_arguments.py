"""Decoding a call's raw arguments: limits, hostile input, and never a crash.

Whatever text a model sends as arguments, decoding and checking it either gives the
keyword arguments of a valid call or raises :class:`ToolArgumentsError` with a short
message; through the scheduler that is an ``INVALID_ARGS`` result, never an
exception out of the pipeline.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any, cast

import attrs
import pytest
import trio
from hypothesis import HealthCheck, given, settings, strategies as st

from dsh_trio.errors import ToolArgumentsError
from dsh_trio.tools import Tool, ToolContext, _arguments, tool
from dsh_trio.tools._arguments import (
    MAX_ARGUMENT_DEPTH,
    MAX_INTEGER_DIGITS,
    ArgumentsSpec,
    nesting_depth,
    parse_arguments,
)
from dsh_trio.tools._specs import convert_fields
from dsh_trio.values import ToolCallBlock, ToolErrorInfo, ToolResultData

from ..support import outcome_of
from .conftest import call, drive, make_agent, registry_of, results, text_of

MESSAGE_LIMIT = 600  # no refusal message echoes the input


class Refused(Exception):
    pass


@attrs.frozen
class Checked:
    n: int = attrs.field()

    @n.validator
    def _check(self, attribute: object, value: int) -> None:
        if value < 0:
            raise Refused(f"n must be >= 0, got {value}")


@tool
async def sample(
    ctx: ToolContext,
    s: str = "",
    i: int = 0,
    f: float = 0.0,
    items: list = [],  # type: ignore[type-arg]  # noqa: B006  # never mutated
    table: dict[str, int] | None = None,
    checked: Checked | None = None,
) -> str:
    return "ran"


def convert(raw: str, t: Tool = sample) -> dict[str, object]:
    return t._arguments.convert(parse_arguments(raw, t.name), t.name)


def refusal(raw: Any, t: Tool = sample) -> str:
    with pytest.raises(ToolArgumentsError) as info:
        convert(raw, t)
    message = str(info.value)
    assert len(message) < MESSAGE_LIMIT
    assert info.value.tool == t.name
    return message


def nested(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


# --------------------------------------------------------------------------- limits


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (nested(100_000, ""), "more than 64 levels deep"),
        ('{"a":' * 100_000 + "1" + "}" * 100_000, "more than 64 levels deep"),
        ("[{" * 50_000, "more than 64 levels deep"),  # unbalanced, still measured
        ('{"items": ' + nested(MAX_ARGUMENT_DEPTH) + "}", "more than 64 levels deep"),
        ('{"f": 1e999}', "the number 1e999 is out of range"),
        ('{"f": -1e999}', "the number -1e999 is out of range"),
        ('{"i": ' + "9" * 5000 + "}", "an integer with 5000 digits is too large"),
        ('{"i": -' + "9" * 5000 + "}", "an integer with 5000 digits is too large"),
        ('{"f": NaN}', "NaN is not valid JSON"),
        ('{"f": -Infinity}', "-Infinity is not valid JSON"),
        ('{"s": "\\ud800"}', "not part of a surrogate pair"),
        ('{"s": "a\\uDFFFb"}', "not part of a surrogate pair"),
        ('{"\\ud800": 1}', "not part of a surrogate pair"),
        ("x" * 1_000_000, "arguments are not valid JSON: Expecting value"),
        ('{"s": "' + "x" * 1_000_000, "Unterminated string"),
        ('{"' + "k" * 1_000_000 + '": 1}', "unexpected argument 'kkkk"),
        ('{"table": {"' + "k" * 1_000_000 + '": "x"}}', "expected integer"),
        ("[1, 2]", "arguments must be a JSON object, got array"),
        ("null", "arguments must be a JSON object, got null"),
        ('{"checked": {"n": -1}}', "is not a valid Checked: n must be >= 0"),
    ],
    ids=lambda v: v[:24] if isinstance(v, str) else v,
)
def test_hostile_arguments_are_refused_with_a_short_message(
    raw: str, message: str
) -> None:
    assert message in refusal(raw)


def test_arguments_that_are_not_text_are_refused() -> None:
    assert "arguments must be JSON text, got dict" in refusal({"s": "x"})


def test_what_stays_within_the_limits_is_accepted() -> None:
    deepest = nested(MAX_ARGUMENT_DEPTH - 1)
    assert convert('{"items": ' + deepest + "}")["items"] == json.loads(deepest)
    # brackets inside strings do not nest, however many
    brackets = "[{" * 100_000
    assert convert(json.dumps({"s": brackets})) == {"s": brackets}
    assert convert(json.dumps({"s": '\\"[' * 1000})) == {"s": '\\"[' * 1000}
    assert convert('{"i": ' + "9" * MAX_INTEGER_DIGITS + "}")["i"] == int(
        "9" * MAX_INTEGER_DIGITS
    )
    assert convert('{"f": 1e308}') == {"f": 1e308}
    # a surrogate pair escape is one character
    assert convert('{"s": "\\ud83d\\ude00"}') == {"s": "\U0001f600"}
    assert convert('{"checked": {"n": 2}}') == {"checked": Checked(2)}


def test_the_digit_limit_holds_even_if_the_interpreter_lifts_its_own() -> None:
    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        assert "too large" in refusal('{"i": ' + "1" * 50_000 + "}")
    finally:
        sys.set_int_max_str_digits(before)


def test_a_recursion_error_from_the_decoder_is_still_a_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The depth scan keeps deep input from the decoder; without it, the decoder's
    # own RecursionError is caught.
    monkeypatch.setattr(_arguments, "nesting_depth", lambda raw, limit: 0)
    assert "nested too deeply to decode" in refusal(nested(100_000, ""))


# --------------------------------------------------------------------------- the depth scan


def test_nesting_depth_counts_past_any_recursion_limit() -> None:
    assert nesting_depth(nested(1_000_000, ""), 64) == 1_000_000
    assert nesting_depth('{"a": [' + '"]]]]"' * 100 + "]}", 0) == 2
    assert nesting_depth("[" * 10, 64) == 0  # few brackets: answered without a scan
    assert nesting_depth("", 0) == 0
    assert nesting_depth("]]]]", 0) == 0


def _depth(value: object) -> int:
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ab\u00e9'),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.text(alphabet='[]{}"\\k', max_size=3), children, max_size=3
        )
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_nesting_depth_agrees_with_the_decoded_value(value: object) -> None:
    raw = json.dumps(value, ensure_ascii=bool(len(repr(value)) % 2))
    assert nesting_depth(raw, 0) == _depth(value)


# --------------------------------------------------------------------------- never a crash


def _garbage_from(raw: str, edits: list[tuple[int, str]]) -> str:
    for at, text in edits:
        at %= len(raw) + 1
        raw = raw[:at] + text + raw[at + 1 :]
    return raw


junk = st.text(alphabet=st.sampled_from('[]{}",:\\u0123456789.eE-+ tnfalsru\ud800\x00'))


@st.composite
def argument_texts(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["text", "junk", "json", "mangled", "deep"]))
    if kind == "text":
        return draw(st.text())
    if kind == "junk":
        return draw(junk)
    value = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "s": st.text() | st.integers(),
                "i": st.integers() | st.floats() | st.text(max_size=3),
                "f": st.floats(allow_nan=False) | st.integers() | st.booleans(),
                "items": st.lists(st.integers() | json_values, max_size=3),
                "table": st.dictionaries(st.text(max_size=3), st.integers(), max_size=3)
                | st.none(),
                "checked": st.fixed_dictionaries({"n": st.integers()}),
                "extra": st.none(),
            },
        )
    )
    raw = json.dumps(value)
    if kind == "json":
        return raw
    if kind == "mangled":
        return _garbage_from(
            raw, draw(st.lists(st.tuples(st.integers(0), junk), max_size=4))
        )
    depth = draw(st.integers(MAX_ARGUMENT_DEPTH - 2, 200_000))
    opener = draw(st.sampled_from(["[", '{"a":', "[{", '{"items": [']))
    return opener * depth + draw(junk) + draw(st.sampled_from(["]", "}", ""])) * depth


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(argument_texts())
def test_any_argument_text_is_a_valid_call_or_a_short_refusal(raw: str) -> None:
    try:
        kwargs = convert(raw)
    except ToolArgumentsError as exc:
        assert len(str(exc)) < MESSAGE_LIMIT
    else:
        assert set(kwargs) <= {"s", "i", "f", "items", "table", "checked"}


def _results_of(calls: list[ToolCallBlock]) -> list[ToolResultData]:
    """Run ``calls`` through the scheduler; the ``tool/result`` data, in order."""
    agent = make_agent()

    async def main() -> None:
        await drive(registry_of(sample), agent, calls)

    trio.run(main)  # an exception out of the pipeline fails the test here
    got = [e.data for e in agent.session.events if isinstance(e.data, ToolResultData)]
    assert [r.message.content[0].tool_call_id for r in got] == [c.id for c in calls]
    assert set(results(agent)) == {c.id for c in calls}
    return got


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(argument_texts(), min_size=1, max_size=4))
def test_the_scheduler_answers_any_argument_text_with_a_result(
    texts: list[str],
) -> None:
    calls = [call(f"c{i}", "sample", raw) for i, raw in enumerate(texts)]
    for result in _results_of(calls):
        text = text_of(result.message.content[0].content)
        if result.error is None:
            assert text == "ran"
        else:
            assert result.error == ToolErrorInfo("ToolArgumentsError", "INVALID_ARGS")
            assert len(text) < MESSAGE_LIMIT


def test_a_raw_lone_surrogate_is_refused_and_recorded_repaired() -> None:
    calls = [
        call("c1", "sample", '{"s": "a\ud800b"}'),
        call("c2", "sam\udc00ple", "{}"),
    ]
    agent = make_agent()

    async def main() -> None:
        await drive(registry_of(sample), agent, calls)

    trio.run(main)
    got = results(agent)
    assert got["c1"].error == ToolErrorInfo("ToolArgumentsError", "INVALID_ARGS")
    assert "lone surrogate" in text_of(got["c1"].message.content[0].content)
    assert got["c2"].error == ToolErrorInfo("UnknownToolError", "UNKNOWN_TOOL")
    recorded = [e.data for e in agent.session.events if e.type == "tool/call"]
    assert [(d.name, d.arguments) for d in recorded] == [
        ("sample", '{"s": "a\ufffdb"}'),
        ("sam\ufffdple", "{}"),
    ]


# --------------------------------------------------------------------------- one decode, two ways
# Short ASCII object text (at most ``MAX_ARGUMENT_DEPTH`` characters, starting with
# ``{``) is decoded by one scan; anything else, text with a trailing blank included,
# by the general decoder with its checks. Both must give the same value or refusal.

json_texts = st.one_of(
    st.text(),
    st.text(alphabet='{}[]":,0123456789.eE-+ \\ufnrtalsNIy\ufeff\ud800'),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
        lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
        max_leaves=12,
    ).map(lambda v: json.dumps(v, ensure_ascii=False)),
    st.sampled_from(["\ufeff{}", '\ufeff{"x": 1}', "{} x", "1e999", "NaN", "[1,]"]),
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


def _reason(outcome: tuple[str, object]) -> object:
    """An outcome with a refusal's message cut to its reason (the general decoder
    names positions and lengths, which a trailing blank moves)."""
    kind, detail = outcome
    if kind == "ok":
        return outcome
    error_type, message = cast("tuple[type, str]", detail)
    return kind, error_type, re.split(r"[:(]", message)[0]


def _matches_the_general_decode(raw: str) -> tuple[str, object]:
    """``raw``'s outcome, checked against the general decoder's (``raw`` with a
    trailing blank, which only the general decoder reads)."""
    got = outcome_of(parse_arguments, raw, "t")
    general = outcome_of(parse_arguments, raw + " ", "t")
    if raw.strip():
        assert _reason(got) == _reason(general)
    return got


@settings(max_examples=300, deadline=None)
@given(raw=short_objects)
def test_the_short_decode_matches_the_general_decode(raw: str) -> None:
    _matches_the_general_decode(raw)


def test_short_text_cannot_hold_an_integer_over_the_digit_limit() -> None:
    # What lets the short scan read integers without the digit-count check.
    assert MAX_ARGUMENT_DEPTH < MAX_INTEGER_DIGITS


@pytest.mark.parametrize(
    "raw",
    [
        '{"x": 1}',
        '{"x": -0}',
        '{"x": ' + "9" * 55 + "}",
        '{"x": -' + "1" * 55 + "}",
        '{"x": 1.5, "y": [1, -2e3]}',
        '{"x": 1e999}',
        '{"x": -1e400}',
        '{"x": NaN}',
        '{"x": Infinity}',
        '{"x": -Infinity}',
        '{"x": 01}',
        '{"x": 1} ',
        '{"x": 1}{}',
        '{"x": }',
        "{",
    ],
)
def test_the_short_scan_matches_the_general_decode_near_its_limits(raw: str) -> None:
    assert len(raw) <= MAX_ARGUMENT_DEPTH  # short enough for the one scan
    _matches_the_general_decode(raw)


@settings(max_examples=300, deadline=None)
@given(
    value=st.dictionaries(
        st.text(alphabet="xy", max_size=2),
        st.one_of(
            st.integers(min_value=-(10**40), max_value=10**40),
            st.floats(allow_nan=False, allow_infinity=False),
            st.booleans(),
            st.none(),
        ),
        max_size=2,
    )
)
def test_short_numbers_decode_as_the_general_decode_reads_them(
    value: dict[str, Any],
) -> None:
    raw = json.dumps(value)
    got = _matches_the_general_decode(raw)
    if len(raw) <= MAX_ARGUMENT_DEPTH:
        assert got == ("ok", value)


@settings(max_examples=150, deadline=None)
@given(raw=json_texts)
def test_the_shared_decoder_decodes_as_json_loads_with_the_hooks(raw: str) -> None:
    def general(text: str) -> object:
        return json.loads(
            text,
            parse_constant=_arguments._reject_constant,
            parse_int=_arguments._parse_int,
            parse_float=_arguments._parse_float,
        )

    fast, slow = outcome_of(_arguments._decode, raw), outcome_of(general, raw)
    if fast[0] == "ok" and slow[0] == "ok" and fast[1] != fast[1]:
        return  # NaN is refused by the hooks, so this is unreachable; keep it total
    assert fast == slow


# --------------------------------------------------------------------------- the field check


@settings(max_examples=150, deadline=None)
@given(
    value=st.dictionaries(
        st.sampled_from(["a", "b", "c", "d", "x"]),
        st.one_of(st.integers(), st.text(max_size=3), st.none()),
    )
)
def test_the_argument_check_with_known_keys_matches_the_one_without(
    value: dict[str, object],
) -> None:
    @tool
    async def spec_of(a: int, b: str = "", c: int | None = None) -> str:
        return ""

    spec = spec_of._arguments
    assert isinstance(spec, ArgumentsSpec)
    assert spec.keys == frozenset({"a", "b", "c"})
    fields = spec.fields
    with_keys = outcome_of(convert_fields, fields, value, "", "argument", spec.keys)
    without = outcome_of(convert_fields, fields, value, "", "argument")
    assert with_keys == without


def test_the_known_keys_are_no_part_of_the_spec_equality() -> None:
    @tool
    async def one(a: int) -> str:
        return ""

    spec = one._arguments
    same = ArgumentsSpec(spec.fields)
    assert same == spec and hash(same) == hash(spec)
    assert repr(same) == repr(spec) and "keys" not in repr(spec)
