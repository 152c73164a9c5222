"""Render the docstrings' Sphinx markup in the API reference (a griffe extension).

dsh_trio's docstrings use Sphinx roles (``:class:`Agent```, ``:meth:`run```) and literal
blocks introduced by ``::`` (``Example::``). Markdown would show both as literal text.
mkdocstrings loads this extension (``mkdocs.yml``); once the package is loaded, it rewrites
every docstring of it:

- A role naming a public object (one a public module exports, or a public member of such
  a class) becomes an autorefs cross-reference to the object's canonical path, which
  mkdocstrings registers for its entry wherever the reference renders it. So it renders as
  a link, and ``mkdocs build --strict`` fails when that object has no entry.
- A role naming something private, or outside the package (trio, the standard library,
  builtins), becomes inline code: the reference has no entry to link to.
- A role whose target resolves to nothing stays a cross-reference to the name as written,
  so a rendered one fails ``mkdocs build --strict`` ("Could not find cross-reference
  target").
- A paragraph ending in ``::`` and the indented block after it become the paragraph ending
  in ``:`` (or nothing, for a lone ``::`` or one after a space) and a fenced code block:
  ``python`` when the block compiles as Python (top-level ``await`` allowed), ``pycon`` for
  a doctest, else ``text`` (or the language the paragraph names: TOML, YAML, JSON).

The public modules are the package itself, the modules its ``_PUBLIC_MODULES`` tuple names
and those of the ``also_public`` option.
"""

from __future__ import annotations

import ast
import builtins
import importlib.util
import logging
import re
import textwrap
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import griffe

_log = logging.getLogger("mkdocs.plugins.dsh_trio_docs")

