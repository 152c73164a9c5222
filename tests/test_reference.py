"""The API reference: an entry for every public name, Sphinx markup rendered as Markdown.

The site is built once, as ``scripts/check`` builds it (``mkdocs build --strict``). Every
object a public module exports (``dsh_trio`` itself, the modules of
``dsh_trio._PUBLIC_MODULES`` and ``dsh_trio.testing``) must have exactly one entry, an
element whose id is one of its public paths (``dsh_trio.AgentOptions``,
``dsh_trio.loop.Agent``). The docstrings' Sphinx roles and ``Example::`` blocks are
rewritten by the griffe extension of ``docs/_tooling/sphinx_markup.py``; no role or
``::`` may reach the HTML as text, and a role naming a public object renders as a link to
its entry. The extension itself is checked on a small package of its own.
"""

from __future__ import annotations

import html
import importlib
import importlib.util
import inspect
import os
import re
import subprocess
import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import griffe
import pytest

import dsh_trio

ROOT = Path(__file__).resolve().parent.parent
EXTENSION = ROOT / "docs" / "_tooling" / "sphinx_markup.py"
ATTRS_EXTENSION = ROOT / "docs" / "_tooling" / "attrs_signatures.py"
HOOKS = ROOT / "docs" / "_tooling" / "hooks.py"
PUBLIC_MODULES = ("dsh_trio", *dsh_trio._PUBLIC_MODULES, "dsh_trio.testing")
ROLE_TEXT = re.compile(
    r":(?:py:)?(?:class|meth|func|attr|exc|data|const|obj|mod|type):(?:`|<code>)"
)
LITERAL_BLOCK_TEXT = re.compile(r"<p>(?:(?!</p>).)*::</p>", re.DOTALL)


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict -q``, as ``scripts/check`` runs it."""
    options = ["-f", str(config), "-d", str(site)]
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", *options],
        cwd=config.parent,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The site (written even when ``--strict`` aborts at the end) and the build's log."""
    site = tmp_path_factory.mktemp("site")
    built = mkdocs_build(ROOT / "mkdocs.yml", site)
    return site, built.stderr if built.returncode else ""


@pytest.fixture(scope="module")
def site(build: tuple[Path, str]) -> Path:
    return build[0]


def test_the_site_builds_with_no_warning(build: tuple[Path, str]) -> None:
    site, failure = build
    assert not failure, failure
    assert (site / "reference" / "index.html").is_file()


@pytest.fixture(scope="module")
def reference(site: Path) -> dict[Path, str]:
    """The HTML of each reference page."""
    return {
        page: page.read_text(encoding="utf-8")
        for page in sorted((site / "reference").rglob("*.html"))
    }


@pytest.fixture(scope="module")
def entries(reference: dict[Path, str]) -> dict[str, Path]:
    """Each element id of the reference, and its page."""
    return {
        html.unescape(anchor): page
        for page, text in reference.items()
        for anchor in re.findall(r'\bid="([^"]+)"', text)
    }


