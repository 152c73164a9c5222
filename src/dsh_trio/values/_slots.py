"""Building frozen attrs values field by field, for the runtime's hot paths."""

from __future__ import annotations

from collections.abc import Callable, Collection
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

    Hot paths build a value by storing its slots on a twin, then setting its
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


def builder(cls: type[T], *, converted: Collection[str] = ()) -> Callable[..., T]:
    """A positional constructor of the frozen attrs class ``cls`` for hot paths.

    ``builder(cls)(a, b, ...)`` takes every field, in declaration order (defaults
    are not applied), and returns a value equal to ``cls(a, b, ...)``: it is built
    on the class's :func:`twin` where it has one, else with the slot setters of
    :func:`slot_setters`; either way the fields must have no validator or
    converter. The caller vouches that the parts are valid, and passes each field
    named in ``converted`` as its converter would give it (the converter is not
    called).

    This is the one place where the runtime builds a frozen value without its
    constructor: every hot path that builds one calls a builder.

    Example::

        step_start = builder(StepStart)
        assert step_start(1, 2) == StepStart(1, 2)
        enter = builder(Enter, converted=("messages",))  # a tuple, as converted
        assert enter((message,), False) == Enter([message])
    """
    names = tuple(f.name for f in attrs.fields(cast("Any", cls)))
    params = ", ".join(f"v{i}" for i in range(len(names)))
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    mutable = twin(cls, converted=converted)
    if mutable is not None:
        stores = "".join(f"o.{name} = v{i}; " for i, name in enumerate(names))
        namespace["_twin"] = mutable
        # Legal: the twin has ``cls``'s layout (``twin`` tried the assignment once).
        body = f"o = _new(_twin); {stores}o.__class__ = _cls"
    else:
        setters = slot_setters(cls, *names, converted=converted)
        namespace.update({f"s{i}": s for i, s in enumerate(setters)})
        stores = "; ".join(f"s{i}(o, v{i})" for i in range(len(names)))
        body = f"o = _new(_cls); {stores}"
    source = f"def build({params}):\n    {body}\n    return o\n"
    # ``source`` is generated from the class's own field list.
    exec(compile(source, f"<builder of {cls.__qualname__}>", "exec"), namespace)
    build: Callable[..., T] = namespace["build"]
    build.__qualname__ = build.__name__ = f"build_{cls.__name__}"
    return build
