"""Bad input to the presets: each is refused with a specific error naming what and where.

Nothing already accepted is lost, and nothing refused is half registered.
"""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import dsh_trio as dsh
from dsh_trio.composition import load_runtime_config
from dsh_trio.testing import ScriptedModel, reply

OPTIONS = dsh.AgentOptions(provider="scripted", model="m")
MODULE = "bad_input_plugins"


# ---------------------------------------------------------------- plugin functions


class Held:
    """What the plugins kept: their scopes, and a gate a setup can wait on."""

    scopes: list[dsh.PresetScope]

    def __init__(self) -> None:
        self.scopes = []


class NeverCloses:
    async def aclose(self) -> None:
        # An hour of virtual time: without the grace the close ends late and the
        # test fails (instead of hanging).
        await trio.sleep(3600)


def _module(held: Held) -> types.ModuleType:
    module = types.ModuleType(MODULE)

    def fine(scope: dsh.PresetScope, config: Mapping[str, Any]) -> None:
        held.scopes.append(scope)
        scope.section("fine", "a fine section")

    async def hangs(scope: dsh.PresetScope, config: Mapping[str, Any]) -> None:
        held.scopes.append(scope)
        scope.section("early", "registered before hanging")
        await trio.sleep_forever()

    async def raises_later(scope: dsh.PresetScope, config: Mapping[str, Any]) -> None:
        await trio.lowlevel.checkpoint()
        raise RuntimeError("the async setup failed")

    def interrupts(scope: dsh.PresetScope, config: Mapping[str, Any]) -> None:
        held.scopes.append(scope)
        scope.section("early", "registered before the interrupt")
        raise KeyboardInterrupt

    def never_closes(scope: dsh.PresetScope, config: Mapping[str, Any]) -> None:
        scope.provide("stuck", NeverCloses())

    calls: dict[str, Callable[[Any], object]] = {
        "tool_not_a_tool": lambda s: s.tool("search"),
        "on_not_callable": lambda s: s.on("agent/status", 3),
        "on_event_not_str": lambda s: s.on(3, print),
        "section_name_not_str": lambda s: s.section(3, "x"),
        "section_blank_name": lambda s: s.section(" ", "x"),
        "section_text_not_str": lambda s: s.section("s", 3),
        "context_not_callable": lambda s: s.context("c", "text"),
        "context_name_none": lambda s: s.context(None, str),
        "provide_name_not_str": lambda s: s.provide(3, object()),
        "provide_twice": lambda s: (s.provide("a", 1), s.provide("a", 2)),
        "defaults_unknown_field": lambda s: s.defaults(colour="red"),
        "defaults_bad_value": lambda s: s.defaults(max_tokens="many"),
        "defaults_zero_tokens": lambda s: s.defaults(max_tokens=0),
    }
    for fn_name, call in calls.items():

        def setup(
            scope: dsh.PresetScope,
            config: Mapping[str, Any],
            call: Callable[[Any], object] = call,
        ) -> None:
            held.scopes.append(scope)
            scope.section("before", "registered before the bad call")
            call(scope)

        setattr(module, fn_name, setup)
    for fn in (fine, hangs, raises_later, interrupts, never_closes):
        setattr(module, fn.__name__, fn)
    return module


@pytest.fixture
def held() -> Iterator[Held]:
    state = Held()
    sys.modules[MODULE] = _module(state)
    try:
        yield state
    finally:
        del sys.modules[MODULE]


def row(fn: str, **config: Any) -> dsh.PluginRow:
    return dsh.PluginRow(name=f"{MODULE}:{fn}", config=config)


def preset(preset_id: str, *rows: dsh.PluginRow) -> dsh.PresetDefinition:
    return dsh.PresetDefinition(id=preset_id, plugins=rows)


