"""JSON schemas from Python annotations, and the validators that enforce them.

Each supported annotation compiles once, at decoration time, into a small spec
object that knows both its JSON schema and how to check (and convert) a decoded
JSON value against it. Arguments from a model are outside data: they are parsed
and checked here before a tool body sees them, and a mismatch names the argument
and says why.
"""

from __future__ import annotations

import inspect
import json
import math
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal

import attrs

from ..errors import ToolArgumentsError, ToolDefinitionError
from ..values import JsonValue, check_json

__all__ = [
    "ArgumentsSpec",
    "Invalid",
    "Spec",
    "compile_annotation",
    "compile_parameter",
    "json_kind",
    "parse_arguments",
]

_MISSING: Final = object()


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


def _show(value: object) -> str:
    text = (
        json.dumps(value)
        if json_kind(value) in {"string", "integer", "number", "boolean", "null"}
        else json_kind(value)
    )
    return text if len(text) <= 60 else text[:57] + "..."


def _got(value: object) -> str:
    kind = json_kind(value)
    if kind in {"array", "object", "null"}:
        return kind
    return f"{kind} {_show(value)}"


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# --------------------------------------------------------------------------- specs


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


class _Str(Spec):
    def kinds(self) -> frozenset[str]:
        return frozenset({"string"})

    def schema(self) -> dict[str, JsonValue]:
        return {"type": "string"}

    def convert(self, value: object, path: str) -> object:
        if isinstance(value, str):
            return value
        raise Invalid(path, f"expected string, got {_got(value)}")


class _Int(Spec):
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


class _Float(Spec):
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


class _Bool(Spec):
    def kinds(self) -> frozenset[str]:
        return frozenset({"boolean"})

    def schema(self) -> dict[str, JsonValue]:
        return {"type": "boolean"}

    def convert(self, value: object, path: str) -> object:
        if isinstance(value, bool):
            return value
        raise Invalid(path, f"expected boolean, got {_got(value)}")


class _Null(Spec):
    def kinds(self) -> frozenset[str]:
        return frozenset({"null"})

    def schema(self) -> dict[str, JsonValue]:
        return {"type": "null"}

    def convert(self, value: object, path: str) -> object:
        if value is None:
            return None
        raise Invalid(path, f"expected null, got {_got(value)}")


@attrs.frozen
class _Array(Spec):
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
class _Map(Spec):
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
class _Literal(Spec):
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
class _Union(Spec):
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
class _Field:
    key: str
    spec: Spec
    required: bool
    description: str | None = None
    default: object = _MISSING


def _object_schema(
    fields: Sequence[_Field], *, with_defaults: bool
) -> dict[str, JsonValue]:
    properties: dict[str, JsonValue] = {}
    for f in fields:
        prop = f.spec.schema()
        if f.description is not None:
            prop["description"] = f.description
        if with_defaults and f.default is not _MISSING:
            default = _json_default(f.default)
            if default is not _MISSING:
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
        return _MISSING


def _convert_fields(
    fields: Sequence[_Field], value: object, path: str, what: str
) -> dict[str, object]:
    if not isinstance(value, dict):
        raise Invalid(path, f"expected object, got {_got(value)}")
    known = {f.key for f in fields}
    for key in value:
        if key not in known:
            raise Invalid(path, f"unexpected {what} {key!r}")
    out: dict[str, object] = {}
    for f in fields:
        if f.key in value:
            out[f.key] = f.spec.convert(value[f.key], _join(path, f.key))
        elif f.required:
            raise Invalid(path, f"missing required {what} {f.key!r}")
    return out


@attrs.frozen
class _AttrsObject(Spec):
    cls: type[Any]
    fields: tuple[_Field, ...]

    def kinds(self) -> frozenset[str]:
        return frozenset({"object"})

    def schema(self) -> dict[str, JsonValue]:
        return _object_schema(self.fields, with_defaults=False)

    def describe(self) -> str:
        return f"object ({self.cls.__name__})"

    def convert(self, value: object, path: str) -> object:
        kwargs = _convert_fields(self.fields, value, path, "property")
        try:
            return self.cls(**kwargs)
        except (TypeError, ValueError) as exc:
            raise Invalid(path, f"is not a valid {self.cls.__name__}: {exc}") from None


@attrs.frozen
class ArgumentsSpec:
    """The compiled parameter list of a tool: its schema and its argument checker."""

    fields: tuple[_Field, ...]

    def schema(self) -> dict[str, JsonValue]:
        """``{"type": "object", "properties": ..., "required": ..., "additionalProperties": false}``."""
        return _object_schema(self.fields, with_defaults=True)

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
            return _convert_fields(self.fields, arguments, "", "argument")
        except Invalid as exc:
            if exc.path:
                raise ToolArgumentsError(
                    f"argument {exc.path!r}: {exc.why}", tool=tool
                ) from None
            raise ToolArgumentsError(exc.why, tool=tool) from None


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


