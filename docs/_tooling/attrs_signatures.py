"""Give ``attrs`` classes their ``__init__`` signature in the API reference (a griffe extension).

griffe reads source statically and knows dataclasses, not ``attrs``: an ``@attrs.frozen``
class has no ``__init__`` in its source, so its entry would show no parameters. This
extension writes the ``__init__`` that ``attrs`` generates, from the annotated fields of
the class and of its ``attrs`` bases: the parameter of a private field ``_x`` is ``x``
(or the field's ``alias``); ``init=False`` fields are left out; ``kw_only`` (of the class
or of the field) makes a parameter keyword-only; a default is the field's ``default``, its
``factory`` called, or the value assigned. A class that defines ``__init__`` keeps it, and
``init=False`` on the decorator means no generated one.
"""

from __future__ import annotations

import logging
from typing import Any

import griffe

_log = logging.getLogger("mkdocs.plugins.dsh_trio_docs")

#: The decorators that make a class an ``attrs`` class with a generated ``__init__``.
ATTRS_DECORATORS = frozenset(
    f"{module}.{name}"
    for module in ("attrs", "attr")
    for name in ("define", "frozen", "mutable", "s", "attrs")
)
#: The calls that declare a field with options.
FIELD_CALLS = frozenset({"attrs.field", "attr.ib", "attr.attrib", "attr.field"})


class AttrsSignatures(griffe.Extension):
    """Write the generated ``__init__`` of every ``attrs`` class of a package."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for cls in _classes(pkg):
            options = decorator_options(cls)
            generates_init = options is not None and options.get("init") != "False"
            if generates_init and "__init__" not in cls.members:
                cls.set_member("__init__", generated_init(cls))


def _classes(obj: griffe.Object) -> list[griffe.Class]:
    found = []
    for member in obj.members.values():
        if member.is_alias:
            continue
        if isinstance(member, griffe.Class):
            found.append(member)
        if isinstance(member, griffe.Module | griffe.Class):
            found.extend(_classes(member))
    return found


def decorator_options(cls: griffe.Class) -> dict[str, str] | None:
    """The keyword arguments of ``cls``'s attrs decorator (as source text), or ``None``."""
    for decorator in cls.decorators:
        value = decorator.value
        call = value if isinstance(value, griffe.ExprCall) else None
        function = call.function if call is not None else value
        if (
            isinstance(function, griffe.Expr)
            and function.canonical_path in ATTRS_DECORATORS
        ):
            return _keywords(call) if call is not None else {}
    return None


def _keywords(call: griffe.ExprCall) -> dict[str, Any]:
    return {
        argument.name: argument.value
        for argument in call.arguments
        if isinstance(argument, griffe.ExprKeyword)
    }


def generated_init(cls: griffe.Class) -> griffe.Function:
    """The ``__init__`` attrs generates for ``cls``: its bases' fields, then its own."""
    try:
        bases = [
            base for base in reversed(cls.mro()) if decorator_options(base) is not None
        ]
    except ValueError:
        bases = []
    parameters: dict[str, griffe.Parameter] = {}
    for owner in (*bases, cls):
        for parameter in _fields(owner):
            parameters.pop(parameter.name, None)
            parameters[parameter.name] = parameter
    ordered = sorted(
        parameters.values(), key=lambda p: p.kind is griffe.ParameterKind.keyword_only
    )
    return griffe.Function(
        "__init__",
        lineno=cls.lineno,
        endlineno=cls.lineno,
        parent=cls,
        parameters=griffe.Parameters(
            griffe.Parameter("self", kind=griffe.ParameterKind.positional_or_keyword),
            *ordered,
        ),
        returns="None",
    )


def _fields(cls: griffe.Class) -> list[griffe.Parameter]:
    class_kw_only = (decorator_options(cls) or {}).get("kw_only") == "True"
    parameters = []
    for member in cls.members.values():
        if member.is_alias or not isinstance(member, griffe.Attribute):
            continue
        if member.annotation is None or "property" in member.labels:
            continue
        class_only = "instance-attribute" not in member.labels
        if class_only and "class-attribute" in member.labels:
            continue  # a ClassVar: griffe labels it a class attribute only
        if _is_classvar(member.annotation):
            continue
        value = member.value
        options: dict[str, Any] = {}
        if (
            isinstance(value, griffe.ExprCall)
            and value.function.canonical_path in FIELD_CALLS
        ):
            options = _keywords(value)
            value = None
        if options.get("init") == "False":
            continue
        if "default" in options:
            default: str | griffe.Expr | None = options["default"]
        elif "factory" in options:
            default = f"{options['factory']}()"
        else:
            default = value
        alias = options.get("alias")
        name = str(alias).strip("'\"") if alias is not None else member.name.lstrip("_")
        keyword_only = class_kw_only or options.get("kw_only") == "True"
        parameters.append(
            griffe.Parameter(
                name,
                annotation=member.annotation,
                kind=griffe.ParameterKind.keyword_only
                if keyword_only
                else griffe.ParameterKind.positional_or_keyword,
                default=default,
                docstring=member.docstring,
            )
        )
    return parameters


def _is_classvar(annotation: str | griffe.Expr) -> bool:
    text = str(annotation)
    return text.startswith(("ClassVar", "typing.ClassVar"))