def write(tmp_path: Path, text: str | bytes, name: str = "doc.yml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def at(path: Path, key: str = "") -> str:
    """A regex for a message naming ``path`` (and ``key`` right after it)."""
    return re.escape(str(path) + key)


# ---------------------------------------------------------------- load_preset: the file


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "No such file"),
        ("<dir>", "is a directory, not a regular file"),
        (b"id: \xff\xfe\nplugins: []\n", "not UTF-8 text"),
        ("id: [unclosed\n", r"not valid YAML.*line 1"),
        ("id: a\nplugins: []\n---\nid: b\n", "expected a single document"),
        (
            "!!python/object/apply:os.system ['true']\n",
            "could not determine a constructor",
        ),
        ("id: a\nplugins: " + "[" * 3000 + "]" * 3000 + "\n", "nests too deeply"),
        (
            "id: a\nplugins: [{name: a.b}]\nplugins: []\n",
            r"found the key 'plugins' twice \(line 3, column 1\)",
        ),
        (
            "id: a\nplugins: [{name: a.b, config: {k: 1, k: 2}}]\n",
            "found the key 'k' twice",
        ),
    ],
    ids=[
        "missing",
        "directory",
        "non-utf8",
        "invalid",
        "two-documents",
        "python-tag",
        "deep",
        "key-twice",
        "config-key-twice",
    ],
)
def test_an_unreadable_preset_file_names_the_file(
    tmp_path: Path, content: str | bytes | None, reason: str
) -> None:
    path = tmp_path / "preset.yml"
    if content == "<dir>":
        path.mkdir()
    elif content is not None:
        write(tmp_path, content, "preset.yml")
    with pytest.raises(
        dsh.PresetError, match=f"cannot read preset file '{at(path)}'"
    ) as info:
        dsh.load_preset(path)
    assert re.search(reason, str(info.value), re.DOTALL)


@pytest.mark.parametrize("path", [None, 3])
def test_load_preset_needs_a_path(path: Any) -> None:
    with pytest.raises(TypeError):
        dsh.load_preset(path)


# ---------------------------------------------------------------- load_preset: the shape

BAD_DOCUMENTS = [
    ("- a\n- b\n", "", " must be a mapping, got a list$"),
    ("just text\n", "", " must be a mapping, got a string$"),
    ("", "", " must be a mapping, got null$"),
    ("plugins: []\n", ".id", " must be a non-empty string, got null$"),
    ("id: '  '\nplugins: []\n", ".id", " must be a non-empty string"),
    ("id: 7\nplugins: []\n", ".id", " must be a non-empty string, got an integer$"),
    ("id: p\n", "", r' \("p"\) has no plugins list'),
    ("id: p\nplugins: {a: 1}\n", ".plugins", " must be a list of plugin rows"),
    ("id: p\nplugins: [x]\n", ".plugins[0]", r" must be a mapping \(a plugin row\)"),
    ("id: p\nplugins: [{id: r}]\n", ".plugins[0].name", " must be a non-empty string"),
    (
        "id: p\nplugins: [{name: 5}]\n",
        ".plugins[0].name",
        " must be a non-empty string",
    ),
    (
        "id: p\nplugins: [{name: not a path}]\n",
        ".plugins[0].name",
        ' "not a path" must be an import path',
    ),
    (
        "id: p\nplugins: [{name: 'pkg.mod:'}]\n",
        ".plugins[0].name",
        r".*'' is not a function name",
    ),
    (
        "id: p\nplugins: [{name: ':fn'}]\n",
        ".plugins[0].name",
        r".*'' is not a dotted module name",
    ),
    (
        "id: p\nplugins: [{name: 'a:b:c'}]\n",
        ".plugins[0].name",
        r".*'b:c' is not a function name",
    ),
    (
        "id: p\nplugins: [{name: '..a:b'}]\n",
        ".plugins[0].name",
        r".*'..a' is not a dotted module name",
    ),
    (
        "id: p\nplugins: [{name: a.b, id: 3}]\n",
        ".plugins[0].id",
        " must be a string, got an integer$",
    ),
    (
        "id: p\nplugins: [{name: a.b, config: [1]}]\n",
        ".plugins[0].config",
        " must be a mapping",
    ),
    (
        "id: p\nplugins: [{name: a.b, config: {1: x}}]\n",
        ".plugins[0].config",
        r" has a non-string key \(an integer\)$",
    ),
    (
        "id: p\nplugins: [{name: a.b, config: {when: 2020-01-02}}]\n",
        ".plugins[0].config.when",
        " is a date, not a JSON value",
    ),
    # YAML 1.1 reads a bare `on` key as the boolean true.
    (
        "id: p\nplugins: [{name: a.b, config: {on: 1}}]\n",
        ".plugins[0].config",
        r" has a non-string key \(a boolean\)$",
    ),
    (
        "id: p\nplugins: [{name: a.b, config: {x: &x [*x]}}]\n",
        ".plugins[0].config.x[0]",
        " refers to itself",
    ),
    (
        "id: p\nplugins: [{name: a.b, disabled: 'yes'}]\n",
        ".plugins[0].disabled",
        " must be a boolean, got a string$",
    ),
    (
        "id: p\nplugins: [{name: a.b, group: 1}]\n",
        ".plugins[0].group",
        " must be a boolean, got an integer$",
    ),
    (
        "id: p\nplugins: [{name: g, group: true}]\n",
        ".plugins[0]",
        ': group "g" has no rows under config',
    ),
    (
        "id: p\nplugins: [{name: g, group: true, config: []}]\n",
        ".plugins[0]",
        ': group "g" has no rows',
    ),
    (
        "id: p\nplugins: [{name: g, group: true, config: {a: 1}}]\n",
        ".plugins[0].config",
        " must be a list of plugin rows",
    ),
    (
        "id: p\nplugins: [{name: g, group: true, config: [{name: 3}]}]\n",
        ".plugins[0].config[0].name",
        " must be a non-empty string",
    ),
    (
        "id: p\nplugins: &p [{name: g, group: true, config: *p}]\n",
        ".plugins[0].config",
        " contains itself",
    ),
    ("id: p\nplugins: []\nfoo: 1\n", "", r" has unknown keys \['foo'\]"),
    ("id: p\nplugins: []\n1: 2\n", "", r" has unknown keys \['1'\]"),
    (
        "id: p\nplugins: [{name: a.b, bar: 1}]\n",
        ".plugins[0]",
        r" has unknown keys \['bar'\]",
    ),
    ("id: p\nname: 3\nplugins: []\n", ".name", " must be a string, got an integer$"),
    ("id: p\norder: first\nplugins: []\n", ".order", " must be a number"),
    (
        "id: p\norder: .nan\nplugins: []\n",
        ".order",
        " must be a finite number, got nan",
    ),
    (
        "id: p\norder: .inf\nplugins: []\n",
        ".order",
        " must be a finite number, got inf",
    ),
]