def exported(module: types.ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [
            name
            for name, value in vars(module).items()
            if not name.startswith("_") and not isinstance(value, types.ModuleType)
        ]
    return list(names)


def public_objects() -> dict[tuple[str, int], list[str]]:
    """Each exported object (its name and identity) and the public paths it has."""
    paths: dict[tuple[str, int], list[str]] = {}
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in exported(module):
            key = (name, id(getattr(module, name)))
            paths.setdefault(key, []).append(f"{module_name}.{name}")
    return paths


def test_every_public_name_has_one_entry(entries: dict[str, Path]) -> None:
    objects = public_objects()
    assert len(objects) > 200  # the top-level names alone are more than 140
    missing = sorted(
        paths[0] for paths in objects.values() if not set(paths) & set(entries)
    )
    assert not missing, (
        "no entry in the API reference for these exported names; add a `::: <path>` "
        f"line to the page of docs/reference/ for their layer: {missing}"
    )
    twice = sorted(
        str(sorted(set(paths) & set(entries)))
        for paths in objects.values()
        if len(set(paths) & set(entries)) > 1
    )
    assert not twice, f"documented under more than one path: {twice}"


def test_every_top_level_name_is_in_the_reference(entries: dict[str, Path]) -> None:
    # The list above already covers them; this says so for the names people type first.
    objects = public_objects()
    for name in exported(dsh_trio):
        key = (name, id(getattr(dsh_trio, name)))
        assert set(objects[key]) & set(entries), name


def test_no_sphinx_markup_reaches_the_html(reference: dict[Path, str]) -> None:
    assert len(reference) >= 10
    for page, text in reference.items():
        assert not ROLE_TEXT.search(text), (page, ROLE_TEXT.findall(text)[:5])
        assert "Example::" not in text, page
        assert not LITERAL_BLOCK_TEXT.search(text), (
            page,
            LITERAL_BLOCK_TEXT.findall(text)[:3],
        )


def test_examples_render_as_highlighted_code(reference: dict[Path, str]) -> None:
    examples = [
        example
        for text in reference.values()
        for example in re.findall(
            r"<p>Example:</p>\s*(<div class=\"highlight\">.*?</div>)?", text, re.DOTALL
        )
    ]
    assert len(examples) >= 10
    assert all(examples), "an ``Example::`` paragraph is not followed by its code"
    # Highlighted as Python: keywords are marked up.
    assert sum('<span class="k">' in example for example in examples) >= 10


def class_roles() -> Iterator[tuple[str, str, str]]:
    """(the path of a public object, a top-level name a :class:/:exc: role of its
    docstring names, that role's text) for every such role."""
    for paths in public_objects().values():
        module_name, _, name = paths[0].rpartition(".")
        obj = getattr(importlib.import_module(module_name), name)
        doc = obj.__doc__ if inspect.isclass(obj) or inspect.isfunction(obj) else None
        for match in re.finditer(r":(?:class|exc):`~?([\w.]+)`", doc or ""):
            target = match[1].rsplit(".", 1)[-1]
            if target in vars(dsh_trio) and target != name:
                yield paths[0], target, match[0]


def test_roles_render_as_links_to_their_entry(
    entries: dict[str, Path], reference: dict[Path, str]
) -> None:
    objects = public_objects()
    checked = 0
    for path, target, role in class_roles():
        page = next(entries[p] for p in objects[_key(path)] if p in entries)
        target_key = (target, id(getattr(dsh_trio, target)))
        target_id = next(p for p in objects[target_key] if p in entries)
        link = re.compile(
            rf'<a [^>]*href="[^"]*#{re.escape(target_id)}"[^>]*><code>{target}</code></a>'
        )
        assert link.search(reference[page]), (
            f"{path}: {role} is not a link to {target_id}"
        )
        checked += 1
    assert checked >= 10


def _key(path: str) -> tuple[str, int]:
    module_name, _, name = path.rpartition(".")
    return name, id(getattr(importlib.import_module(module_name), name))


# ------------------------------------------------------------------ the extension alone

PACKAGE = {
    "__init__.py": '''
        """A package to document.

        All of it is built around :class:`Thing`; see :mod:`sample.more`.
        """

        from ._impl import Thing as Thing, make as make

        __all__ = ["Thing", "make"]
    ''',
    "_impl.py": '''
        import trio


        class _Hidden:
            """Private."""


        class Thing:
            """A thing. Call :meth:`go`, or :func:`make` one; not :class:`_Hidden`.

            It runs in a :class:`trio.Nursery` and raises :exc:`ValueError`.
            :class:`~sample._impl.Thing` is itself, :class:`title <Thing>` too,
            and :attr:`size` is a field.

            Example::

                thing = make()
                await thing.go()

            The table of a TOML file::

                [table]
                key = 1

            A line of text ::

                not python (
            """

            #: How big it is.
            size: int = 1
            count: int = 0  #: How many.

            async def go(self) -> None:
                """Go; :attr:`count` (no entry of its own) goes up."""


        def make() -> Thing:
            """Make a :class:`Thing`."""
            return Thing()
    ''',
    "more.py": '''
        """More of the package."""
    ''',
}


def load_sample(tmp_path: Path, files: dict[str, str]) -> griffe.Module:
    package = tmp_path / "sample"
    package.mkdir()
    for name, text in files.items():
        (package / name).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    extension = _extension().SphinxMarkup(package="sample", also_public=["sample.more"])
    module = griffe.load(
        "sample",
        search_paths=[str(tmp_path)],
        extensions=griffe.load_extensions(extension),
    )
    assert isinstance(module, griffe.Module)
    return module


def _extension() -> Any:
    spec = importlib.util.spec_from_file_location("sphinx_markup", EXTENSION)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_roles_become_cross_references_or_code(tmp_path: Path) -> None:
    sample = load_sample(tmp_path, PACKAGE)
    thing = sample["_impl.Thing"]
    doc = thing.docstring.value
    assert "[`go()`][sample._impl.Thing.go]" in doc
    assert "[`make()`][sample._impl.make]" in doc
    assert "not `_Hidden`." in doc  # private: code, no link
    assert "a `trio.Nursery` and raises `ValueError`." in doc  # outside: code
    assert (
        "[`Thing`][sample._impl.Thing] is itself, [`title`][sample._impl.Thing]" in doc
    )
    assert "[`size`][sample._impl.Thing.size] is a field" in doc
    assert sample["_impl.Thing.size"].docstring.value == "How big it is."
    assert sample["_impl.Thing.count"].docstring.value == "How many."
    go = sample["_impl.Thing.go"].docstring.value
    assert "[`count`][sample._impl.Thing.count]" in go
    module_doc = sample.docstring.value
    assert (
        "around [`Thing`][sample._impl.Thing]; see [`sample.more`][sample.more]."
        in module_doc
    )
    assert "[`Thing`][sample._impl.Thing]" in sample["_impl.make"].docstring.value


def test_a_role_naming_nothing_stays_a_reference_that_nothing_resolves(
    tmp_path: Path,
) -> None:
    files = dict(PACKAGE)
    files["_impl.py"] = files["_impl.py"].replace(":func:`make`", ":func:`mkae`")
    thing = load_sample(tmp_path, files)["_impl.Thing"]
    assert "[`mkae()`][mkae]" in thing.docstring.value


def test_literal_blocks_become_fenced_code(tmp_path: Path) -> None:
    doc = load_sample(tmp_path, PACKAGE)["_impl.Thing"].docstring.value
    assert "Example::" not in doc and "::\n" not in doc
    assert "Example:\n\n```python\nthing = make()\nawait thing.go()\n```\n" in doc
    assert "The table of a TOML file:\n\n```toml\n[table]\nkey = 1\n```\n" in doc
    assert "A line of text\n\n```text\nnot python (\n```" in doc


def test_an_unresolved_role_fails_the_strict_build(tmp_path: Path) -> None:
    files = dict(PACKAGE)
    files["_impl.py"] = files["_impl.py"].replace(":func:`make`", ":func:`mkae`")
    for name, text in files.items():
        (tmp_path / "sample").mkdir(exist_ok=True)
        (tmp_path / "sample" / name).write_text(textwrap.dedent(text).lstrip())
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("::: sample.Thing\n\n::: sample.make\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(
        textwrap.dedent(f"""
            site_name: sample
            hooks: [{HOOKS}]
            plugins:
              - mkdocstrings:
                  handlers:
                    python:
                      paths: [.]
                      options:
                        extensions:
                          - {EXTENSION}:
                              package: sample
        """)
    )
    built = mkdocs_build(config, tmp_path / "site")
    assert built.returncode != 0
    assert "Could not find cross-reference target 'mkae'" in built.stderr
    # The same package with the role fixed builds, and the role is a link.
    (tmp_path / "sample" / "_impl.py").write_text(
        textwrap.dedent(PACKAGE["_impl.py"]).lstrip()
    )
    built = mkdocs_build(config, tmp_path / "site")
    assert built.returncode == 0, built.stderr
    page = (tmp_path / "site" / "index.html").read_text()
    for target, title in (("sample.make", "make()"), ("sample.Thing.go", "go()")):
        link = rf'<a [^>]*href="#{re.escape(target)}"[^>]*><code>{re.escape(title)}</code></a>'
        assert re.search(link, page), target


def test_attrs_classes_have_the_signature_attrs_generates() -> None:
    spec = importlib.util.spec_from_file_location("attrs_signatures", ATTRS_EXTENSION)
    assert spec is not None and spec.loader is not None
    extension = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(extension)
    package = griffe.load(
        "dsh_trio",
        search_paths=[str(ROOT / "src")],
        extensions=griffe.load_extensions(extension.AttrsSignatures()),
    )
    assert isinstance(package, griffe.Module)
    kinds = {
        griffe.ParameterKind.positional_or_keyword: inspect.Parameter.POSITIONAL_OR_KEYWORD,
        griffe.ParameterKind.keyword_only: inspect.Parameter.KEYWORD_ONLY,
    }
    checked = set()
    for paths in public_objects().values():
        module_name, _, name = paths[0].rpartition(".")
        cls = getattr(importlib.import_module(module_name), name)
        if not (inspect.isclass(cls) and attrs.has(cls)):
            continue
        if not cls.__init__.__code__.co_filename.startswith("<attrs generated"):
            continue  # written by hand: the reference shows it as it is
        documented = package.modules_collection[paths[0]].final_target
        init = documented.members["__init__"]
        expected = [
            (p.name, p.kind, p.default is not inspect.Parameter.empty)
            for p in inspect.signature(cls).parameters.values()
        ]
        written = [
            (p.name, kinds.get(p.kind), p.default is not None)
            for p in list(init.parameters)[1:]
        ]
        assert written == expected, paths[0]
        checked.add(paths[0])
    assert {
        "dsh_trio.AgentOptions",
        "dsh_trio.UserMessage",
        "dsh_trio.HookCancel",
    } <= checked
    assert len(checked) > 50