def parse_arguments(raw: str, tool: str) -> object:
    """Decode the raw ``arguments`` text of a call (``''`` → ``{}``).

    Raises:
        ToolArgumentsError: the text is not JSON.
    """
    if not raw.strip():
        return {}
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except ValueError as exc:
        raise ToolArgumentsError(
            f"arguments are not valid JSON: {exc}", tool=tool
        ) from None


# --------------------------------------------------------------------------- compiling

_SCALARS: Final[Mapping[object, Callable[[], Spec]]] = {
    str: _Str,
    int: _Int,
    float: _Float,
    bool: _Bool,
    type(None): _Null,
    None: _Null,
}


def _strip_annotated(tp: object) -> tuple[object, str | None]:
    description: str | None = None
    while typing.get_origin(tp) is typing.Annotated:
        args = typing.get_args(tp)
        for meta in args[1:]:
            if isinstance(meta, str) and description is None:
                description = meta
        tp = args[0]
    return tp, description


def compile_annotation(
    tp: object, where: str, _active: frozenset[type] = frozenset()
) -> Spec:
    """Compile annotation ``tp`` into a :class:`Spec`.

    Args:
        tp: a resolved annotation (``typing.get_type_hints(..., include_extras=True)``).
        where: what the annotation belongs to, for error messages.

    Raises:
        ToolDefinitionError: the annotation is not one the schema supports.
    """
    tp, _ = _strip_annotated(tp)
    scalar = _SCALARS.get(tp) if isinstance(tp, type) or tp is None else None
    if scalar is not None:
        return scalar()
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is list:
        return _Array(None)
    if tp is dict:
        return _Map(None)
    if origin is list:
        return _Array(compile_annotation(args[0], where, _active))
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return _Array(compile_annotation(args[0], where, _active), as_tuple=True)
        raise ToolDefinitionError(
            f"{where}: only variable-length tuples (tuple[X, ...]) are supported, got {tp!r}"
        )
    if origin is dict:
        key, value = args
        if key is not str:
            raise ToolDefinitionError(
                f"{where}: dict keys must be str (JSON object keys), got {key!r}"
            )
        return _Map(compile_annotation(value, where, _active))
    if origin is Literal:
        for v in args:
            if v is not None and type(v) not in (str, int, bool):
                raise ToolDefinitionError(
                    f"{where}: Literal values must be str, int, bool or None, got {v!r}"
                )
        return _Literal(tuple(args))
    if origin is typing.Union or origin is types.UnionType:
        members = tuple(compile_annotation(a, where, _active) for a in args)
        return _Union(members)
    if isinstance(tp, type) and attrs.has(tp):
        return _compile_attrs(tp, where, _active)
    raise ToolDefinitionError(
        f"{where}: unsupported annotation {tp!r} (supported: str, int, float, bool, None, "
        "list[X], tuple[X, ...], dict[str, X], Literal[...], unions such as X | None, attrs classes)"
    )


def _compile_attrs(cls: type[Any], where: str, active: frozenset[type]) -> Spec:
    if cls in active:
        raise ToolDefinitionError(
            f"{where}: recursive attrs class {cls.__name__} cannot be described"
        )
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception as exc:  # any resolution failure is a definition error
        raise ToolDefinitionError(
            f"{where}: cannot resolve the annotations of {cls.__name__}: {exc}"
        ) from exc
    fields: list[_Field] = []
    inner = active | {cls}
    for a in attrs.fields(cls):
        if not a.init:
            continue
        if a.name not in hints:
            raise ToolDefinitionError(
                f"{where}: field {cls.__name__}.{a.name} has no annotation"
            )
        tp, description = _strip_annotated(hints[a.name])
        spec = compile_annotation(tp, f"{where} ({cls.__name__}.{a.name})", inner)
        fields.append(
            _Field(
                key=a.alias or a.name,
                spec=spec,
                required=a.default is attrs.NOTHING,
                description=description,
            )
        )
    return _AttrsObject(cls, tuple(fields))


def compile_parameter(
    name: str, annotation: object, default: object, where: str
) -> _Field:
    """Compile one tool parameter (``default`` is ``inspect.Parameter.empty`` if none)."""
    tp, description = _strip_annotated(annotation)
    spec = compile_annotation(tp, where)
    required = default is inspect.Parameter.empty
    return _Field(
        key=name,
        spec=spec,
        required=required,
        description=description,
        default=_MISSING if required else default,
    )
