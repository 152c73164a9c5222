"""Point public classes and functions at their public module, as trio does."""

from __future__ import annotations

import contextlib
import importlib
import typing
from collections.abc import Iterable

import attrs

__all__ = ["fixup_module_metadata"]


def fixup_module_metadata(module_name: str, names: Iterable[str] | None = None) -> None:
    """Set ``__module__`` of the classes and functions ``module_name`` exports to it.

    Code lives in private modules (``dsh_trio.loop._agent``); reprs, tracebacks, pickles
    and documentation should name the public home instead (``dsh_trio.loop.Agent``). Only
    objects still claiming a private module are changed, so the first public module to
    claim a name keeps it. Names the module resolves lazily (PEP 562) are left alone
    unless ``names`` lists them.

    Args:
        module_name: the public module, already imported or importable.
        names: the names to fix (lazy ones are resolved); by default the names of the
            module's ``__all__`` that are already bound.
    """
    module = importlib.import_module(module_name)
    for name in module.__all__ if names is None else names:
        obj = getattr(module, name) if names is not None else _bound(module, name)
        home = getattr(obj, "__module__", None)
        if not (
            isinstance(home, str)
            and home.startswith("dsh_trio.")
            and "._" in home
            and (isinstance(obj, type) or callable(obj))
        ):
            continue
        if isinstance(obj, type):
            _resolve_annotations(obj, home)
        with contextlib.suppress(AttributeError, TypeError):
            obj.__module__ = module_name


def _bound(module: object, name: str) -> object:
    """``module.<name>`` if bound, without triggering a lazy (PEP 562) import."""
    return vars(module).get(name)


def _resolve_annotations(cls: type, home: str) -> None:
    """Evaluate ``cls``'s own string annotations in ``home``, the module that defines it.

    ``typing.get_type_hints`` and attrs resolve string annotations in the namespace of
    ``cls.__module__``; once that names the public package, names such as ``ClassVar``
    would no longer be found there. Each annotation is resolved on its own (through a
    probe class living in ``home``), so a name imported only for type checking stays a
    string without stopping the others.
    """
    own = cls.__dict__.get("__annotations__", {})  # noqa: RUF063 (the class's own dict)
    for key, value in list(own.items()):
        if isinstance(value, str):
            probe = type(
                "probe", (), {"__annotations__": {key: value}, "__module__": home}
            )
            with contextlib.suppress(NameError, AttributeError, SyntaxError, TypeError):
                own[key] = typing.get_type_hints(
                    probe, localns=dict(vars(cls)), include_extras=True
                )[key]
    if attrs.has(cls):
        with contextlib.suppress(NameError):
            attrs.resolve_types(cls)