#: A Sphinx role of the Python domain: ``:class:`target```, ``:py:meth:`title <target>```.
ROLE = re.compile(
    r":(?:py:)?(?P<role>class|meth|func|attr|exc|data|const|obj|mod|type):"
    r"`(?P<body>[^`]+)`"
)
_EXPLICIT_TITLE = re.compile(r"(?P<title>.+?)\s*<(?P<target>[^<>]+)>")
_CALLABLE_ROLES = frozenset({"meth", "func"})
_DOC_COMMENT = re.compile(r"^\s*#:(?: (?P<text>.*))?$")
_TRAILING_DOC_COMMENT = re.compile(r"\S.*\s#:\s(?P<text>.*)$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_LANGUAGES = (("toml", "toml"), ("yaml", "yaml"), ("json", "json"))


class _External:
    """The target lies outside the package (trio, the standard library, builtins)."""


EXTERNAL = _External()


class SphinxMarkup(griffe.Extension):
    """Rewrite the Sphinx roles and ``::`` literal blocks of a package's docstrings.

    Args:
        package: the package whose docstrings are rewritten.
        also_public: public modules beyond the package and its ``_PUBLIC_MODULES``.
    """

    def __init__(
        self, package: str = "dsh_trio", also_public: Iterable[str] = ()
    ) -> None:
        super().__init__()
        self.package = package
        self.also_public = tuple(also_public)

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.path != self.package:
            return
        public = public_paths(pkg, (pkg.path, *declared_public(pkg), *self.also_public))
        objects = list(_objects(pkg))
        for obj in objects:
            if obj.is_attribute and obj.docstring is None:
                doc_comment(obj)
        for obj in objects:
            if obj.docstring is not None:
                obj.docstring.value = convert(obj.docstring.value, obj, public)


def doc_comment(attr: griffe.Object) -> None:
    """Give ``attr`` the ``#:`` comment above it (or after it, on its line) as docstring.

    Sphinx reads such comments as the attribute's documentation; griffe reads only a
    string literal after the assignment.
    """
    if attr.lineno is None or not isinstance(attr.filepath, Path):
        return
    try:
        lines = attr.lines_collection[attr.filepath]
    except KeyError:
        return
    first = attr.lineno - 1
    if not 0 <= first < len(lines):
        return
    comment: list[str] = []
    index = first - 1
    while index >= 0 and (match := _DOC_COMMENT.match(lines[index])):
        comment.insert(0, match["text"] or "")
        index -= 1
    if not comment and (match := _TRAILING_DOC_COMMENT.search(lines[first])):
        comment = [match["text"]]
    if comment:
        attr.docstring = griffe.Docstring(
            "\n".join(comment).strip(),
            lineno=index + 2,
            endlineno=first,
            parent=attr,
        )


def declared_public(pkg: griffe.Module) -> tuple[str, ...]:
    """The module paths of ``pkg._PUBLIC_MODULES`` (a tuple of string literals)."""
    member = pkg.members.get("_PUBLIC_MODULES")
    if member is None or member.is_alias or not isinstance(member, griffe.Attribute):
        return ()
    try:
        value = ast.literal_eval(str(member.value))
    except (ValueError, SyntaxError):
        _log.warning("%s._PUBLIC_MODULES is not a literal tuple of names", pkg.path)
        return ()
    return tuple(str(name) for name in value)


def public_paths(pkg: griffe.Module, modules: Iterable[str]) -> frozenset[str]:
    """The canonical paths of the public modules and of every name they export."""
    found: set[str] = set()
    for path in modules:
        try:
            module = pkg.modules_collection[path]
        except (KeyError, griffe.AliasResolutionError):
            _log.warning("public module %s not found", path)
            continue
        found.add(module.path)
        if module.exports is not None:
            names = [str(name) for name in module.exports]
        else:
            names = [name for name in module.members if not name.startswith("_")]
        for name in names:
            member = module.members.get(name)
            if member is None:
                continue
            target = _final(member)
            if target is not None:
                found.add(target.canonical_path)
    return frozenset(found)


def _objects(obj: griffe.Object) -> Iterator[griffe.Object]:
    """``obj`` and every object defined in it (aliases excluded)."""
    yield obj
    for member in obj.members.values():
        if isinstance(member, griffe.Object):
            yield from _objects(member)


# ------------------------------------------------------------------ conversion


def convert(text: str, obj: griffe.Object, public: frozenset[str]) -> str:
    """``text`` (a docstring of ``obj``) with its roles and literal blocks as Markdown."""
    out: list[str] = []
    in_fence = False
    for line in literal_blocks(text).split("\n"):
        if _FENCE.match(line):
            in_fence = not in_fence
        out.append(line if in_fence else roles(line, obj, public))
    return "\n".join(out)


def roles(line: str, obj: griffe.Object, public: frozenset[str]) -> str:
    """``line`` with each Sphinx role as a cross-reference or inline code."""
    return ROLE.sub(lambda match: _role(match, obj, public), line)


def _role(match: re.Match[str], obj: griffe.Object, public: frozenset[str]) -> str:
    role, body = match["role"], match["body"].strip()
    if explicit := _EXPLICIT_TITLE.fullmatch(body):
        title, target = explicit["title"], explicit["target"].strip()
        link = not target.startswith("!")
        target = target.lstrip("~!")
    else:
        link = not body.startswith("!")
        short = body.startswith("~")
        target = body.lstrip("~!")
        title = target.rsplit(".", 1)[-1] if short else target.lstrip(".")
        if role in _CALLABLE_ROLES and not title.endswith(")"):
            title += "()"
    code = f"`{title}`"
    if not link:
        return code
    found = lookup(obj, target)
    if found is EXTERNAL:
        return code
    if found is None:
        # Nothing by that name: a cross-reference nothing registers, so that a rendered
        # one fails the strict build and names the docstring.
        return f"[{code}][{absolute(obj, target)}]"
    assert isinstance(found, griffe.Object | griffe.Alias)
    target_object = _final(found)
    if target_object is None:
        return code
    if is_public(target_object, public):
        return f"[{code}][{entry(target_object).canonical_path}]"
    return code


def entry(obj: griffe.Object) -> griffe.Object:
    """The object whose entry documents ``obj``: itself, or its class when it has none.

    The reference renders a class's member only when it has a docstring.
    """
    parent = obj.parent
    if obj.docstring is None and parent is not None and parent.is_class:
        return entry(parent)
    return obj


def absolute(obj: griffe.Object, target: str) -> str:
    """A relative target (``._specs.Spec``) made absolute from ``obj``'s module."""
    dots = len(target) - len(target.lstrip("."))
    if not dots:
        return target
    base: griffe.Object | None = obj.module
    if base is not None and not base.is_init_module:
        base = base.parent
    for _ in range(dots - 1):
        base = base.parent if base is not None else None
    rest = target[dots:]
    if base is None:
        return rest
    return f"{base.path}.{rest}" if rest else base.path


def lookup(
    obj: griffe.Object, target: str
) -> griffe.Object | griffe.Alias | _External | None:
    """What ``target``, written in a docstring of ``obj``, names.

    A dotted target's first name is looked up as Python would from ``obj`` (its members,
    inherited ones included, then its parents' up to its module), then as an absolute
    path (the package itself, another module, a builtin).
    """
    target = absolute(obj, target)
    head, _, rest = target.partition(".")
    found = _in_scope(obj, head)
    if found is None:
        if head != _root(obj).name:
            return EXTERNAL if _importable_or_builtin(head) else None
        try:
            absolute_found = obj.modules_collection[target]
        except (KeyError, ValueError):
            return None
        except (griffe.AliasResolutionError, griffe.CyclicAliasError):
            return EXTERNAL
        return (
            absolute_found
            if isinstance(absolute_found, griffe.Object | griffe.Alias)
            else None
        )
    for name in rest.split(".") if rest else ():
        final = _final(found)
        if final is None:
            return EXTERNAL
        members = final.all_members if final.is_class else final.members
        if name not in members:
            return None
        found = members[name]
    return found


def _root(obj: griffe.Object) -> griffe.Object:
    while obj.parent is not None:
        obj = obj.parent
    return obj


def _importable_or_builtin(name: str) -> bool:
    if hasattr(builtins, name):
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _in_scope(obj: griffe.Object, name: str) -> griffe.Object | griffe.Alias | None:
    scope: griffe.Object | None = obj
    while scope is not None:
        if scope.name == name and not scope.is_module:
            return scope
        members = scope.all_members if scope.is_class else scope.members
        if name in members:
            return members[name]
        scope = scope.parent
    return None


def _final(found: griffe.Object | griffe.Alias) -> griffe.Object | None:
    if isinstance(found, griffe.Object):
        return found
    try:
        target = found.final_target
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None
    return target


def is_public(obj: griffe.Object, public: frozenset[str]) -> bool:
    """Whether the reference documents ``obj``: exported, or a public member of such a class."""
    if obj.canonical_path in public:
        return True
    parent = obj.parent
    return (
        parent is not None
        and parent.is_class
        and not obj.name.startswith("_")
        and is_public(parent, public)
    )


# ------------------------------------------------------------------ literal blocks


def literal_blocks(text: str) -> str:
    """``text`` with each reStructuredText literal block (after ``::``) fenced."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.rstrip()
        if not stripped.endswith("::") or _FENCE.match(line):
            out.append(line)
            i += 1
            continue
        indent = len(line) - len(line.lstrip())
        block, end = _indented_block(lines, i + 1, indent)
        if not block:
            out.append(line)
            i += 1
            continue
        intro = stripped[:-2]
        if intro.strip() and not intro.endswith((" ", "\t")):
            out.append(intro + ":")
        elif intro.strip():
            out.append(intro.rstrip())
        code = textwrap.dedent("\n".join(block))
        pad = " " * indent
        if out and out[-1].strip():
            out.append("")
        out.append(f"{pad}```{_language(code, _paragraph(out))}")
        out.extend(
            f"{pad}{code_line}" if code_line else "" for code_line in code.split("\n")
        )
        out.append(f"{pad}```")
        i = end
        if i < len(lines) and lines[i].strip():
            out.append("")
    return "\n".join(out)


def _indented_block(lines: list[str], start: int, indent: int) -> tuple[list[str], int]:
    """The block indented deeper than ``indent`` after the blank line at ``start``."""
    i = start
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i == start or i == len(lines):
        return [], start
    block: list[str] = []
    while i < len(lines):
        line = lines[i]
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        block.append(line)
        i += 1
    while block and not block[-1].strip():
        block.pop()
        i -= 1
    return block, i


def _paragraph(out: list[str]) -> str:
    """The paragraph just written to ``out`` (the one introducing a block)."""
    para: list[str] = []
    for line in reversed(out):
        if not line.strip():
            if para:
                break
            continue
        para.append(line)
    return " ".join(reversed(para)).lower()


def _language(code: str, intro: str) -> str:
    if code.lstrip().startswith(">>>"):
        return "pycon"
    for word, language in _LANGUAGES:
        if word in intro:
            return language
    try:
        compile(
            code,
            "<example>",
            "exec",
            flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
        )
    except SyntaxError:
        return "text"
    return "python"
