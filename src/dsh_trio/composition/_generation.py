"""One activation of a preset definition: its registrations, users and teardown."""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ..errors import PresetError
from ..tools import ToolRegistry
from ._definition import PluginRow, PresetDefinition
from ._scope import PresetScope

if TYPE_CHECKING:
    from ..events import EventBus
    from ..loop import Agent

__all__ = ["Generation", "PresetGeneration"]

logger = logging.getLogger("dsh_trio")

#: How long (runtime clock seconds) teardown waits for one service's ``aclose()``;
#: a service that takes longer is abandoned, so closing a runtime always finishes.
SERVICE_CLOSE_GRACE = 10.0


def _flatten(rows: tuple[PluginRow, ...]) -> list[PluginRow]:
    """The enabled leaf rows, in order (groups expanded, disabled rows and groups skipped)."""
    out: list[PluginRow] = []
    for row in rows:
        if row.disabled:
            continue
        config = row.config
        if row.group:
            out += _flatten(config if isinstance(config, tuple) else ())
        else:
            out.append(row)
    return out


def _setup_function(row: PluginRow) -> Callable[..., Any]:
    module_name, _, attr = row.name.partition(":")
    module = importlib.import_module(module_name.strip())
    fn = getattr(module, attr.strip() or "setup")
    if not callable(fn):
        raise TypeError(f"{row.name} is not callable")
    return fn  # type: ignore[no-any-return]


@attrs.define(eq=False)
class Generation:
    """A preset generation: what its rows registered, and who uses it. Runtime use only."""

    definition: PresetDefinition
    number: int
    bus: EventBus
    tools: ToolRegistry
    sections: list[tuple[str, str | Callable[[Agent], str]]] = attrs.field(factory=list)
    contexts: list[tuple[str, Callable[[Agent], str | None]]] = attrs.field(
        factory=list
    )
    services: dict[str, object] = attrs.field(factory=dict)
    defaults: dict[str, Any] = attrs.field(factory=dict)
    cleanups: list[Callable[[], object]] = attrs.field(factory=list)
    broken: str | None = None
    users: int = 0
    retired: bool = False
    torn_down: bool = False

    @property
    def preset_id(self) -> str:
        return self.definition.id

    async def activate(self) -> None:
        """Run every enabled row's setup once; a failure marks the generation broken.

        The first failing row stops activation; what the rows registered so far is
        unwound, and ``broken`` names the row and the error.
        """
        scope = PresetScope(self)
        for row in _flatten(self.definition.plugins):
            try:
                fn = _setup_function(row)
                config: Mapping[str, Any] = (
                    row.config if not isinstance(row.config, tuple) else {}
                )
                result = fn(scope, config)
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:
                self.broken = f'row "{row.label}" ({row.name}) failed: {type(exc).__name__}: {exc}'
                logger.warning('preset "%s" is broken: %s', self.preset_id, self.broken)
                await self.teardown()  # kept as a diagnostic only: never bound
                return
        await trio.lowlevel.checkpoint()

    async def teardown(self) -> list[Exception]:
        """Unwind every registration, then ``aclose()`` the provided services; their errors.

        Idempotent. Shielded: a torn-down generation is never half torn down; each
        ``aclose()`` gets at most :data:`SERVICE_CLOSE_GRACE` seconds, after which it
        is abandoned and reported as a :class:`~dsh_trio.errors.PresetError`.
        """
        errors: list[Exception] = []
        if self.torn_down:
            await trio.lowlevel.checkpoint()
            return errors
        self.torn_down = True
        while self.cleanups:
            try:
                self.cleanups.pop()()
            except Exception as exc:
                errors.append(exc)
        self.sections.clear()
        self.contexts.clear()
        services = list(self.services.items())
        self.services.clear()
        with trio.CancelScope(shield=True):
            for name, service in reversed(services):
                aclose = getattr(service, "aclose", None)
                if aclose is None:
                    continue
                try:
                    with trio.move_on_after(SERVICE_CLOSE_GRACE) as grace:
                        await aclose()
                except Exception as exc:
                    errors.append(exc)
                    continue
                if grace.cancelled_caught:
                    errors.append(
                        PresetError(
                            f'preset "{self.preset_id}" generation {self.number}: '
                            f'service "{name}" did not close within '
                            f"{SERVICE_CLOSE_GRACE:g} s and was abandoned"
                        )
                    )
            await trio.lowlevel.checkpoint()
        return errors


class PresetGeneration:
    """A read-only view of one preset generation (what ``acquire_scope`` leases).

    Example::

        async with runtime.presets.acquire_scope("coder") as generation:
            print(generation.preset_id, generation.tool_names())
    """

    __slots__ = ("_generation",)

    def __init__(self, generation: Generation) -> None:
        self._generation = generation

    @property
    def preset_id(self) -> str:
        """The preset id."""
        return self._generation.preset_id

    @property
    def number(self) -> int:
        """The generation number (1 for the first registration of the runtime)."""
        return self._generation.number

    def tool_names(self) -> tuple[str, ...]:
        """Names of the tools this generation offers (the runtime's included), sorted."""
        return self._generation.tools.names()

    def sections(self) -> tuple[tuple[str, str | Callable[[Agent], str]], ...]:
        """The system-prompt sections the generation adds, in registration order."""
        return tuple(self._generation.sections)

    def service(self, name: str) -> object | None:
        """The service the generation provides under ``name``, or ``None``."""
        return self._generation.services.get(name)
