"""Every ``python`` code block of README.md and docs/ runs, and so does every docstring example.

A block runs as a complete program (``exec`` in a fresh namespace); a state machine it
defines is then run for a few examples. An HTML comment on the line before a block may
say ``<!-- docs-test: skip (real endpoint) -->`` (the only reason to skip: the block
needs a key and the network) or ``<!-- docs-test: needs agent.run -->`` (the block runs
once ``Agent.run`` exists). Nothing may touch the network: name resolution and
non-loopback connects raise.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil
import re
import socket
from pathlib import Path
from typing import Any

import pytest

import dsh_trio
import dsh_trio as dsh

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(
    r"(?:^(?P<marker><!-- docs-test: (?P<what>[^>]*?) -->)\n)?^```python\n(?P<code>.*?)^```$",
    re.MULTILINE | re.DOTALL,
)
SKIP_REAL_ENDPOINT = "skip (real endpoint)"
NEEDS_RUN = "needs agent.run"
#: How many blocks are skipped because they need a real endpoint (and the network).
EXPECTED_REAL_ENDPOINT_SKIPS = 2


def blocks() -> list[tuple[str, str | None, str]]:
    found = []
    for path in SOURCES:
        text = path.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start("code"))
            found.append(
                (f"{path.relative_to(ROOT)}:{line}", match["what"], match["code"])
            )
    return found


BLOCKS = blocks()


def test_the_blocks_are_found_and_markers_are_known() -> None:
    assert len(BLOCKS) >= 12
    assert {what for _, what, _ in BLOCKS} <= {None, SKIP_REAL_ENDPOINT, NEEDS_RUN}
    skipped = [where for where, what, _ in BLOCKS if what == SKIP_REAL_ENDPOINT]
    assert len(skipped) == EXPECTED_REAL_ENDPOINT_SKIPS, skipped
    for where, what, code in BLOCKS:
        if what == SKIP_REAL_ENDPOINT:
            assert "OpenAICompatibleAdapter" in code, (
                f"{where}: skipped, but not a real endpoint"
            )
        # Every block is a whole program, even the skipped ones.
        compile(code, where, "exec")


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    real_connect = socket.socket.connect

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OSError("the docs tests run with the network off")

    def loopback_only(sock: socket.socket, address: Any) -> Any:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in (
            "127.0.0.1",
            "::1",
        ):
            refuse()
        return real_connect(sock, address)

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", loopback_only)


@pytest.mark.parametrize(("where", "what", "code"), BLOCKS, ids=[b[0] for b in BLOCKS])
def test_code_block_runs(
    where: str, what: str | None, code: str, no_network: None
) -> None:
    if what == SKIP_REAL_ENDPOINT:
        pytest.skip(f"{where}: needs a real endpoint and its key")
    if what == NEEDS_RUN and not hasattr(dsh.Agent, "run"):
        pytest.skip(f"{where}: agent.run / agent.stream are not in this build yet")
    namespace: dict[str, Any] = {"__name__": "docs_block"}
    # A whole program: it does not inherit this module's ``from __future__`` imports
    # (string annotations of a class here could not be resolved: no module holds it).
    exec(compile(code, where, "exec", dont_inherit=True), namespace)
    run_machines(namespace)


def run_machines(namespace: dict[str, Any]) -> None:
    """Run, for a few examples, each state machine test case a block defines."""
    from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

    from dsh_trio.testing import machine_settings

    for value in list(namespace.values()):
        if (
            inspect.isclass(value)
            and issubclass(value, RuleBasedStateMachine)
            and value.__module__ == "docs_block"  # defined by the block, not imported
        ):
            run_state_machine_as_test(
                value, settings=machine_settings("dev", max_examples=3)
            )


# ------------------------------------------------------------------ docstring examples


class _Finder(doctest.DocTestFinder):
    # Public objects report their public module (dsh_trio.loop, not dsh_trio.loop._agent);
    # doctest would skip them as "imported". Anything defined in dsh_trio counts.
    def _from_module(self, module: Any, object: Any) -> bool:
        defined_in = getattr(object, "__module__", None) or ""
        return defined_in.startswith("dsh_trio") or super()._from_module(module, object)  # type: ignore[misc]


def docstring_examples() -> list[doctest.DocTest]:
    seen: dict[tuple[str, int], doctest.DocTest] = {}
    finder = _Finder(exclude_empty=True)
    for info in pkgutil.walk_packages(dsh_trio.__path__, "dsh_trio."):
        module = importlib.import_module(info.name)
        for test in finder.find(module, info.name, globs=vars(module)):
            key = (test.filename or "", test.lineno or 0)
            # Run each example once, with the globals of the module that defines it.
            if test.examples and (key not in seen or module.__file__ == test.filename):
                seen[key] = test
    return sorted(seen.values(), key=lambda t: (t.filename or "", t.lineno or 0))


DOCTESTS = docstring_examples()


def test_docstring_examples_are_found() -> None:
    assert len(DOCTESTS) >= 3, [t.name for t in DOCTESTS]


@pytest.mark.parametrize("test", DOCTESTS, ids=[t.name for t in DOCTESTS])
def test_docstring_example(test: doctest.DocTest) -> None:
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    test.globs = dict(test.globs)
    out: list[str] = []
    result = runner.run(test, out=out.append)
    assert result.failed == 0, "".join(out)