@pytest.mark.parametrize(("document", "key", "problem"), BAD_DOCUMENTS)
def test_a_malformed_preset_document_names_the_file_and_key(
    tmp_path: Path, document: str, key: str, problem: str
) -> None:
    path = write(tmp_path, document)
    with pytest.raises(dsh.PresetError, match="^" + at(path, key) + problem):
        dsh.load_preset(path)


def test_yaml_merge_keys_still_override(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "id: p\nplugins:\n  - &base {name: a.b, config: {k: 1}}\n"
        "  - {<<: *base, name: c.d}\n",
    )
    definition = dsh.load_preset(path)
    assert [(r.name, r.config) for r in definition.plugins] == [
        ("a.b", {"k": 1}),
        ("c.d", {"k": 1}),
    ]


def test_groups_nest_only_so_deep(tmp_path: Path) -> None:
    rows = "{name: a.b}"
    for _ in range(40):
        rows = f"{{name: g, group: true, config: [{rows}]}}"
    path = write(tmp_path, f"id: p\nplugins: [{rows}]\n")
    with pytest.raises(dsh.PresetError, match="groups nest deeper than 32 levels"):
        dsh.load_preset(path)


def test_huge_documents_load_or_are_refused_without_blowing_up(tmp_path: Path) -> None:
    rows = "".join(
        f"  - {{name: pkg.mod{i}:setup, config: {{n: {i}}}}}\n" for i in range(5000)
    )
    definition = dsh.load_preset(write(tmp_path, f"id: big\nplugins:\n{rows}"))
    assert len(definition.plugins) == 5000
    assert definition.plugins[-1].config == {"n": 4999}
    # A "billion laughs" config: 9**9 leaves through aliases, each shared node checked once.
    levels = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        levels.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    config = "{" + ", ".join(levels) + "}"
    bomb = dsh.load_preset(
        write(tmp_path, f"id: b\nplugins: [{{name: a.b, config: {config}}}]\n", "b.yml")
    )
    config_i: Any = bomb.plugins[0].config
    assert len(config_i["i"]) == 9


async def test_read_document_dumps_any_accepted_config(
    held: Held, tmp_path: Path
) -> None:
    built = preset(
        "built",
        row("fine", pair=(1, 2), frozen=types.MappingProxyType({"x": [True, None]})),
    )
    levels = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        levels.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    bomb = dsh.load_preset(
        write(
            tmp_path,
            f"id: bomb\nplugins: [{{name: {MODULE}:fine, config: {{{', '.join(levels)}}}}}]\n",
        )
    )
    async with dsh.open_runtime(presets=[built, bomb]) as rt:
        text = rt.presets.read_document("built")
        again = dsh.load_preset(write(tmp_path, text, "again.yml"))
        assert again.plugins[0].config == {
            "pair": [1, 2],
            "frozen": {"x": [True, None]},
        }
        dumped = rt.presets.read_document("bomb")
        assert len(dumped) < 2000  # shared nodes are written once, as YAML aliases
        assert dsh.load_preset(write(tmp_path, dumped, "bomb2.yml")).id == "bomb"


