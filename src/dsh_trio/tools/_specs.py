"""Compiled annotations: each :class:`Spec` knows its JSON schema and checks values against it.

A spec is built once, at decoration time (``_schema``), and then used for every call:
:meth:`Spec.schema` for the schema a model sees, :meth:`Spec.convert` to check a
decoded JSON value and turn it into the Python value a body receives. A mismatch is
an :class:`Invalid` that names where the value is and why it does not fit.
"""

from __future__ import annotations

import json
import math
import typing
from collections.abc import Sequence
from typing import Any, Final

import attrs

from ..values import JsonValue, check_json

__all__ = [
    "MISSING",
    "ArraySpec",
    "AttrsSpec",
    "BoolSpec",
    "Field",
    "FloatSpec",
    "IntSpec",
    "Invalid",
    "LiteralSpec",
    "MapSpec",
    "NullSpec",
    "Spec",
    "StrSpec",
    "UnionSpec",
    "clip",
    "convert_fields",
    "json_kind",
    "object_schema",
]

#: No default: the parameter or field is required.
MISSING: Final = object()


class Invalid(Exception):
    """A value does not match its spec; ``path`` locates it below the argument list."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"{path}: {why}" if path else why)
        self.path = path
        self.why = why


def json_kind(value: object) -> str:
    """The JSON type name of a decoded value (``"integer"`` for whole ints)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def clip(text: str, limit: int) -> str:
    """``text``, cut to at most ``limit`` characters (``...`` marks a cut)."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _show(value: object) -> str:
    text = (
        json.dumps(value)
        if json_kind(value) in {"string", "integer", "number", "boolean", "null"}
        else json_kind(value)
    )
    return clip(text, 60)


def _got(value: object) -> str:
    kind = json_kind(value)
    if kind in {"array", "object", "null"}:
        return kind
    return f"{kind} {_show(value)}"


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class Spec:
    """The compiled form of one annotation: its schema and its checker."""

    def kinds(self) -> frozenset[str]:
        """The JSON kinds a value may have to be worth trying against this spec."""
        raise NotImplementedError

    def schema(self) -> dict[str, JsonValue]:
        """The JSON schema of this annotation (a fresh dict)."""
        raise NotImplementedError

    def convert(self, value: object, path: str) -> object:
        """Check the decoded JSON ``value``; return the Python value for the body.

        Raises:
            Invalid: ``value`` does not match; ``path`` locates the culprit.
        """
        raise NotImplementedError

    def describe(self) -> str:
        """A short human name of what is expected (``"integer"``, ``"array"``)."""
        return " or ".join(sorted(self.kinds()))


class StrSpec(Spec):
    def kinds(self) -> frozenset[str]:
        return frozenset({"string"})

    def schema(self) -> dict[str, JsonValue]:
        return {"type": "string"}

    def convert(self, value: object, path: str) -> object:
        if isinstance(value, str):
            return value
        raise Invalid(path, f"expected string, got {_got(value)}")


class IntSpec(Spec):
    def kinds(self) -> frozenset[str]:
        return frozenset({"integer", "number"})

    def schema(self) -> dict[str, JsonValue]:
        return {"type": "integer"}

    def describe(self) -> str:
        return "integer"

    def convert(self, value: object, path: str) -> object:
        if isinstance(value, bool):
            raise Invalid(path, f"expected integer, got {_got(value)}")
        if isinstance(value, int):
            return value
        # JSON Schema counts 2.0 as an integer; models do write it that way.
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            return int(value)
        raise Invalid(path, f"expected integer, got {_got(value)}")


class FloatSpec(Spec):
    def kinds(self) -> frozenset[str]:
        return frozenset({"integer", "number"})

    def schema(self) -> dict[str, JsonValue]:
        return {"type": "number"}

    def describe(self) -> str:
        return "number"

    def convert(self, value: object, path: str) -> object:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise Invalid(path, f"expected number, got {_got(value)}")
        return float(value)


class BoolSpec(Spec):
    def kinds(self) -> frozenset[str]:
        return frozenset({"boolean"})

    def schema(self) -> dict[str, JsonValue]:
        return {"type": "boolean"}

    def convert(self, value: object, path: str) -> object:
        if isinstance(value, bool):
            return value
        raise Invalid(path, f"expected boolean, got {_got(value)}")


class NullSpec(Spec):
    def kinds(self) -> frozenset[str]:
        return frozenset({"null"})

    def schema(self) -> dict[str, JsonValue]:
        return {"type": "null"}

    def convert(self, value: object, path: str) -> object:
        if value is None:
            return None
        raise Invalid(path, f"expected null, got {_got(value)}")


@attrs.frozen
class ArraySpec(Spec):
    item: Spec | None
    as_tuple: bool = False

    def kinds(self) -> frozenset[str]:
        return frozenset({"array"})

    def schema(self) -> dict[str, JsonValue]:
        if self.item is None:
            return {"type": "array"}
        return {"type": "array", "items": self.item.schema()}

    def convert(self, value: object, path: str) -> object:
        if not isinstance(value, list):
            raise Invalid(path, f"expected array, got {_got(value)}")
        item = self.item
        items: list[object] = (
            list(value)
            if item is None
            else [item.convert(v, f"{path}[{i}]") for i, v in enumerate(value)]
        )
        return tuple(items) if self.as_tuple else items


@attrs.frozen
class MapSpec(Spec):
    value: Spec | None

    def kinds(self) -> frozenset[str]:
        return frozenset({"object"})

    def schema(self) -> dict[str, JsonValue]:
        if self.value is None:
            return {"type": "object"}
        return {"type": "object", "additionalProperties": self.value.schema()}

    def convert(self, value: object, path: str) -> object:
        if not isinstance(value, dict):
            raise Invalid(path, f"expected object, got {_got(value)}")
        spec = self.value
        if spec is None:
            return dict(value)
        return {k: spec.convert(v, _join(path, k)) for k, v in value.items()}


def _literal_key(value: object) -> tuple[type, object]:
    # 1, 1.0 and True are equal in Python but different JSON values.
    return (type(value), value)


@attrs.frozen
class LiteralSpec(Spec):
    values: tuple[str | int | bool | None, ...]

    def kinds(self) -> frozenset[str]:
        return frozenset(json_kind(v) for v in self.values)

    def schema(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = {}
        kinds = {json_kind(v) for v in self.values}
        if len(kinds) == 1:
            out["type"] = next(iter(kinds))
        out["enum"] = list(self.values)
        return out

    def describe(self) -> str:
        return "one of " + ", ".join(_show(v) for v in self.values)

    def convert(self, value: object, path: str) -> object:
        key = _literal_key(value)
        for v in self.values:
            if _literal_key(v) == key:
                return v
        raise Invalid(path, f"expected {self.describe()}, got {_show(value)}")


@attrs.frozen
class UnionSpec(Spec):
    members: tuple[Spec, ...]

    def kinds(self) -> frozenset[str]:
        return frozenset().union(*(m.kinds() for m in self.members))

    def schema(self) -> dict[str, JsonValue]:
        return {"anyOf": [m.schema() for m in self.members]}

    def describe(self) -> str:
        return " or ".join(m.describe() for m in self.members)

    def convert(self, value: object, path: str) -> object:
        kind = json_kind(value)
        candidates = [m for m in self.members if kind in m.kinds()]
        if not candidates:
            raise Invalid(path, f"expected {self.describe()}, got {_got(value)}")
        first: Invalid | None = None
        for member in candidates:
            try:
                return member.convert(value, path)
            except Invalid as exc:
                if first is None:
                    first = exc
        assert first is not None
        raise first


@attrs.frozen
class Field:
    key: str
    spec: Spec
    required: bool
    description: str | None = None
    default: object = MISSING


def object_schema(
    fields: Sequence[Field], *, with_defaults: bool
) -> dict[str, JsonValue]:
    properties: dict[str, JsonValue] = {}
    for f in fields:
        prop = f.spec.schema()
        if f.description is not None:
            prop["description"] = f.description
        if with_defaults and f.default is not MISSING:
            default = _json_default(f.default)
            if default is not MISSING:
                prop["default"] = typing.cast(JsonValue, default)
        properties[f.key] = prop
    return {
        "type": "object",
        "properties": properties,
        "required": [f.key for f in fields if f.required],
        "additionalProperties": False,
    }


def _json_default(value: object) -> object:
    try:
        return check_json(value, "default")
    except TypeError:
        return MISSING


def convert_fields(
    fields: Sequence[Field],
    value: object,
    path: str,
    what: str,
    known: frozenset[str] | None = None,
) -> dict[str, object]:
    """Check object ``value`` against ``fields``; ``known`` is their keys, if at hand."""
    if not isinstance(value, dict):
        raise Invalid(path, f"expected object, got {_got(value)}")
    if known is None:
        known = frozenset(f.key for f in fields)
    for key in value:
        if key not in known:
            raise Invalid(path, f"unexpected {what} {clip(repr(key), 60)}")
    out: dict[str, object] = {}
    for f in fields:
        if f.key in value:
            out[f.key] = f.spec.convert(value[f.key], _join(path, f.key))
        elif f.required:
            raise Invalid(path, f"missing required {what} {f.key!r}")
    return out


@attrs.frozen
class AttrsSpec(Spec):
    cls: type[Any]
    fields: tuple[Field, ...]

    def kinds(self) -> frozenset[str]:
        return frozenset({"object"})

    def schema(self) -> dict[str, JsonValue]:
        return object_schema(self.fields, with_defaults=False)

    def describe(self) -> str:
        return f"object ({self.cls.__name__})"

    def convert(self, value: object, path: str) -> object:
        kwargs = convert_fields(self.fields, value, path, "property")
        try:
            return self.cls(**kwargs)
        except (
            Exception
        ) as exc:  # a class's own validator: its refusal is the model's error
            raise Invalid(
                path, f"is not a valid {self.cls.__name__}: {clip(str(exc), 200)}"
            ) from None
