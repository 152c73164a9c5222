"""The source's internal boundaries: objects own their state, and methods live in their class.

Counted from the AST of ``src/dsh_trio``:

- a *private reach* is ``x._name`` where ``x`` is not ``self``, ``cls`` or ``mcs``: an
  object's private member used from outside it (dunders are not counted). Their number
  stays at or under :data:`REACH_LIMIT`.
- a *bound method* is a class attribute assigned a function imported from another
  module (``_drive = drive``): a method that lives elsewhere. There are none.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "dsh_trio"
#: Uses of another object's private members allowed in ``src/dsh_trio``.
REACH_LIMIT = 80


def private_reaches(tree: ast.AST) -> list[str]:
    """``x._name`` uses in ``tree`` whose ``x`` is not ``self``, ``cls`` or ``mcs``."""
    found: list[str] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls", "mcs"):
                continue
            found.append(f"{node.lineno}: {ast.unparse(owner)}.{node.attr}")
    return found


def bound_methods(tree: ast.AST) -> list[str]:
    """Class attributes of ``tree`` assigned a function imported from another module."""
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            imported.update(alias.asname or alias.name for alias in node.names)
    found: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        for statement in node.body:
            if (
                isinstance(statement, ast.Assign)
                and isinstance(statement.value, ast.Name)
                and statement.value.id in imported
                and statement.value.id[:1].islower()
            ):
                target = ast.unparse(statement.targets[0])
                found.append(
                    f"{statement.lineno}: {node.name}.{target} = {statement.value.id}"
                )
    return found


def _each_module() -> list[tuple[str, ast.AST]]:
    return [
        (path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text("utf-8")))
        for path in sorted(PACKAGE.rglob("*.py"))
    ]


def test_private_reaches_stay_within_the_limit() -> None:
    per_module = {
        name: found for name, tree in _each_module() if (found := private_reaches(tree))
    }
    total = sum(map(len, per_module.values()))
    busiest = sorted(per_module.items(), key=lambda item: -len(item[1]))[:8]
    assert total <= REACH_LIMIT, (
        f"{total} uses of another object's private members (limit {REACH_LIMIT}); "
        "give the owner a named method instead. Most in: "
        + "; ".join(f"{name} {found}" for name, found in busiest)
    )


def test_no_class_binds_a_function_of_another_module() -> None:
    found = [
        f"{name}:{where}"
        for name, tree in _each_module()
        for where in bound_methods(tree)
    ]
    assert found == [], "methods defined outside their class: " + ", ".join(found)


SAMPLE = """
from ._helpers import drive, Marker

class Agent:
    _drive = drive  # bound from another module
    kind = Marker  # a class, not a function
    def run(self, other):
        self._state = other._state  # one reach (other's), one own member
        return type(self).__name__
"""


def test_the_counts_see_a_reach_and_a_bound_function() -> None:
    tree = ast.parse(SAMPLE)
    assert private_reaches(tree) == ["8: other._state"]
    assert bound_methods(tree) == ["5: Agent._drive = drive"]
