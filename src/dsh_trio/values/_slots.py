"""Building frozen attrs values field by field, for the runtime's hot paths."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import attrs

__all__ = ["builder", "slot_setters"]

T = TypeVar("T")


def slot_setters(
    cls: type, *names: str
) -> tuple[Callable[[object, object], None], ...]:
    """The slot descriptors' setters of the frozen attrs class ``cls``, in ``names`` order.

    ``names`` must be all of ``cls``'s fields, in declaration order, and no field may
    have a validator or a converter (checked here, once, at import). A value built
    as ``obj = object.__new__(cls)`` followed by every setter equals the one
    ``cls(...)`` builds, without the frozen class's per-field ``object.__setattr__``.

    Example::

        set_turn, set_step = slot_setters(StepStart, "turn", "step")
        start = object.__new__(StepStart)
        set_turn(start, 1)
        set_step(start, 2)
        assert start == StepStart(1, 2)
    """
    fields = attrs.fields(cls)
    declared = tuple(f.name for f in fields)
    if declared != names:
        raise TypeError(f"{cls.__name__} has the fields {declared}, not {names}")
    if any(f.validator or f.converter for f in fields):
        raise TypeError(f"{cls.__name__} has a field with a validator or a converter")
    return tuple(getattr(cls, name).__set__ for name in names)


def builder(cls: type[T]) -> Callable[..., T]:
    """A positional constructor of the frozen attrs class ``cls`` for hot paths.

    ``builder(cls)(a, b, ...)`` takes every field, in declaration order (defaults
    are not applied), and returns a value equal to ``cls(a, b, ...)``: it is built
    with the slot setters of :func:`slot_setters`, so the same fields must have no
    validator or converter. The caller vouches that the parts are valid.

    Example::

        step_start = builder(StepStart)
        assert step_start(1, 2) == StepStart(1, 2)
    """
    names = tuple(f.name for f in attrs.fields(cast("Any", cls)))
    setters = slot_setters(cls, *names)
    params = ", ".join(f"v{i}" for i in range(len(names)))
    body = "; ".join(f"s{i}(o, v{i})" for i in range(len(names)))
    namespace: dict[str, Any] = {f"s{i}": s for i, s in enumerate(setters)}
    namespace.update(_new=object.__new__, _cls=cls)
    source = f"def build({params}):\n    o = _new(_cls); {body}\n    return o\n"
    # ``source`` is generated from the class's own field list.
    exec(compile(source, f"<builder of {cls.__qualname__}>", "exec"), namespace)
    build: Callable[..., T] = namespace["build"]
    build.__qualname__ = build.__name__ = f"build_{cls.__name__}"
    return build
