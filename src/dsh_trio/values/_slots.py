"""Building frozen attrs values field by field, for the runtime's hot paths."""

from __future__ import annotations

from collections.abc import Callable

import attrs

__all__ = ["slot_setters"]


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
