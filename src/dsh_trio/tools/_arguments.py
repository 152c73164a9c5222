"""A tool's argument list: decoding a call's raw arguments and checking them.

Arguments from a model are outside data: :func:`parse_arguments` decodes the raw JSON
text of a call and :meth:`ArgumentsSpec.convert` checks it against the compiled
parameter list before a tool body sees it; a mismatch names the argument and says why.
"""

from __future__ import annotations

import json

import attrs

from ..errors import ToolArgumentsError
from ..values import JsonValue
from ._specs import Field, Invalid, convert_fields, json_kind, object_schema

__all__ = ["ArgumentsSpec", "parse_arguments"]


@attrs.frozen
class ArgumentsSpec:
    """The compiled parameter list of a tool: its schema and its argument checker."""

    fields: tuple[Field, ...]

    def schema(self) -> dict[str, JsonValue]:
        """``{"type": "object", "properties": ..., "required": ..., "additionalProperties": false}``."""
        return object_schema(self.fields, with_defaults=True)

    def convert(self, arguments: object, tool: str) -> dict[str, object]:
        """Check decoded ``arguments``; return the keyword arguments for the body.

        Raises:
            ToolArgumentsError: naming the argument and what is wrong with it.
        """
        if not isinstance(arguments, dict):
            raise ToolArgumentsError(
                f"arguments must be a JSON object, got {json_kind(arguments)}",
                tool=tool,
            )
        try:
            return convert_fields(self.fields, arguments, "", "argument")
        except Invalid as exc:
            if exc.path:
                raise ToolArgumentsError(
                    f"argument {exc.path!r}: {exc.why}", tool=tool
                ) from None
            raise ToolArgumentsError(exc.why, tool=tool) from None


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


def parse_arguments(raw: str, tool: str) -> object:
    """Decode the raw ``arguments`` text of a call (``''`` → ``{}``).

    Raises:
        ToolArgumentsError: the text is not JSON.
    """
    if not raw.strip():
        return {}
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except ValueError as exc:
        raise ToolArgumentsError(
            f"arguments are not valid JSON: {exc}", tool=tool
        ) from None