# ---------------------------------------------------------------- register

#: Untyped constructors: the table below builds definitions the types forbid.
Definition: Any = dsh.PresetDefinition
Row: Any = dsh.PluginRow
loose_preset: Any = preset


@pytest.mark.parametrize(
    ("definition", "error", "message"),
    [
        ({"id": "x", "plugins": []}, TypeError, "expected a PresetDefinition"),
        (None, TypeError, "expected a PresetDefinition, got None"),
        (preset(""), dsh.PresetError, "a preset id must be a non-blank string"),
        (preset("  "), dsh.PresetError, "a preset id must be a non-blank string"),
        (
            Definition(id=3, plugins=()),
            dsh.PresetError,
            "non-blank string, got 3",
        ),
        (
            Definition(id="x", plugins=[row("fine")]),
            TypeError,
            r'preset "x".plugins must be a tuple',
        ),
        (
            loose_preset("x", "fine"),
            TypeError,
            r'preset "x".plugins\[0\] must be a PluginRow',
        ),
        (
            preset("x", Row(name=3)),
            TypeError,
            r"plugins\[0\].name must be a string",
        ),
        (
            preset("x", Row(name=" ")),
            dsh.PresetError,
            r"plugins\[0\].name must be a non-empty",
        ),
        (
            preset("x", Row(name="not a path")),
            dsh.PresetError,
            r'plugins\[0\].name "not a path" must be an import path',
        ),
        (
            preset("x", Row(name="a.b", config=[1])),
            TypeError,
            r"plugins\[0\].config must be a mapping",
        ),
        (
            preset("x", Row(name="a.b", config={"s": {1, 2}})),
            dsh.PresetError,
            r"plugins\[0\].config.s is a set",
        ),
        (
            preset("x", Row(name="a.b", disabled="no")),
            TypeError,
            r"plugins\[0\].disabled must be a boolean",
        ),
        (
            preset("x", Row(name="a.b", id=4)),
            TypeError,
            r"plugins\[0\].id must be a string",
        ),
        (
            preset("x", Row(name="g", group=True)),
            dsh.PresetError,
            'group "g" has no rows',
        ),
        (
            preset("x", Row(name="g", group=True, config=[row("fine")])),
            TypeError,
            "must be a tuple of PluginRow",
        ),
        (
            preset(
                "x",
                Row(name="g", group=True, config=(Row(name="?"),)),
            ),
            dsh.PresetError,
            r"plugins\[0\].config\[0\].name",
        ),
        (
            Definition(id="x", plugins=(), order=float("nan")),
            dsh.PresetError,
            "must be a finite number",
        ),
        (
            Definition(id="x", plugins=(), name=5),
            TypeError,
            r'preset "x".name must be a string',
        ),
    ],
)
async def test_register_refuses_a_malformed_definition_and_registers_nothing(
    held: Held, definition: Any, error: type[Exception], message: str
) -> None:
    async with dsh.open_runtime(presets=[preset("kept", row("fine"))]) as rt:
        with pytest.raises(error, match=message):
            await rt.presets.register(definition)
        assert [i.id for i in rt.presets.list()] == ["kept"]
        assert len(held.scopes) == 1  # no row of the refused definition ran
        unregister = await rt.presets.register(preset("x", row("fine")))
        async with rt.presets.acquire_scope("x") as generation:
            assert generation.number == 2  # the refused definition made no generation
        await unregister()


async def test_a_duplicate_id_is_refused_and_the_registered_one_kept(
    held: Held,
) -> None:
    async with dsh.open_runtime(presets=[preset("p", row("fine"))]) as rt:
        with pytest.raises(dsh.PresetError, match='"p" is already registered'):
            await rt.presets.register(preset("p", row("raises_later")))
        (info,) = rt.presets.list()
        assert info.broken is None
        async with rt.presets.acquire_scope("p") as generation:
            assert generation.number == 1
            assert [name for name, _ in generation.sections()] == ["fine"]
        async with rt.agents.open(options=OPTIONS, preset="p") as agent:
            assert rt.presets.composed_preset(agent) == "p"


