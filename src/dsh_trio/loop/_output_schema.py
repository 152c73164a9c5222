"""The JSON schema of a typed output, and the reading of a model's arguments into it.

:func:`output_schema` derives the arguments schema of the ``final_result`` tool from an
output type; :func:`read_output` reads the arguments of one call: JSON text, checked
against that schema (problems named by their JSON path, ``$.lines[0].qty``), then
structured by the project's cattrs converter (which also runs the attrs validators).

Supported types (anything else is refused where the type is given):

- ``str``, ``int``, ``float``, ``bool``, ``None``;
- ``list[X]``, ``tuple[X, ...]``, ``dict[str, X]``;
- ``X | None`` (``Optional[X]``); no other unions;
- ``Literal[...]`` of str, int, bool or None values;
- :class:`enum.Enum` subclasses whose values are str or int (``StrEnum`` included; an
  enum that also derives from ``int``, ``str`` or ``float``, such as ``IntEnum``, is
  refused: the converter would hand back the plain value);
- attrs classes whose fields have these types, nested but not recursive; each field
  is written under its wire key (``line_items`` → ``lineItems``, as the converter reads
  it), a field with a default is optional, ``init=False`` fields are left out, and
  ``Annotated[X, "text"]`` gives a field its description.

An attrs class is the arguments object itself; any other type is the value of the
arguments' ``response`` key (tool arguments are always a JSON object).
"""

from __future__ import annotations

import enum
import inspect
import json
import types
import typing
from collections.abc import Sequence
from typing import Any, Final, Literal

import attrs
import cattrs

from ..errors import ToolDefinitionError
from ..values import JsonValue, converter, shape as wire_shape

__all__ = ["OutputSchema", "output_schema", "read_output"]

#: The key a non-object output is given under in the arguments object.
RESPONSE_KEY: Final = "response"
#: At most this many problems are listed for one call.
_MAX_PROBLEMS: Final = 10

_SCALARS: Final[dict[object, dict[str, JsonValue]]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
    None: {"type": "null"},
}

_SUPPORTED: Final = (
    "str, int, float, bool, None, list[X], tuple[X, ...], dict[str, X], X | None, "
    "Literal[...], Enum subclasses with str or int values, attrs classes"
)


@attrs.frozen(eq=False)
class OutputSchema:
    """What the ``final_result`` tool of one output type offers and reads.

    Attributes:
        output_type: the type the arguments are structured into.
        parameters: the JSON schema of the arguments object.
        description: the tool's model-facing description.
        wrapped: the value is the arguments' ``response`` key (not an attrs class).
    """

    output_type: Any
    parameters: dict[str, JsonValue]
    description: str
    wrapped: bool

    @property
    def type_name(self) -> str:
        """A readable name of the output type, for messages."""
        return _name(self.output_type)


def _name(tp: object) -> str:
    return tp.__name__ if isinstance(tp, type) else repr(tp)


def strip_annotated(tp: object) -> tuple[object, str | None]:
    """``tp`` without its ``Annotated`` layers, and the first string among their metadata."""
    description: str | None = None
    while typing.get_origin(tp) is typing.Annotated:
        args = typing.get_args(tp)
        for meta in args[1:]:
            if isinstance(meta, str) and description is None:
                description = meta
        tp = args[0]
    return tp, description


def _refuse(where: str, what: str) -> ToolDefinitionError:
    return ToolDefinitionError(
        f"output_type {where}: {what} (typed output supports {_SUPPORTED})"
    )


def _enum_schema(cls: type[enum.Enum], where: str) -> dict[str, JsonValue]:
    if not issubclass(cls, enum.StrEnum) and issubclass(cls, (int, str, float)):
        raise _refuse(
            where,
            f"enum {cls.__name__} also derives from "
            f"{next(b.__name__ for b in (int, str, float) if issubclass(cls, b))}, which "
            "the converter reads as the plain value; derive it from enum.Enum (or "
            "enum.StrEnum) only",
        )
    values: list[JsonValue] = []
    for member in cls:
        value = member.value
        if value.__class__ is not str and value.__class__ is not int:
            raise _refuse(
                where,
                f"enum {cls.__name__}.{member.name} has the value {value!r}; only str "
                "and int values can be written as JSON",
            )
        values.append(value)
    if not values:
        raise _refuse(where, f"enum {cls.__name__} has no members")
    return {"enum": values}


