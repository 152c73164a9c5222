"""docs/architecture.md names only things that exist.

Every code span of the page that looks like a path (``loop/_work.py``, ``values/``,
``tests/test_layers.py``), a module of a package (``_wire``), a dotted name under
``dsh_trio`` (``dsh_trio.loop.Agent``), a class (``AgentWork``, ``Idle(last_turn)``) or
a ``Class.member`` (``AgentWork.open_turn``) must resolve in the source tree, so the
page cannot silently keep a name the code dropped.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
import trio

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "dsh_trio"
DOC = ROOT / "docs" / "architecture.md"

SPAN = re.compile(r"`([^`\n]+)`")
PATH = re.compile(r"^\.?[\w.*-]+(/[\w.*-]*)+$|^\.importlinter$")
MODULE = re.compile(r"^_[a-z]\w*$")
DOTTED = re.compile(r"^dsh_trio(\.\w+)+$")
CLASS = re.compile(r"^([A-Z][A-Za-z0-9]*)(\(.*\))?$")
MEMBER = re.compile(r"^([A-Z][A-Za-z0-9]*)\.(\w+)(\(.*\))?$")


@cache
def classes() -> dict[str, list[ast.ClassDef]]:
    """Every class defined in the package, by name (several modules may share one)."""
    found: dict[str, list[ast.ClassDef]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append(node)
    return found


def _members(node: ast.ClassDef) -> set[str]:
    """The names a class defines: methods, class attributes, annotated fields, slots
    and attributes its methods assign on ``self``."""
    names: set[str] = set()
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(item.name)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            names.add(item.target.id)
        elif isinstance(item, ast.Assign):
            for target in item.targets:
                if isinstance(target, ast.Name):
                    names.add(target.id)
                    if target.id == "__slots__" and isinstance(
                        item.value, (ast.Tuple, ast.List)
                    ):
                        names.update(
                            e.value
                            for e in item.value.elts
                            if isinstance(e, ast.Constant) and isinstance(e.value, str)
                        )
    for sub in ast.walk(node):
        if (
            isinstance(sub, ast.Attribute)
            and isinstance(sub.ctx, ast.Store)
            and isinstance(sub.value, ast.Name)
            and sub.value.id == "self"
        ):
            names.add(sub.attr)
    return names


@cache
def modules() -> frozenset[str]:
    return frozenset(path.stem for path in PACKAGE.rglob("_*.py"))


def problem(span: str) -> str | None:
    """What is wrong with the code span ``span``, or ``None`` (also for spans that
    name nothing this test checks, such as an event type or an expression)."""
    if span.startswith(("agent/", "turn/", "step/", "user/", "assistant/", "tool/")):
        return None  # an event type, not a path
    if span.startswith(("session/event", "system/message")):
        return None
    if PATH.match(span):
        top = span.split("/")[0]
        base = PACKAGE
        if top in {"src", "tests", "docs", "scripts"} or span.startswith("."):
            base = ROOT
        elif top == "dsh_trio":
            base = PACKAGE.parent
        if "*" in span:
            return None if any(base.glob(span)) else f"no file matches {span}"
        return None if (base / span).exists() else f"no such path: {span}"
    if MODULE.match(span):
        return None if span in modules() else f"no module {span}.py in src/dsh_trio"
    if DOTTED.match(span):
        parts = span.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                obj: object = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            for attr in parts[cut:]:
                if not hasattr(obj, attr):
                    return f"{span}: {'.'.join(parts[:cut])} has no {attr}"
                obj = getattr(obj, attr)
            return None
        return f"no module {span}"  # pragma: no cover  # dsh_trio always imports
    member = MEMBER.match(span)
    if member:
        name, attr = member[1], member[2]
        nodes = classes().get(name)
        if not nodes:
            return f"{span}: no class {name} in src/dsh_trio"
        if not any(attr in _members(node) for node in nodes):
            return f"{span}: class {name} has no {attr}"
        return None
    cls = CLASS.match(span)
    if cls and cls[1] not in classes() and not _outside(cls[1]):
        return f"no class {cls[1]} in src/dsh_trio"
    return None


def _outside(name: str) -> bool:
    """``name`` is a builtin (``None``, ``KeyboardInterrupt``) or a name of trio."""
    return hasattr(builtins, name) or hasattr(trio, name)


def spans(text: str) -> Iterator[str]:
    # Fenced blocks (the layer diagram) are prose, not names to check.
    text = re.sub(r"^```.*?^```$", "", text, flags=re.MULTILINE | re.DOTALL)
    for match in SPAN.finditer(text):
        yield match[1].strip()


def test_every_name_on_the_page_exists() -> None:
    text = DOC.read_text(encoding="utf-8")
    found = list(spans(text))
    assert len(found) > 100  # the page is read, and its spans are found
    problems = [p for span in found if (p := problem(span)) is not None]
    assert problems == []


def test_the_page_names_the_collaborators_and_seams() -> None:
    text = DOC.read_text(encoding="utf-8")
    for name in (
        "loop/_work.py",
        "loop/_waits.py",
        "loop/_driver.py",
        "loop/_attempt.py",
        "Session.append_trusted",
        "events/_dispatch.py",
        "values/_wire.py" if "`values/_wire.py`" in text else "`_wire`",
    ):
        assert name in text, name


@pytest.mark.parametrize(
    ("span", "expected"),
    [
        ("loop/_work.py", None),
        ("loop/_nothing.py", "no such path: loop/_nothing.py"),
        ("tests/test_layers.py", None),
        ("tests/nothing.py", "no such path: tests/nothing.py"),
        ("llm/_openai*.py", None),
        ("llm/_nothing*.py", "no file matches llm/_nothing*.py"),
        ("values/", None),
        ("_wire", None),
        ("_nothing", "no module _nothing.py in src/dsh_trio"),
        ("dsh_trio.loop.Agent", None),
        (
            "dsh_trio.loop.Nothing",
            "dsh_trio.loop.Nothing: dsh_trio.loop has no Nothing",
        ),
        ("AgentWork", None),
        ("Idle(last_turn)", None),
        ("NoSuchClass", "no class NoSuchClass in src/dsh_trio"),
        ("AgentWork.open_turn", None),
        ("AgentServices.composition", None),
        ("TurnDriver.step", None),
        ("AgentWork.no_such", "AgentWork.no_such: class AgentWork has no no_such"),
        ("Nothing.method(x)", "Nothing.method(x): no class Nothing in src/dsh_trio"),
        ("turn/end Aborted(cause)", None),
        ("agent.cancel(cause)", None),
        ("dsh_trio/__init__.py", None),
        ("None", None),
        ("Cancelled", None),
    ],
)
def test_a_name_that_does_not_exist_is_reported(
    span: str, expected: str | None
) -> None:
    assert problem(span) == expected