async def test_register_after_the_runtime_closed_is_refused(held: Held) -> None:
    async with dsh.open_runtime(presets=[preset("p", row("fine"))]) as rt:
        pass
    with pytest.raises(dsh.PresetError, match='the runtime is closed: preset "q"'):
        await rt.presets.register(preset("q", row("fine")))
    assert rt.presets.list() == []
    assert len(held.scopes) == 1  # no setup of the refused preset ran


# ---------------------------------------------------------------- setup functions


@pytest.mark.parametrize(
    ("fn", "error"),
    [
        ("tool_not_a_tool", "ToolDefinitionError: expected a Tool"),
        (
            "on_not_callable",
            'TypeError: preset "bad": the listener for "agent/status" is not callable',
        ),
        (
            "on_event_not_str",
            r"TypeError: preset \"bad\": scope.on\(\) expects a name \(str\), got 3",
        ),
        ("section_name_not_str", r"scope.section\(\) expects a name \(str\), got 3"),
        (
            "section_blank_name",
            r"PresetError: preset \"bad\": scope.section\(\) got a blank name",
        ),
        ("section_text_not_str", 'section "s" needs a str or a callable'),
        ("context_not_callable", 'context "c" needs a callable'),
        ("context_name_none", r"scope.context\(\) expects a name \(str\), got None"),
        ("provide_name_not_str", r"scope.provide\(\) expects a name \(str\), got 3"),
        ("provide_twice", 'already provides a service named "a"'),
        ("defaults_unknown_field", r"unknown option\(s\) \['colour'\] for defaults"),
        ("defaults_bad_value", "PresetError: .*defaults refused: .*max_tokens"),
        ("defaults_zero_tokens", "PresetError: .*defaults refused: .*max_tokens"),
        ("raises_later", "RuntimeError: the async setup failed"),
    ],
)
async def test_a_bad_scope_call_breaks_only_its_preset(
    held: Held, fn: str, error: str
) -> None:
    async with dsh.open_runtime() as rt:
        await rt.presets.register(preset("bad", row(fn)))
        await rt.presets.register(preset("good", row("fine")))
        infos = {i.id: i for i in rt.presets.list()}
        broken = infos["bad"].broken
        assert broken is not None
        assert broken.startswith(f'row "{MODULE}:{fn}" ({MODULE}:{fn}) failed: ')
        assert re.search(error, broken), broken
        assert infos["good"].broken is None
        if (
            fn != "raises_later"
        ):  # what the row registered before the bad call is unwound
            with pytest.raises(dsh.PresetError, match="torn down"):
                held.scopes[0].section("late", "x")
        with pytest.raises(dsh.PresetError, match=f'"bad" is broken.*{MODULE}:{fn}'):
            await rt.agents.create("x", options=OPTIONS, preset="bad")
        async with rt.presets.acquire_scope("good") as generation:
            assert [name for name, _ in generation.sections()] == ["fine"]


async def test_a_setup_that_never_returns_can_be_cancelled_and_registers_nothing(
    held: Held, autojump_clock: trio.testing.MockClock
) -> None:
    async with dsh.open_runtime() as rt:
        with trio.move_on_after(5) as waited:
            await rt.presets.register(preset("p", row("hangs")))
        assert waited.cancelled_caught
        assert rt.presets.list() == []
        (scope,) = held.scopes
        with pytest.raises(dsh.PresetError, match="torn down"):
            scope.section("late", "x")  # its early registration was unwound
        async with trio.open_nursery() as nursery:
            nursery.start_soon(rt.presets.register, preset("p", row("hangs")))
            await trio.testing.wait_all_tasks_blocked()
            with pytest.raises(dsh.PresetError, match='"p" is being registered'):
                await rt.presets.register(preset("p", row("fine")))
            nursery.cancel_scope.cancel()
        await rt.presets.register(preset("p", row("fine")))  # the id is free again
        assert [i.id for i in rt.presets.list()] == ["p"]
    # Leaving the block finished: nothing of the hanging setups is left running.


