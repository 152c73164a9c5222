"""Schemas from signatures, decoration errors, and argument validation."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

import attrs
import pytest

from dsh_trio.errors import DshError, ToolArgumentsError, ToolDefinitionError
from dsh_trio.tools import Tool, ToolContext, tool
from dsh_trio.tools._arguments import parse_arguments


@attrs.frozen
class Point:
    x: int
    y: int = 0


@attrs.frozen
class Shape:
    name: Annotated[str, "what to call it"]
    corners: list[Point]
    label: str | None = None


@attrs.frozen
class Positive:
    n: int = attrs.field(validator=attrs.validators.gt(0))


@attrs.frozen
class Node:
    children: list[Node]


def params_of(t: Tool) -> dict[str, Any]:
    return t.parameters


def prop(t: Tool, name: str) -> Any:
    return params_of(t)["properties"][name]


def convert(t: Tool, raw: str) -> dict[str, object]:
    return t._arguments.convert(parse_arguments(raw, t.name), t.name)


def invalid(t: Tool, raw: str) -> str:
    with pytest.raises(ToolArgumentsError) as info:
        convert(t, raw)
    assert info.value.tool == t.name
    return str(info.value)


# --------------------------------------------------------------------------- schemas


def test_full_schema_shape_from_the_signature() -> None:
    @tool(parallel_safe=True)
    async def read_file(ctx: ToolContext, path: str, limit: int = 100) -> str:
        """Read a text file.

        Lines beyond ``limit`` are dropped.
        """
        return path

    assert isinstance(read_file, Tool)
    assert read_file.name == "read_file"
    assert read_file.parallel_safe is True
    assert read_file.schema == {
        "name": "read_file",
        "description": "Read a text file.\n\nLines beyond ``limit`` are dropped.",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "limit": {"type": "integer", "default": 100},
            },
            "required": ["path"],
            "additionalProperties": False,
        },
    }


def test_bare_decorator_name_and_description_overrides() -> None:
    @tool
    async def plain(ctx: ToolContext) -> str:
        """Doc."""
        return ""

    @tool(name="renamed", description="Given text.")
    async def other(ctx: ToolContext) -> str:
        """Ignored docstring."""
        return ""

    @tool
    async def undocumented(ctx: ToolContext) -> str:
        return ""

    assert (plain.name, plain.description, plain.parallel_safe) == (
        "plain",
        "Doc.",
        False,
    )
    assert (other.name, other.description) == ("renamed", "Given text.")
    assert undocumented.description == ""
    assert params_of(plain) == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (str, {"type": "string"}),
        (int, {"type": "integer"}),
        (float, {"type": "number"}),
        (bool, {"type": "boolean"}),
        (None, {"type": "null"}),
        (list[int], {"type": "array", "items": {"type": "integer"}}),
        (list, {"type": "array"}),
        (tuple[str, ...], {"type": "array", "items": {"type": "string"}}),
        (
            dict[str, float],
            {"type": "object", "additionalProperties": {"type": "number"}},
        ),
        (dict, {"type": "object"}),
        (Literal["r", "w"], {"type": "string", "enum": ["r", "w"]}),
        (Literal[1, "x", None], {"enum": [1, "x", None]}),  # noqa: PYI061 - a None member is what is tested
        (Optional[int], {"anyOf": [{"type": "integer"}, {"type": "null"}]}),  # noqa: UP045 - the typing form is what is tested
        (int | None, {"anyOf": [{"type": "integer"}, {"type": "null"}]}),
        (
            str | list[str],
            {
                "anyOf": [
                    {"type": "string"},
                    {"type": "array", "items": {"type": "string"}},
                ]
            },
        ),
        (Annotated[str, "the path"], {"type": "string", "description": "the path"}),
        (
            Point,
            {
                "type": "object",
                "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                "required": ["x"],
                "additionalProperties": False,
            },
        ),
    ],
)
def test_each_supported_annotation(annotation: Any, expected: dict[str, Any]) -> None:
    async def body(ctx: ToolContext, a: Any) -> str:
        return ""

    body.__annotations__ = {"ctx": ToolContext, "a": annotation, "return": str}
    t = tool(body)
    assert prop(t, "a") == expected
    assert params_of(t)["required"] == ["a"]


def test_nested_attrs_classes_and_descriptions() -> None:
    @tool
    async def draw(
        ctx: ToolContext, shape: Shape, scale: Annotated[float, "zoom"] = 1.0
    ) -> str:
        """Draw."""
        return ""

    assert prop(draw, "scale") == {
        "type": "number",
        "description": "zoom",
        "default": 1.0,
    }
    assert params_of(draw)["required"] == ["shape"]
    point = {
        "type": "object",
        "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
        "required": ["x"],
        "additionalProperties": False,
    }
    assert prop(draw, "shape") == {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "what to call it"},
            "corners": {"type": "array", "items": point},
            "label": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        },
        "required": ["name", "corners"],
        "additionalProperties": False,
    }


def test_non_json_default_is_left_out_of_the_schema() -> None:
    marker = object()

    @tool
    async def f(
        ctx: ToolContext,
        a: int | None = None,
        b: list[int] | None = marker,  # type: ignore[assignment]
    ) -> str:
        return ""

    assert prop(f, "a")["default"] is None
    assert "default" not in prop(f, "b")
    assert params_of(f)["required"] == []


def test_a_body_without_a_context_parameter() -> None:
    @tool
    async def add(a: int, b: int) -> str:
        """Add."""
        return str(a + b)

    assert add._takes_context is False
    assert params_of(add)["required"] == ["a", "b"]


def test_keyword_only_parameters_are_properties() -> None:
    @tool
    async def f(ctx: ToolContext, *, a: str, b: int = 2) -> str:
        return ""

    assert params_of(f)["required"] == ["a"]


async def test_the_tool_object_calls_its_body_directly() -> None:
    @tool
    async def echo(ctx: ToolContext, text: str) -> str:
        return text * 2

    assert await echo(None, text="ab") == "abab"


# --------------------------------------------------------------------------- decoration errors


@pytest.mark.parametrize(
    ("annotation", "fragment"),
    [
        (set[int], "unsupported annotation"),
        (Any, "unsupported annotation"),
        (object, "unsupported annotation"),
        (bytes, "unsupported annotation"),
        (dict[int, str], "dict keys must be str"),
        (tuple[int, str], "variable-length tuples"),
        (Literal[1.5], "Literal values"),
        (list[set[int]], "unsupported annotation"),
        (Node, "recursive attrs class Node"),
    ],
)
def test_unsupported_annotations_fail_at_decoration(
    annotation: Any, fragment: str
) -> None:
    async def body(ctx: ToolContext, a: Any) -> str:
        return ""

    body.__annotations__ = {"ctx": ToolContext, "a": annotation, "return": str}
    with pytest.raises(ToolDefinitionError, match=fragment) as info:
        tool(body)
    assert "parameter 'a'" in str(info.value)
    assert isinstance(info.value, DshError)
    assert isinstance(info.value, TypeError)


def test_signature_errors() -> None:
    async def star(ctx: ToolContext, *args: int) -> str:
        return ""

    async def kwargs(ctx: ToolContext, **kw: int) -> str:
        return ""

    async def unannotated(ctx: ToolContext, a) -> str:  # type: ignore[no-untyped-def]
        return ""

    async def positional(ctx: ToolContext, a: int, /) -> str:
        return ""

    async def late_context(a: int, ctx: ToolContext) -> str:
        return ""

    def sync(ctx: ToolContext) -> str:
        return ""

    async def unresolvable(ctx: ToolContext, a: NoSuchType) -> str:  # type: ignore[name-defined]  # noqa: F821
        return ""

    cases: list[tuple[Any, str]] = [
        (star, r"\*args"),
        (kwargs, r"\*\*kwargs"),
        (unannotated, "needs a type annotation"),
        (positional, "positional-only"),
        (late_context, "ToolContext parameter must come first"),
        (sync, "must be an async def"),
        (unresolvable, "cannot resolve"),
    ]
    for fn, pattern in cases:
        with pytest.raises(ToolDefinitionError, match=pattern):
            tool(fn)


@pytest.mark.parametrize("name", ["", "has space", "x" * 65, "dot.ted"])
def test_bad_names(name: str) -> None:
    async def f(ctx: ToolContext) -> str:
        return ""

    with pytest.raises(ToolDefinitionError, match="name"):
        tool(name=name)(f)


def test_bad_options() -> None:
    async def f(ctx: ToolContext) -> str:
        return ""

    with pytest.raises(ToolDefinitionError, match="parallel_safe"):
        tool(parallel_safe=1)(f)  # type: ignore[call-overload]
    with pytest.raises(ToolDefinitionError, match="description"):
        tool(description=3)(f)  # type: ignore[call-overload]


# --------------------------------------------------------------------------- validation


@tool
async def sample(
    ctx: ToolContext,
    s: str,
    i: int = 0,
    f: float = 0.0,
    b: bool = False,
    mode: Literal["r", "w", 1] = "r",
    opt: int | None = None,
    items: list[int] | None = None,
    table: dict[str, bool] | None = None,
    point: Point | None = None,
    shape: Shape | None = None,
    pos: Positive | None = None,
    pair: tuple[str, ...] = (),
) -> str:
    return ""


def test_valid_arguments_are_converted() -> None:
    got = convert(
        sample,
        '{"s": "x", "i": 3.0, "f": 2, "b": true, "mode": 1, "opt": null, "items": [1, 2],'
        ' "table": {"k": false}, "point": {"x": 1}, "pair": ["a", "b"],'
        ' "shape": {"name": "sq", "corners": [{"x": 1, "y": 2}]}}',
    )
    assert got == {
        "s": "x",
        "i": 3,
        "f": 2.0,
        "b": True,
        "mode": 1,
        "opt": None,
        "items": [1, 2],
        "table": {"k": False},
        "point": Point(1, 0),
        "pair": ("a", "b"),
        "shape": Shape("sq", [Point(1, 2)]),
    }
    assert type(got["i"]) is int
    assert type(got["f"]) is float
    assert convert(sample, '{"s": ""}') == {"s": ""}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ('{"i": 1}', "missing required argument 's'"),
        ('{"s": "x", "zzz": 1}', "unexpected argument 'zzz'"),
        ('{"s": 1}', "argument 's': expected string, got integer 1"),
        ('{"s": "x", "i": true}', "argument 'i': expected integer, got boolean true"),
        ('{"s": "x", "i": "3"}', "argument 'i': expected integer, got string \"3\""),
        ('{"s": "x", "i": 1.5}', "argument 'i': expected integer, got number 1.5"),
        ('{"s": "x", "f": false}', "argument 'f': expected number, got boolean false"),
        ('{"s": "x", "b": 1}', "argument 'b': expected boolean, got integer 1"),
        (
            '{"s": "x", "mode": "x"}',
            'argument \'mode\': expected one of "r", "w", 1, got "x"',
        ),
        ('{"s": "x", "mode": true}', "argument 'mode': expected one of"),
        (
            '{"s": "x", "opt": "1"}',
            "argument 'opt': expected integer or null, got string",
        ),
        (
            '{"s": "x", "items": [1, "2"]}',
            "argument 'items[1]': expected integer, got string",
        ),
        (
            '{"s": "x", "table": {"k": 0}}',
            "argument 'table.k': expected boolean, got integer 0",
        ),
        ('{"s": "x", "point": {}}', "argument 'point': missing required property 'x'"),
        (
            '{"s": "x", "point": {"x": 1, "z": 2}}',
            "argument 'point': unexpected property 'z'",
        ),
        (
            '{"s": "x", "point": [1]}',
            "argument 'point': expected object (Point) or null, got array",
        ),
        (
            '{"s": "x", "shape": {"name": "a", "corners": [{"x": "1"}]}}',
            "argument 'shape.corners[0].x': expected integer",
        ),
        ('{"s": "x", "pos": {"n": 0}}', "argument 'pos': is not a valid Positive"),
        ('{"s": "x", "pair": "ab"}', "argument 'pair': expected array, got string"),
        ("[1]", "arguments must be a JSON object, got array"),
        ('"s"', "arguments must be a JSON object, got string"),
        ("{", "arguments are not valid JSON"),
        ('{"s": NaN}', "arguments are not valid JSON"),
    ],
)
def test_invalid_arguments_name_the_argument_and_the_reason(
    raw: str, message: str
) -> None:
    assert message in invalid(sample, raw)


def test_empty_arguments_are_an_empty_object() -> None:
    @tool
    async def nothing(ctx: ToolContext, a: int = 1) -> str:
        return ""

    assert convert(nothing, "") == {}
    assert convert(nothing, "  ") == {}
    assert "missing required argument 's'" in invalid(sample, "")
