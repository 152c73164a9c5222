"""A tool's argument list: decoding a call's raw arguments and checking them.

Arguments from a model are outside data: :func:`parse_arguments` decodes the raw JSON
text of a call and :meth:`ArgumentsSpec.convert` checks it against the compiled
parameter list before a tool body sees it; a mismatch names the argument and says why.

Decoding never trusts the text. Arrays and objects may nest at most
:data:`MAX_ARGUMENT_DEPTH` levels deep; the depth is measured by a linear scan before
the decoder runs, so no input reaches a recursion limit. Integers may have at most
:data:`MAX_INTEGER_DIGITS` digits, numbers must be finite doubles (``1e999`` is
refused), ``NaN``/``Infinity`` are not JSON, and a lone surrogate (not Unicode
text), raw or from a ``\\uD800``-style escape, is refused. Every refusal is a
:class:`ToolArgumentsError` whose message is bounded in length: it never echoes the
input back.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from itertools import accumulate
from typing import Final

import attrs

from ..errors import ToolArgumentsError
from ..values import JsonValue, utf8_ok
from ._specs import Field, Invalid, clip, convert_fields, json_kind, object_schema

__all__ = [
    "MAX_ARGUMENT_DEPTH",
    "MAX_INTEGER_DIGITS",
    "ArgumentsSpec",
    "ObjectArguments",
    "parse_arguments",
]

#: How deeply arrays and objects may nest in a call's arguments (``{"a": [1]}`` is 2).
MAX_ARGUMENT_DEPTH: Final = 64
#: The most digits an integer in a call's arguments may have (CPython's default
#: ``sys.get_int_max_str_digits()``; checked here even if an application lifts it).
MAX_INTEGER_DIGITS: Final = 4300

# A JSON string, so brackets inside it can be skipped (an unterminated one runs to
# the end). The unrolled loop matches in linear time.
_STRINGS: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_BRACKETS: Final = bytes(b for b in range(256) if b not in b"[]{}")
_BRACKET_STEP: Final = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
# A ``\uD800``-``\uDFFF`` escape: the decoded value may hold a lone surrogate.
_SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89a-fA-F]")


@attrs.frozen
class ArgumentsSpec:
    """The compiled parameter list of a tool: its schema and its argument checker."""

    fields: tuple[Field, ...]
    # The argument names, for the check that every given argument is one.
    keys: frozenset[str] = attrs.field(
        init=False,
        eq=False,
        repr=False,
        default=attrs.Factory(
            lambda self: frozenset(f.key for f in self.fields), takes_self=True
        ),
    )

    def schema(self) -> dict[str, JsonValue]:
        """``{"type": "object", "properties": ..., "required": ..., "additionalProperties": false}``."""
        return object_schema(self.fields, with_defaults=True)

    def convert(self, arguments: object, tool: str) -> dict[str, object]:
        """Check decoded ``arguments``; return the keyword arguments for the body.

        Raises:
            ToolArgumentsError: naming the argument and what is wrong with it.
        """
        if not isinstance(arguments, dict):
            raise ToolArgumentsError(
                f"arguments must be a JSON object, got {json_kind(arguments)}",
                tool=tool,
            )
        try:
            return convert_fields(self.fields, arguments, "", "argument", self.keys)
        except Invalid as exc:
            why = clip(exc.why, 300)
            if exc.path:
                raise ToolArgumentsError(
                    f"argument {clip(exc.path, 120)!r}: {why}", tool=tool
                ) from None
            raise ToolArgumentsError(why, tool=tool) from None


@attrs.frozen
class ObjectArguments:
    """The argument check of a tool described by a JSON schema it was given.

    The schema is not interpreted: any JSON object passes, whole, as the body's
    ``arguments`` keyword argument (whoever runs the body checks it against the
    schema, as an MCP server does).
    """

    def convert(self, arguments: object, tool: str) -> dict[str, object]:
        """``{"arguments": arguments}`` for a JSON object.

        Raises:
            ToolArgumentsError: ``arguments`` is not a JSON object.
        """
        if not isinstance(arguments, dict):
            raise ToolArgumentsError(
                f"arguments must be a JSON object, got {json_kind(arguments)}",
                tool=tool,
            )
        return {"arguments": arguments}


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


def _parse_int(text: str) -> int:
    digits = len(text) - (text[0] == "-")
    if digits > MAX_INTEGER_DIGITS:
        raise ValueError(
            f"an integer with {digits} digits is too large "
            f"(at most {MAX_INTEGER_DIGITS} digits)"
        )
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(
            f"the number {clip(text, 40)} is out of range (not a finite double)"
        )
    return value


# One decoder for every call: ``json.loads`` with these hooks would build a fresh
# ``JSONDecoder`` (and its scanner) each time. The hooks are stateless.
_DECODER: Final = json.JSONDecoder(
    parse_constant=_reject_constant, parse_int=_parse_int, parse_float=_parse_float
)
# The scanner of text too short to hold an integer over ``MAX_INTEGER_DIGITS``
# digits: integers are read by the scanner itself, with no hook to call.
_SHORT_DECODER: Final = json.JSONDecoder(
    parse_constant=_reject_constant, parse_float=_parse_float
)
_SHORT_SCAN: Final[Callable[[str, int], tuple[object, int]]] = _SHORT_DECODER.scan_once  # type: ignore[attr-defined]


def _decode(raw: str) -> object:
    """``json.loads(raw, parse_constant=..., parse_int=..., parse_float=...)``."""
    if raw.startswith("\ufeff"):  # as json.loads refuses a str with a BOM
        raise json.JSONDecodeError(
            "Unexpected UTF-8 BOM (decode using utf-8-sig)", raw, 0
        )
    return _DECODER.decode(raw)


def nesting_depth(raw: str, limit: int) -> int:
    """How deeply arrays/objects nest in JSON text ``raw`` (0 if at most ``limit``).

    Linear in ``len(raw)``, with no recursion and no Python-level loop over the text
    (regex, ``bytes.translate`` and ``itertools.accumulate`` do the work), so it
    answers for any input, however deep. Brackets inside strings do not count; an
    unterminated string runs to the end. Text with at most ``limit`` brackets is
    answered without a scan (with ``0``: the exact depth is not needed).
    """
    if raw.count("[") + raw.count("{") <= limit:
        return 0
    # Brackets are ASCII, and UTF-8 never uses ASCII bytes inside a multi-byte
    # sequence, so deleting every other byte leaves exactly the brackets.
    brackets = (
        _STRINGS.sub("", raw)
        .encode("utf-8", "surrogatepass")
        .translate(None, _NOT_BRACKETS)
    )
    return max(accumulate(map(_BRACKET_STEP.__getitem__, brackets)), default=0)


def _lone_surrogate(value: object) -> bool:
    """Whether a decoded value holds a string (or key) with a lone surrogate."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not utf8_ok(item):
                return True
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
    return False


