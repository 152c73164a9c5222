"""Building frozen attrs values field by field, for the runtime's hot paths."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar, cast

import attrs

__all__ = ["builder", "slot_setters", "twin"]

T = TypeVar("T")


def _check_plain(cls: type, converted: Collection[str]) -> None:
    """Refuse ``cls`` if a field has a validator, or a converter the caller does not
    apply itself (the fields named in ``converted``, each of which must have one)."""
    fields = attrs.fields(cast("Any", cls))
    with_converter = {f.name for f in fields if f.converter}
    unknown = set(converted) - with_converter
    if unknown:
        raise TypeError(
            f"{cls.__name__} has no field with a converter named {sorted(unknown)}"
        )
    if any(f.validator or (f.converter and f.name not in converted) for f in fields):
        raise TypeError(f"{cls.__name__} has a field with a validator or a converter")


def slot_setters(
    cls: type, *names: str, converted: Collection[str] = ()
) -> tuple[Callable[[object, object], None], ...]:
    """The slot descriptors' setters of the frozen attrs class ``cls``, in ``names`` order.

    ``names`` must be all of ``cls``'s fields, in declaration order, and no field may
    have a validator or a converter, except the fields named in ``converted``, whose
    converter the caller applies itself (checked here, once, at import). A value built
    as ``obj = object.__new__(cls)`` followed by every setter equals the one
    ``cls(...)`` builds, without the frozen class's per-field ``object.__setattr__``:
    attrs runs converters and validators in ``__init__`` only, and a slot holds
    whatever was stored in it.

    Example::

        set_turn, set_step = slot_setters(StepStart, "turn", "step")
        start = object.__new__(StepStart)
        set_turn(start, 1)
        set_step(start, 2)
        assert start == StepStart(1, 2)
    """
    declared = tuple(f.name for f in attrs.fields(cls))
    if declared != names:
        raise TypeError(f"{cls.__name__} has the fields {declared}, not {names}")
    _check_plain(cls, converted)
    return tuple(getattr(cls, name).__set__ for name in names)


def twin(cls: type, *, converted: Collection[str] = ()) -> type[Any] | None:
    """A plain slotted class with the layout of the frozen attrs class ``cls``, if
    an instance of it can become a ``cls``; else ``None``.

    A :func:`builder` builds a value by storing its slots on a twin, then setting its
    ``__class__`` to ``cls``: plain attribute stores, without the frozen class's
    ``__setattr__`` or a call per field. CPython allows that assignment between
    classes of the same layout: ``cls`` must add its slots directly to ``object``
    and have no ``__weakref__`` slot (hence ``weakref_slot=False`` on the value
    types the runtime builds on every turn). Its fields must have no validator or
    converter, except the fields named in ``converted`` (checked here, once, at
    import; see :func:`slot_setters`).

    Example::

        StartTwin = twin(StepStart)
        start = object.__new__(StartTwin)
        start.turn, start.step = 1, 2
        start.__class__ = StepStart
        assert start == StepStart(1, 2)
    """
    _check_plain(cls, converted)
    slots = cls.__dict__.get("__slots__")
    if cls.__bases__ != (object,) or not isinstance(slots, tuple):
        return None
    mutable = type(f"_{cls.__name__}Twin", (), {"__slots__": slots})
    probe: Any = object.__new__(mutable)
    try:
        probe.__class__ = cls
    except TypeError:
        return None  # another layout (a ``__weakref__`` slot, say)
    return mutable


def builder(
    cls: type[T],
    *,
    converted: Collection[str] = (),
    nested: Mapping[str, type] | None = None,
) -> Callable[..., T]:
    """A positional constructor of the frozen attrs class ``cls`` for hot paths.

    ``builder(cls)(a, b, ...)`` takes every field, in declaration order (defaults
    are not applied), and returns a value equal to ``cls(a, b, ...)``: it is built
    on the class's :func:`twin` where it has one, else with the slot setters of
    :func:`slot_setters`; either way the fields must have no validator or
    converter. The caller vouches that the parts are valid, and passes each field
    named in ``converted`` as its converter would give it (the converter is not
    called).

    ``nested`` maps a field to the class of its value, built in the same call: the
    builder takes that value's fields (in their declaration order) in place of the
    field, so a value and the value it holds cost one call (a chunk's live frame).

    Besides the log decoder's generated code (``values._fast``, on the same twins),
    this is the one place where the runtime builds a frozen value without its
    constructor: a hot path that builds one calls a builder.

    Example::

        step_start = builder(StepStart)
        assert step_start(1, 2) == StepStart(1, 2)
        enter = builder(Enter, converted=("messages",))  # a tuple, as converted
        assert enter((message,), False) == Enter([message])
        end = builder(TurnEnd, nested={"reason": Errored})
        assert end(3, failure) == TurnEnd(3, Errored(failure))
    """
    namespace: dict[str, Any] = {"_new": object.__new__}
    params: list[str] = []
    inner = dict(nested or {})
    lines = _build_lines(cls, "o", converted, inner, params, namespace)
    if inner:
        raise TypeError(f"{cls.__name__} has no field named {sorted(inner)}")
    body = "".join(f"    {line}\n" for line in lines)
    source = f"def build({', '.join(params)}):\n{body}    return o\n"
    # ``source`` is generated from the classes' own field lists.
    exec(compile(source, f"<builder of {cls.__qualname__}>", "exec"), namespace)
    build: Callable[..., T] = namespace["build"]
    build.__qualname__ = build.__name__ = f"build_{cls.__name__}"
    return build


def _build_lines(
    cls: type,
    target: str,
    converted: Collection[str],
    nested: dict[str, type],
    params: list[str],
    namespace: dict[str, Any],
) -> list[str]:
    """The statements that build a ``cls`` into the local ``target`` from the next
    parameters (appended to ``params``), its ``nested`` fields first (each taken
    out of ``nested``); the names they use are put in ``namespace``."""
    names = tuple(f.name for f in attrs.fields(cast("Any", cls)))
    lines: list[str] = []
    values: list[str] = []
    for name in names:
        part = nested.pop(name, None)
        if part is None:
            values.append(f"v{len(params)}")
            params.append(values[-1])
        else:
            values.append(f"{target}_{name}")
            lines += _build_lines(part, values[-1], (), {}, params, namespace)
    kind = f"_cls_{target}"
    namespace[kind] = cls
    mutable = twin(cls, converted=converted)
    if mutable is not None:
        namespace[f"_twin_{target}"] = mutable
        # The twin defines neither ``__new__`` nor ``__init__``: calling it is
        # ``object.__new__(twin)``, through the cheaper call of a type. The class
        # assignment is legal: the twin has ``cls``'s layout (``twin`` tried it once).
        lines.append(f"{target} = _twin_{target}()")
        lines += [f"{target}.{n} = {v}" for n, v in zip(names, values, strict=True)]
        lines.append(f"{target}.__class__ = {kind}")
    else:
        setters = slot_setters(cls, *names, converted=converted)
        lines.append(f"{target} = _new({kind})")
        for k, (setter, value) in enumerate(zip(setters, values, strict=True)):
            namespace[f"_set_{target}_{k}"] = setter
            lines.append(f"_set_{target}_{k}({target}, {value})")
    return lines