async def test_a_setup_that_never_returns_at_open_does_not_hang_the_open(
    held: Held, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.move_on_after(5) as waited:
        async with dsh.open_runtime(presets=[preset("p", row("hangs"))]):
            pytest.fail(
                "the block runs only once the presets are registered"
            )  # pragma: no cover
    assert waited.cancelled_caught
    (scope,) = held.scopes
    with pytest.raises(dsh.PresetError, match="torn down"):
        scope.section("late", "x")


async def test_a_base_exception_from_setup_propagates_and_registers_nothing(
    held: Held,
) -> None:
    async with dsh.open_runtime() as rt:
        with pytest.raises(KeyboardInterrupt):
            await rt.presets.register(preset("p", row("interrupts")))
        assert rt.presets.list() == []
        with pytest.raises(dsh.PresetError, match="torn down"):
            held.scopes[0].section("late", "x")


async def test_a_service_that_never_closes_does_not_hang_the_runtime_close(
    held: Held, autojump_clock: trio.testing.MockClock
) -> None:
    with pytest.RaisesGroup(
        pytest.RaisesExc(
            dsh.PresetError, match='service "stuck" did not close within 10 s'
        ),
        flatten_subgroups=True,
    ):
        async with dsh.open_runtime(presets=[preset("p", row("never_closes"))]) as rt:
            async with rt.agents.open(options=OPTIONS, preset="p"):
                pass
    assert trio.current_time() == pytest.approx(10.0)


# ---------------------------------------------------------------- lookups and binding

IdCall = Callable[[dsh.Runtime, dsh.Agent, Any], Awaitable[object]]


async def _sync(value: Callable[[], object]) -> object:
    await trio.lowlevel.checkpoint()
    return value()


async def _acquire(rt: dsh.Runtime, preset_id: Any) -> object:
    async with rt.presets.acquire_scope(preset_id) as generation:
        return generation  # pragma: no cover


async def _create(rt: dsh.Runtime, preset_id: Any) -> object:
    return await rt.agents.create("new", options=OPTIONS, preset=preset_id)


ID_CALLS: dict[str, IdCall] = {
    "resolve": lambda rt, a, i: _sync(lambda: rt.presets.resolve(i)),
    "read_document": lambda rt, a, i: _sync(lambda: rt.presets.read_document(i)),
    "recompose": lambda rt, a, i: _sync(lambda: rt.presets.recompose(a, i)),
    "select": lambda rt, a, i: rt.presets.select(a, i),
    "acquire_scope": lambda rt, a, i: _acquire(rt, i),
    "create": lambda rt, a, i: _create(rt, i),
}


@pytest.mark.parametrize("call", sorted(ID_CALLS))
@pytest.mark.parametrize(
    ("preset_id", "error", "message"),
    [
        (
            "nope",
            dsh.PresetNotFoundError,
            r'no preset "nope" is registered \(available: "p", "q"\)',
        ),
        ("", dsh.PresetNotFoundError, r'no preset "" is registered'),
        (3, TypeError, r"expects a preset id \(str.*got 3"),
        (b"p", TypeError, r"expects a preset id \(str.*got b'p'"),
    ],
)
async def test_an_unknown_or_mistyped_preset_id_is_refused(
    held: Held, call: str, preset_id: Any, error: type[Exception], message: str
) -> None:
    async with dsh.open_runtime(
        presets=[preset("p", row("fine")), preset("q", row("fine"))]
    ) as rt:
        handle = await rt.agents.create("a", options=OPTIONS, preset="p")
        with pytest.raises(error, match=message):
            await ID_CALLS[call](rt, handle.agent, preset_id)
        assert rt.presets.composed_preset(handle.agent) == "p"
        assert not any(
            e.type == "agent-preset/selected" for e in handle.agent.session.events
        )
        assert rt.agents.get("new") is None


async def test_no_id_and_no_default_is_refused(held: Held) -> None:
    async with dsh.open_runtime(presets=[preset("p", row("fine"))]) as rt:
        with pytest.raises(
            dsh.PresetError, match=r"no default preset is configured \(available: p\)"
        ):
            rt.presets.resolve()
        with pytest.raises(
            TypeError, match=r"select\(\) expects a preset id \(str\), got None"
        ):
            await rt.presets.select(await _agent(rt), None)  # type: ignore[arg-type]


async def test_an_unknown_default_preset_is_named_when_an_agent_needs_it(
    held: Held, tmp_path: Path
) -> None:
    config = write(tmp_path, "default_preset: typo\n", "runtime.yml")
    async with dsh.open_runtime(
        presets=[preset("p", row("fine"))], config=config
    ) as rt:
        with pytest.raises(
            dsh.PresetNotFoundError,
            match=r'no preset "typo" is registered \(available: "p"\)',
        ):
            await rt.agents.create(options=OPTIONS)
        assert rt.agents.list() == []


async def _agent(rt: dsh.Runtime) -> dsh.Agent:
    return (await rt.agents.create(options=OPTIONS)).agent


AGENT_CALLS: dict[str, Callable[[dsh.Runtime, Any], Awaitable[object]]] = {
    "mount": lambda rt, a: _sync(lambda: rt.presets.mount(a, "p")),
    "recompose": lambda rt, a: _sync(lambda: rt.presets.recompose(a, "p")),
    "compose_from": lambda rt, a: _sync(lambda: rt.presets.compose_from(a, a)),
    "composed_preset": lambda rt, a: _sync(lambda: rt.presets.composed_preset(a)),
    "service_for": lambda rt, a: _sync(lambda: rt.presets.service_for(a, "svc")),
    "select": lambda rt, a: rt.presets.select(a, "p"),
}


@pytest.mark.parametrize("call", sorted(AGENT_CALLS))
@pytest.mark.parametrize("not_an_agent", ["agent-id", None])
async def test_an_agent_argument_that_is_no_agent_is_a_type_error(
    held: Held, call: str, not_an_agent: object
) -> None:
    async with dsh.open_runtime(presets=[preset("p", row("fine"))]) as rt:
        with pytest.raises(
            TypeError,
            match=rf"presets.{call}\(\) expects an Agent as \w+, got {not_an_agent!r}",
        ):
            await AGENT_CALLS[call](rt, not_an_agent)


async def test_binding_misuse_is_refused_and_changes_nothing(held: Held) -> None:
    async with dsh.open_runtime(
        presets=[preset("p", row("fine")), preset("q", row("fine"))]
    ) as rt:
        parent = (await rt.agents.create("parent", options=OPTIONS, preset="p")).agent
        with pytest.raises(
            dsh.PresetError,
            match='agent "parent" is published: mount it in its creation setup',
        ):
            rt.presets.mount(parent, "q")
        kid = (await rt.agents.create("kid", options=OPTIONS, preset="q")).agent
        with pytest.raises(
            dsh.PresetError, match='agent "kid" is already bound to a preset'
        ):
            rt.presets.compose_from(kid, parent)
        with pytest.raises(
            TypeError, match=r"service_for\(\) expects a service name \(str\), got 3"
        ):
            rt.presets.service_for(parent, 3)  # type: ignore[arg-type]
        assert rt.presets.service_for(parent, "no-such-service") is None
        assert (
            rt.presets.composed_preset(parent),
            rt.presets.composed_preset(kid),
        ) == ("p", "q")

        gone = await rt.agents.create("gone", options=OPTIONS)
        await gone.dispose()
        misuses: tuple[Callable[[], object], ...] = (
            lambda: rt.presets.mount(gone.agent, "p"),
            lambda: rt.presets.compose_from(gone.agent, parent),
        )
        for misuse in misuses:
            with pytest.raises(dsh.AgentDisposedError, match='"gone" is disposed'):
                misuse()
        with pytest.raises(dsh.AgentDisposedError, match='"gone" is disposed'):
            await rt.presets.select(gone.agent, "p")
        assert rt.presets.composed_preset(gone.agent) is None
        assert rt.presets._locks.keys() == set()  # no lock kept for a disposed agent


# ---------------------------------------------------------------- open_runtime(config=...)

BAD_CONFIGS = [
    (
        "agents: [{preset: p}]",
        r".agents[0].id",
        " must be a non-empty string, got null$",
    ),
    ("agents: [{id: '  '}]", r".agents[0].id", " must be a non-empty string"),
    (
        "agents: [{id: 3}]",
        r".agents[0].id",
        " must be a non-empty string, got an integer$",
    ),
    ("agents: [x]", r".agents[0]", " must be a mapping, got a string$"),
    (
        "agents: [{id: a}, {id: a}]",
        ".agents",
        r': the id "a" is declared twice \(agents\[0\] and agents\[1\]\)',
    ),
    (
        "agents: [{id: a, preset: 3}]",
        r".agents[0].preset",
        " must be a non-empty string",
    ),
    (
        "agents: [{id: a, options: {colour: red}}]",
        r".agents[0].options.colour",
        " is not an agent option",
    ),
    (
        "agents: [{id: a, options: [1]}]",
        r".agents[0].options",
        " must be a mapping of agent options",
    ),
    (
        "agents: [{id: a, options: {max_tokens: -1}}]",
        r".agents[0].options.max_tokens",
        ": AgentOptions.max_tokens must be a positive int, got an integer$",
    ),
    ("agents: [{id: a, extra: 1}]", r".agents[0]", r" has unknown keys \['extra'\]"),
    ("agents: abc", ".agents", " must be a list"),
    (
        "default_model: deepseek",
        ".default_model",
        " must be a mapping of agent options",
    ),
    (
        "default_model: {reasoning: high}",
        ".default_model.reasoning",
        " is not an agent option",
    ),
    (
        "default_preset: 3",
        ".default_preset",
        " must be a non-empty string, got an integer$",
    ),
    (
        "presets: [{id: a, plugins: []}, {id: a, plugins: []}]",
        r".presets[1]",
        r': the preset id "a" is already defined by .*presets\[0\]',
    ),
    (
        "presets: [missing.yml]",
        r".presets[0]",
        ": cannot read preset file .*missing.yml'",
    ),
    ("presets: ['']", r".presets[0]", " must be a preset file path or document"),
    ("presets: [3]", r".presets[0]", " must be a mapping, got an integer$"),
    (
        "presets: [{id: a, plugins: [{name: 'x y'}]}]",
        r".presets[0].plugins[0].name",
        ' "x y" must be an import path',
    ),
    ("- a", "", " must be a mapping, got a list$"),
    ("colour: red", "", r" has unknown keys \['colour'\]"),
]


@pytest.mark.parametrize(("document", "key", "problem"), BAD_CONFIGS)
async def test_a_malformed_config_fails_the_open_naming_the_file_and_key(
    tmp_path: Path, document: str, key: str, problem: str
) -> None:
    config = write(tmp_path, document, "runtime.yml")
    with pytest.raises(dsh.PresetError, match="^" + at(config, key) + problem):
        async with dsh.open_runtime(config=config):
            pytest.fail("a malformed config never opens")  # pragma: no cover


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "No such file"),
        ("<dir>", "is a directory, not a regular file"),
        (b"agents: [\xff]\n", "not UTF-8 text"),
        ("agents: [\n", "not valid YAML"),
        ("agents: []\nagents: [{id: a}]\n", "found the key 'agents' twice"),
    ],
)
async def test_an_unreadable_config_fails_the_open_naming_the_file(
    tmp_path: Path, content: str | bytes | None, reason: str
) -> None:
    config = tmp_path / "runtime.yml"
    if content == "<dir>":
        config.mkdir()
    elif content is not None:
        write(tmp_path, content, "runtime.yml")
    with pytest.raises(
        dsh.PresetError,
        match=f"(?s)cannot read runtime config '{at(config)}': .*{reason}",
    ):
        async with dsh.open_runtime(config=config):
            pytest.fail("an unreadable config never opens")  # pragma: no cover
    with pytest.raises(dsh.PresetError, match=reason):
        load_runtime_config(config)