def _compile(tp: object, where: str, active: frozenset[type]) -> dict[str, JsonValue]:
    tp, _ = strip_annotated(tp)
    if (isinstance(tp, type) or tp is None) and tp in _SCALARS:
        return dict(_SCALARS[tp])
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is list and len(args) == 1:
        return {"type": "array", "items": _compile(args[0], where, active)}
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": _compile(args[0], where, active)}
        raise _refuse(where, f"only tuple[X, ...] is supported, got {tp!r}")
    if origin is dict and len(args) == 2:
        if args[0] is not str:
            raise _refuse(where, f"dict keys must be str, got {args[0]!r}")
        return {
            "type": "object",
            "additionalProperties": _compile(args[1], where, active),
        }
    if origin is Literal:
        for value in args:
            if value is not None and type(value) not in (str, int, bool):
                raise _refuse(
                    where,
                    f"Literal values must be str, int, bool or None, got {value!r}",
                )
        return {"enum": list(args)}
    if origin is typing.Union or origin is types.UnionType:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2:
            return {
                "anyOf": [_compile(rest[0], where, active), {"type": "null"}],
            }
        raise _refuse(where, f"only X | None unions are supported, got {tp!r}")
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum_schema(tp, where)
    if isinstance(tp, type) and attrs.has(tp):
        return _attrs_schema(tp, where, active)
    raise _refuse(where, f"unsupported type {tp!r}")


def _attrs_schema(
    cls: type[Any], where: str, active: frozenset[type]
) -> dict[str, JsonValue]:
    if cls in active:
        raise _refuse(where, f"attrs class {cls.__name__} is recursive")
    try:
        wire = wire_shape(cls)  # resolves the field types (``attrs.resolve_types``)
    except Exception as exc:  # any resolution failure names the class
        raise _refuse(
            where,
            f"cannot resolve the annotations of {cls.__name__}: {exc}; define the "
            "classes at module level, or resolve them first with "
            "attrs.resolve_types(cls, globals())",
        ) from exc
    inits = {a.name: a.init for a in attrs.fields(cls)}
    inner = active | {cls}
    properties: dict[str, JsonValue] = {}
    required: list[JsonValue] = []
    for field in wire.fields:
        if not inits.get(field.name, True):
            continue
        tp, description = strip_annotated(field.type)
        schema = _compile(tp, f"{where} ({cls.__name__}.{field.name})", inner)
        if description is not None:
            schema["description"] = description
        properties[field.key] = schema
        if field.required:
            required.append(field.key)
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def output_schema(output_type: object) -> OutputSchema:
    """The ``final_result`` schema of ``output_type`` (see the module's docstring).

    Example::

        @attrs.frozen
        class Invoice:
            number: str
            total: float

        output_schema(Invoice).parameters["required"]  # ["number", "total"]

    Raises:
        ToolDefinitionError: a type (or a part of it) that cannot be described or
            structured; the message names where it was found.
    """
    where = _name(output_type)
    tp, _ = strip_annotated(output_type)
    schema = _compile(tp, where, frozenset())
    intro = (
        "Give the final result of this turn: call this tool once, with the result "
        "as its arguments."
    )
    if isinstance(tp, type) and attrs.has(tp):
        doc = inspect.getdoc(tp)
        # attrs writes a signature as the docstring of a class that has none.
        if doc and not doc.startswith(f"{tp.__name__}("):
            intro = f"{intro}\n\n{doc}"
        return OutputSchema(tp, schema, intro, wrapped=False)
    parameters: dict[str, JsonValue] = {
        "type": "object",
        "properties": {RESPONSE_KEY: schema},
        "required": [RESPONSE_KEY],
        "additionalProperties": False,
    }
    return OutputSchema(tp, parameters, intro, wrapped=True)


# --------------------------------------------------------------------------- reading


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if value.__class__ is bool:
        return "boolean"
    if value.__class__ is int:
        return "integer"
    if value.__class__ is float:
        return "number"
    if value.__class__ is str:
        return "string"
    if value.__class__ is list:
        return "array"
    if value.__class__ is dict:
        return "object"
    return type(value).__name__


def _got(value: object) -> str:
    """``value`` as a problem shows it: its JSON kind, and a scalar's text."""
    kind = _kind(value)
    if value is not None and not isinstance(value, (bool, int, float, str)):
        return kind
    text = json.dumps(value, ensure_ascii=False)
    return f"{kind} {text if len(text) <= 60 else text[:57] + '...'}"


_MATCHES: Final[dict[str, tuple[str, ...]]] = {
    "string": ("string",),
    "integer": ("integer",),
    "number": ("integer", "number"),
    "boolean": ("boolean",),
    "null": ("null",),
    "array": ("array",),
    "object": ("object",),
}


