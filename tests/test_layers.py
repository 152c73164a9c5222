"""What import-linter leaves out of its graph: type-only and dynamic imports.

`.importlinter` checks the layers on the run-time import graph (type-only imports
excluded). These tests hold the rest to the same order: an ``if TYPE_CHECKING:`` import
may point upward only in the two re-exports that keep API.md's paths typed, and only
those two modules import by name at run time (``importlib.import_module``).
"""

from __future__ import annotations

import ast
import configparser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "dsh_trio"

#: (importing package, imported package) pairs allowed to point upward, type-only.
UPWARD_REEXPORTS = {("events", "loop"), ("session", "persistence")}


def _layers() -> dict[str, int]:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    rows = config["importlinter:contract:layers"]["layers"].split("\n")
    rank: dict[str, int] = {}
    for height, row in enumerate(reversed([r for r in rows if r.strip()])):
        for name in row.replace("|", " ").replace(":", " ").split():
            rank[name] = height
    return rank


def _package_of(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return parts[0]


def _target(module: str | None, level: int, path: Path) -> str | None:
    """The top-level dsh_trio package an import statement points at."""
    if level == 0:
        if not module or not module.startswith("dsh_trio."):
            return None
        return module.split(".")[1]
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    base = parts[: len(parts) - level]
    full = [*base, *(module.split(".") if module else [])]
    return full[0] if full else None


def _type_checking_imports(tree: ast.Module) -> list[ast.ImportFrom]:
    found: list[ast.ImportFrom] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in {
            "TYPE_CHECKING",
            "typing.TYPE_CHECKING",
        }:
            found += [n for n in ast.walk(node) if isinstance(n, ast.ImportFrom)]
    return found


def test_type_only_imports_point_down() -> None:
    rank = _layers()
    upward: set[tuple[str, str, str]] = set()
    for path in SRC.rglob("*.py"):
        source = _package_of(path)
        if source not in rank:
            continue
        for node in _type_checking_imports(ast.parse(path.read_text())):
            target = _target(node.module, node.level, path)
            if target in rank and target != source and rank[target] > rank[source]:
                upward.add((source, target, str(path.relative_to(SRC))))
    assert {(s, t) for s, t, _ in upward} <= UPWARD_REEXPORTS, sorted(upward)
    assert {p for _, _, p in upward} <= {"events/__init__.py", "session/__init__.py"}


def test_only_the_reexports_import_by_name() -> None:
    users = sorted(
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if "import_module(" in path.read_text()
    )
    assert set(users) <= {
        "events/__init__.py",
        "session/__init__.py",
        "_metadata.py",
        # Plugin rows name their setup function by import path.
        "composition/_generation.py",
    }, users


def test_the_layer_table_names_every_package() -> None:
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").exists()}
    assert packages <= set(_layers()), packages - set(_layers())
