"""What ``list()`` and ``composition_inventory()`` report, and argument checks."""

from __future__ import annotations

import attrs

from ..loop import Agent
from ._definition import PluginRow

__all__ = ["PresetInfo", "PresetInventory", "check_agent", "check_id", "sort_key"]


@attrs.frozen(kw_only=True)
class PresetInfo:
    """One registered preset as ``list()`` / ``resolve()`` report it.

    ``broken`` is the activation error (naming the row) of a broken preset, else ``None``.
    """

    id: str
    name: str | None = None
    description: str | None = None
    order: float | None = None
    broken: str | None = None
    is_default: bool = False


@attrs.frozen(kw_only=True)
class PresetInventory:
    """One registered preset with its rows (``composition_inventory()``)."""

    id: str
    name: str | None
    description: str | None
    is_default: bool
    broken: str | None
    rows: tuple[PluginRow, ...]


def sort_key(info: PresetInfo) -> tuple[bool, float, str]:
    return (info.order is None, info.order or 0.0, info.id)


def check_agent(agent: object, method: str, role: str = "agent") -> None:
    if not isinstance(agent, Agent):
        raise TypeError(
            f"presets.{method}() expects an Agent as {role}, got {agent!r:.60}"
        )


def check_id(id: object, method: str) -> None:
    if id is not None and not isinstance(id, str):
        raise TypeError(
            f"presets.{method}() expects a preset id (str or None), got {id!r:.60}"
        )