async def test_a_declared_agent_with_an_unknown_preset_fails_alone(
    held: Held, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    config = write(
        tmp_path,
        f"presets: [{{id: p, plugins: [{{name: '{MODULE}:fine'}}]}}]\n"
        "agents: [{id: lost, preset: typo, options: {provider: scripted, model: m}},"
        " {id: found, preset: p, options: {provider: scripted, model: m}}]\n",
        "runtime.yml",
    )
    models = {"scripted": ScriptedModel(default=reply("ok"))}
    async with dsh.open_runtime(models=models, config=config) as rt:
        with trio.fail_after(
            60
        ):  # virtual time: a waiter that would hang fails instead
            with pytest.raises(dsh.AgentStartError) as failed:
                await rt.agents.wait_for("lost")
            found = await rt.agents.wait_for("found")
        assert isinstance(failed.value.error, dsh.PresetNotFoundError)
        assert 'no preset "typo"' in str(failed.value.error)
        assert rt.presets.composed_preset(found.agent) == "p"


@pytest.mark.parametrize("session_id", ["", None, 3])
async def test_wait_for_an_id_no_agent_can_have_is_refused(
    session_id: Any, autojump_clock: trio.testing.MockClock
) -> None:
    async with dsh.open_runtime() as rt:
        with (
            trio.fail_after(60),  # virtual time: a wait that would never end fails
            pytest.raises(
                dsh.InvalidSessionIdError, match=r"wait_for\(\) expects a session id"
            ),
        ):
            await rt.agents.wait_for(session_id)