def _key_path(path: str, key: str) -> str:
    return f"{path}.{key}" if key.isidentifier() else f"{path}[{json.dumps(key)}]"


def _check(schema: dict[str, Any], value: object, path: str, out: list[str]) -> None:
    """Append to ``out`` what is wrong with ``value`` against ``schema`` (our subset)."""
    alternatives = schema.get("anyOf")
    if alternatives is not None:  # X | None
        if value is None:
            return
        _check(alternatives[0], value, path, out)
        return
    allowed = schema.get("enum")
    if allowed is not None:
        if not any(a == value and type(a) is type(value) for a in allowed):
            options = ", ".join(json.dumps(a) for a in allowed)
            out.append(f"{path}: expected one of {options}, got {_got(value)}")
        return
    expected = schema["type"]
    kind = _kind(value)
    if kind not in _MATCHES[expected]:
        article = "an" if expected[0] in "aeiou" else "a"
        out.append(f"{path}: expected {article} {expected}, got {_got(value)}")
        return
    if expected == "array":
        assert isinstance(value, list)
        for i, item in enumerate(value):
            _check(schema["items"], item, f"{path}[{i}]", out)
    elif expected == "object":
        assert isinstance(value, dict)
        properties: dict[str, Any] = schema.get("properties", {})
        for key in schema.get("required", ()):
            if key not in value:
                out.append(f"{path}: missing the required key {json.dumps(key)}")
        extra = schema.get("additionalProperties", False)
        for key, item in value.items():
            if key in properties:
                _check(properties[key], item, _key_path(path, key), out)
            elif extra is False:
                out.append(f"{path}: unexpected key {json.dumps(key)}")
            else:
                _check(extra, item, _key_path(path, key), out)


def _structure_problems(exc: BaseException, path: str, out: list[str]) -> None:
    """What the converter refused, by JSON path (wire keys, not attribute names)."""
    if isinstance(exc, cattrs.ClassValidationError):
        cls = exc.cl
        keys = {f.name: f.key for f in wire_shape(cls).fields} if attrs.has(cls) else {}
        with_notes, without = exc.group_exceptions()
        for sub, note in with_notes:
            _structure_problems(
                sub, _key_path(path, keys.get(note.name, note.name)), out
            )
        for plain in without:
            _structure_problems(plain, path, out)
    elif isinstance(exc, cattrs.IterableValidationError):
        iterable_notes, others = exc.group_exceptions()
        for item, inote in iterable_notes:
            index = inote.index
            step = (
                f"[{index}]"
                if isinstance(index, int)
                else f"[{json.dumps(str(index))}]"
            )
            _structure_problems(item, f"{path}{step}", out)
        for other in others:
            _structure_problems(other, path, out)
    elif isinstance(exc, BaseExceptionGroup):
        for member in exc.exceptions:
            _structure_problems(member, path, out)
    elif isinstance(exc, cattrs.ForbiddenExtraKeysError):
        out.append(f"{path}: unexpected keys {sorted(exc.extra_fields)}")
    else:
        text = str(exc) or type(exc).__name__
        out.append(f"{path}: {text if len(text) <= 200 else text[:197] + '...'}")


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def read_output(schema: OutputSchema, arguments: str) -> tuple[object, Sequence[str]]:
    """The value of one ``final_result`` call's ``arguments``, or what is wrong with them.

    Returns ``(value, ())`` for arguments that structure and validate, else
    ``(None, problems)``: each problem one line, ``"<JSON path>: <what>"``, at most ten.
    Synchronous; never raises for what the model sent.
    """
    text = arguments.strip()
    try:
        decoded: object = (
            json.loads(text, parse_constant=_refuse_constant) if text else {}
        )
    except (ValueError, RecursionError) as exc:
        return None, (f"$: the arguments are not valid JSON ({exc})",)
    problems: list[str] = []
    _check(schema.parameters, decoded, "$", problems)
    if not problems:
        assert isinstance(decoded, dict)
        data = decoded[RESPONSE_KEY] if schema.wrapped else decoded
        path = f"$.{RESPONSE_KEY}" if schema.wrapped else "$"
        try:
            return converter.structure(data, schema.output_type), ()
        except Exception as exc:  # a validator, a hook: the model's value was refused
            _structure_problems(exc, path, problems)
            if not problems:
                problems.append(f"{path}: {type(exc).__name__}")
    if len(problems) > _MAX_PROBLEMS:
        more = len(problems) - _MAX_PROBLEMS
        problems = [*problems[:_MAX_PROBLEMS], f"... and {more} more"]
    return None, tuple(problems)