def _decode_short(raw: str) -> object:
    """The decoded short ASCII object text ``raw`` (as :func:`parse_arguments` decodes
    it), or ``_UNDECIDED`` when the short way does not apply or the text is refused.

    Text of at most ``MAX_ARGUMENT_DEPTH`` ASCII characters that starts with ``{``
    and holds no backslash passes every check before the decoder (non-blank, no
    lone surrogate, no BOM, too few brackets to nest too deep, no ``\\u`` escape),
    so one scan from its start to its end decides it. Such text holds no integer
    of more than ``MAX_INTEGER_DIGITS`` digits, so the scanner reads integers
    without the digit-count hook.
    """
    if (
        len(raw) > MAX_ARGUMENT_DEPTH
        or not raw.startswith("{")
        or not raw.isascii()
        or "\\" in raw
    ):
        return _UNDECIDED
    try:
        value, end = _SHORT_SCAN(raw, 0)
    except (StopIteration, ValueError):  # the general path says what is wrong
        return _UNDECIDED
    if end != len(raw):  # trailing whitespace or data: the general path decides
        return _UNDECIDED
    return value


_UNDECIDED: Final = object()


def parse_arguments(raw: str, tool: str) -> object:
    """Decode the raw ``arguments`` text of a call (``''`` → ``{}``).

    Never blocks; runs once per call, in time linear in ``len(raw)``. See the module
    docstring for the limits.

    Raises:
        ToolArgumentsError: the text is not JSON, or exceeds a limit; the message
            says which and where, without quoting the text.
    """
    if raw.__class__ is str:
        value = _decode_short(raw)
        if value is not _UNDECIDED:
            return value
    if not isinstance(raw, str):
        raise ToolArgumentsError(
            f"arguments must be JSON text, got {type(raw).__name__}", tool=tool
        )
    if not raw.strip():
        return {}
    if not utf8_ok(raw):
        raise ToolArgumentsError(
            "arguments are not valid Unicode text: they hold a lone surrogate",
            tool=tool,
        )
    if nesting_depth(raw, MAX_ARGUMENT_DEPTH) > MAX_ARGUMENT_DEPTH:
        raise ToolArgumentsError(
            f"arguments nest arrays/objects more than {MAX_ARGUMENT_DEPTH} levels "
            f"deep ({len(raw)} characters)",
            tool=tool,
        )
    try:
        value = _decode(raw)
    except RecursionError:
        # Not reachable through the depth scan above, but never a crash.
        raise ToolArgumentsError(
            "arguments are nested too deeply to decode", tool=tool
        ) from None
    except ValueError as exc:
        raise ToolArgumentsError(
            f"arguments are not valid JSON: {clip(str(exc), 200)}", tool=tool
        ) from None
    if _SURROGATE_ESCAPE.search(raw) is not None and _lone_surrogate(value):
        raise ToolArgumentsError(
            "arguments hold a \\uD800-\\uDFFF escape that is not part of a "
            "surrogate pair, which is not Unicode text",
            tool=tool,
        )
    return value
