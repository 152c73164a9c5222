"""JSON schemas from Python annotations: compiling a tool's signature into specs.

Each supported annotation compiles once, at decoration time, into a small
:class:`~._specs.Spec` that knows both its JSON schema and how to check (and
convert) a decoded JSON value against it. An unsupported annotation is a
:class:`ToolDefinitionError` naming where it was found.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

import attrs

from ..errors import ToolDefinitionError
from ..loop import strip_annotated
from ._specs import (
    MISSING,
    ArraySpec,
    AttrsSpec,
    BoolSpec,
    Field,
    FloatSpec,
    IntSpec,
    LiteralSpec,
    MapSpec,
    NullSpec,
    Spec,
    StrSpec,
    UnionSpec,
)

__all__ = ["compile_annotation", "compile_parameter"]


_SCALARS: Final[Mapping[object, Callable[[], Spec]]] = {
    str: StrSpec,
    int: IntSpec,
    float: FloatSpec,
    bool: BoolSpec,
    type(None): NullSpec,
    None: NullSpec,
}


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
    tp, _ = strip_annotated(tp)
    scalar = _SCALARS.get(tp) if isinstance(tp, type) or tp is None else None
    if scalar is not None:
        return scalar()
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is list:
        return ArraySpec(None)
    if tp is dict:
        return MapSpec(None)
    if origin is list:
        return ArraySpec(compile_annotation(args[0], where, _active))
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return ArraySpec(compile_annotation(args[0], where, _active), as_tuple=True)
        raise ToolDefinitionError(
            f"{where}: only variable-length tuples (tuple[X, ...]) are supported, got {tp!r}"
        )
    if origin is dict:
        key, value = args
        if key is not str:
            raise ToolDefinitionError(
                f"{where}: dict keys must be str (JSON object keys), got {key!r}"
            )
        return MapSpec(compile_annotation(value, where, _active))
    if origin is Literal:
        for v in args:
            if v is not None and type(v) not in (str, int, bool):
                raise ToolDefinitionError(
                    f"{where}: Literal values must be str, int, bool or None, got {v!r}"
                )
        return LiteralSpec(tuple(args))
    if origin is typing.Union or origin is types.UnionType:
        members = tuple(compile_annotation(a, where, _active) for a in args)
        return UnionSpec(members)
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
    fields: list[Field] = []
    inner = active | {cls}
    for a in attrs.fields(cls):
        if not a.init:
            continue
        if a.name not in hints:
            raise ToolDefinitionError(
                f"{where}: field {cls.__name__}.{a.name} has no annotation"
            )
        tp, description = strip_annotated(hints[a.name])
        spec = compile_annotation(tp, f"{where} ({cls.__name__}.{a.name})", inner)
        fields.append(
            Field(
                key=a.alias or a.name,
                spec=spec,
                required=a.default is attrs.NOTHING,
                description=description,
            )
        )
    return AttrsSpec(cls, tuple(fields))


def compile_parameter(
    name: str, annotation: object, default: object, where: str
) -> Field:
    """Compile one tool parameter (``default`` is ``inspect.Parameter.empty`` if none)."""
    tp, description = strip_annotated(annotation)
    spec = compile_annotation(tp, where)
    required = default is inspect.Parameter.empty
    return Field(
        key=name,
        spec=spec,
        required=required,
        description=description,
        default=MISSING if required else default,
    )
