"""Parsing one JSON line of a session log, sped up by ``msgspec`` when it is installed.

The standard library's decoder is the reference: a line parses to what
``json.loads`` gives (``NaN`` and ``Infinity`` refused). With the optional
``msgspec`` package (the ``dsh-trio[speed]`` extra) a line is first decoded by
``msgspec``, about twice as fast; whatever ``msgspec`` refuses (a lone surrogate
escape, a number out of range, nesting too deep, anything that is not JSON) is
parsed again by the standard library, which gives the value or the error it
always gave. So the accelerator changes the speed, never the result.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final

__all__ = ["JSON_ACCELERATOR", "parse_json_line", "parse_json_line_stdlib"]


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


_DECODER: Final = json.JSONDecoder(parse_constant=_refuse_constant)
_SCAN: Final[Callable[[str, int], tuple[object, int]]] = _DECODER.scan_once  # type: ignore[attr-defined]

_fast_decode: Callable[[bytes], Any] | None
_FAST_ERRORS: tuple[type[BaseException], ...]
try:
    import msgspec
except ImportError:  # pragma: no cover - depends on the environment
    _fast_decode = None
    _FAST_ERRORS = ()
else:
    _fast_decode = msgspec.json.Decoder().decode
    _FAST_ERRORS = (msgspec.DecodeError, RecursionError)

#: The accelerator in use: ``"msgspec"``, or ``None`` for the standard library alone.
JSON_ACCELERATOR: Final = None if _fast_decode is None else "msgspec"


def parse_json_line_stdlib(line: bytes) -> object:
    """Parse one line with the standard library alone.

    Raises:
        ValueError: the line is not JSON (``UnicodeDecodeError`` for bytes that
            are not UTF-8, ``json.JSONDecodeError`` otherwise).
        RecursionError: the line nests too deep.
    """
    text = line.decode("utf-8")
    # The scanner alone for the common line (one value, no surrounding blanks); any
    # other line goes through the full decoder, which also words the errors.
    try:
        obj, end = _SCAN(text, 0)
    except StopIteration:
        return _DECODER.decode(text)
    if end != len(text):
        return _DECODER.decode(text)
    return obj


def parse_json_line(line: bytes) -> object:
    """Parse one line: the value :func:`parse_json_line_stdlib` gives, faster.

    Pure; never blocks.

    Example::

        parse_json_line(b'{"seq": 1}')  # {'seq': 1}

    Raises:
        ValueError, RecursionError: as :func:`parse_json_line_stdlib`.
    """
    fast = _fast_decode
    if fast is not None:
        try:
            return fast(line)
        except _FAST_ERRORS:
            pass  # refused: the standard library decides (value or error)
    return parse_json_line_stdlib(line)
