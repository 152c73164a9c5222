"""Lossless JSON: what session data may hold as plain JSON, and the two checks for it.

Lossless JSON is ``None``, ``bool``, ``str`` (UTF-8 encodable: no lone surrogates),
safe integers (|n| < 2**53), finite floats other than ``-0.0``, lists/tuples of JSON
and ``dict``\\s with ``str`` keys. Two walkers apply these rules:

* :func:`check_json` copies what it accepts (outside data entering the log) and
  raises ``TypeError`` naming the path of the first offending element;
* :func:`check_json_value` only looks (data already held, e.g. when a log is
  restored) and raises :class:`DataShapeError`, the error of every shape check in
  this package.
"""

from __future__ import annotations

import math
from typing import Any, Final, cast

from ._ids import JsonValue

__all__ = [
    "MAX_SAFE_INTEGER",
    "DataShapeError",
    "check_json",
    "check_json_value",
    "utf8_ok",
]

#: The largest integer JSON numbers keep exactly (``2**53 - 1``); ``-MAX_SAFE_INTEGER``
#: is the smallest.
MAX_SAFE_INTEGER: Final = 2**53 - 1

_SURROGATE: Final = "contains a lone surrogate, which UTF-8 cannot encode"


class DataShapeError(Exception):
    """A value does not have the shape its type promises.

    ``path`` collects the location segments while the error unwinds (innermost
    first); :meth:`describe` renders ``<root><path> <what>``.
    """

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what
        self.path: list[str] = []

    def at(self, segment: str) -> DataShapeError:
        self.path.append(segment)
        return self

    def describe(self, root: str) -> str:
        return f"{root}{''.join(reversed(self.path))} {self.what}"


def utf8_ok(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (no lone surrogates)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# --------------------------------------------------------------------------- looking


def check_json_value(value: object) -> None:
    """Check that ``value`` is lossless JSON, without copying it.

    Raises:
        DataShapeError: the first offending element, with its path.
    """
    _json(value, set())


# ``value`` is whatever the caller holds; each branch tests its class before using it.
def _json(value: Any, active: set[int]) -> None:
    tp = value.__class__
    if value is None or tp is bool:
        return
    if tp is str:
        if not utf8_ok(value):
            raise DataShapeError(_SURROGATE)
        return
    if tp is int:
        if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            raise DataShapeError(f"is an integer outside the safe range: {value!r}")
        return
    if tp is float:
        if not math.isfinite(value):
            raise DataShapeError(f"is not a finite number: {value!r}")
        if value == 0.0 and math.copysign(1.0, value) < 0:
            raise DataShapeError("is -0.0, which JSON cannot keep")
        return
    if isinstance(value, str):
        if not utf8_ok(value):
            raise DataShapeError(_SURROGATE)
        return
    if tp is list or tp is tuple or tp is dict:
        key = id(value)
        if key in active:
            raise DataShapeError("contains a cycle")
        active.add(key)
        try:
            if tp is dict:
                for k, v in value.items():
                    if k.__class__ is not str:
                        raise DataShapeError(f"has a non-string key {k!r:.40}")
                    try:
                        _json(v, active)
                    except DataShapeError as exc:
                        raise exc.at(f".{k}") from None
            else:
                for i, v in enumerate(value):
                    try:
                        _json(v, active)
                    except DataShapeError as exc:
                        raise exc.at(f"[{i}]") from None
        finally:
            active.discard(key)
        return
    raise DataShapeError(f"is not JSON: {tp.__name__} {value!r:.60}")


# --------------------------------------------------------------------------- copying


def check_json(value: object, where: str = "value") -> JsonValue:
    """Return a private deep copy of ``value`` if it is lossless JSON, else raise.

    Lossless JSON is ``None``, ``bool``, ``str``, safe integers (|n| < 2**53), finite
    floats other than ``-0.0``, lists/tuples of JSON and ``dict``\\s with ``str`` keys.
    Cycles, NaN, infinities, ``-0.0``, bytes, sets and any other object are refused.

    Raises:
        TypeError: naming the path of the first offending element.
    """
    return _copy(value, where, set())


def _copy(value: object, path: str, active: set[int]) -> JsonValue:
    if isinstance(value, str) and type(value) is str:
        if not utf8_ok(value):
            raise TypeError(
                f"{path} contains a lone surrogate, which UTF-8 cannot encode"
            )
        return value
    if value is None or value is True or value is False:
        return cast(JsonValue, value)
    tp = type(value)
    if tp is int:
        if -MAX_SAFE_INTEGER <= cast(int, value) <= MAX_SAFE_INTEGER:
            return cast(int, value)
        raise TypeError(
            f"{path} is an integer outside the safe range (|n| < 2**53): {value!r}"
        )
    if tp is float:
        f = cast(float, value)
        if not math.isfinite(f):
            raise TypeError(f"{path} is not a finite number: {value!r}")
        if f == 0.0 and math.copysign(1.0, f) < 0:
            raise TypeError(f"{path} is -0.0, which JSON cannot keep")
        return f
    if isinstance(value, str):  # str subclasses (enums) become plain strings
        return _copy(str(value), path, active)
    if tp is list or tp is tuple:
        key = id(value)
        if key in active:
            raise TypeError(f"{path} contains a cycle")
        active.add(key)
        try:
            return [
                _copy(v, f"{path}[{i}]", active)
                for i, v in enumerate(cast(list[object], value))
            ]
        finally:
            active.discard(key)
    if tp is dict:
        key = id(value)
        if key in active:
            raise TypeError(f"{path} contains a cycle")
        active.add(key)
        try:
            out: dict[str, JsonValue] = {}
            for k, v in cast(dict[object, object], value).items():
                if type(k) is not str:
                    raise TypeError(f"{path} has a non-string key {k!r}")
                out[k] = _copy(v, f"{path}.{k}", active)
            return out
        finally:
            active.discard(key)
    raise TypeError(f"{path} is not JSON: {tp.__name__} {value!r:.80}")
