"""Every ``pip install`` line of the README and docs works from a clone.

The package is not on PyPI: a line installs the clone (``.``, editable or not),
with extras the project defines.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: ``pip install ...`` up to the end of a code span, a shell operator or the line.
INSTALL = re.compile(r"pip install ([^`&|;#\n]*)")
CLONE = re.compile(r"^\.(?:\[(?P<extras>[a-z,]+)\])?$")


def _extras() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return set(project["project"]["optional-dependencies"])


def test_every_install_line_installs_the_clone() -> None:
    extras = _extras()
    seen = 0
    for path in SOURCES:
        if path.name == "changelog.md":
            continue  # history, not instructions
        for match in INSTALL.finditer(path.read_text(encoding="utf-8")):
            seen += 1
            where = f"{path.relative_to(ROOT)}: pip install {match.group(1)}"
            targets = [w for w in shlex.split(match.group(1)) if not w.startswith("-")]
            assert targets, where
            for target in targets:
                found = CLONE.match(target)
                assert found is not None, f"{where}: not the clone"
                wanted = set((found["extras"] or "").split(",")) - {""}
                assert wanted <= extras, f"{where}: unknown extras {wanted - extras}"
    assert seen >= 8
