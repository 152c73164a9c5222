"""The oracle of ``presets.select``: locked after the first turn, else durable and announced once."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from ...composition import PresetDefinition
from ...errors import PresetLockedError
from ...events import PresetSelected
from .._guest import GuestLoop
from ._report import InvariantViolation
from ._subject import Subject

if TYPE_CHECKING:
    from ...nursery import Runtime

__all__ = ["MACHINE_PRESETS", "SELECTED", "check_preset_binding", "select_preset"]

#: The presets the machine's runtime registers (no rows: binding is what is checked).
MACHINE_PRESETS = (
    PresetDefinition(id="alpha", plugins=()),
    PresetDefinition(id="beta", plugins=()),
)
SELECTED = "agent-preset/selected"


def _turn_started(subject: Subject, end: int) -> bool:
    return any(e.type == "turn/start" for e in subject.events[:end])


def select_preset(
    loop: GuestLoop, runtime: Runtime, subject: Subject, preset: str
) -> None:
    """``await runtime.presets.select(agent, preset)``, checked.

    Once the agent has started a turn, it raises ``PresetLockedError``, appends
    nothing and announces nothing. Before, it appends exactly one
    ``agent-preset/selected {agentPreset}`` with no ``turn/start`` before it, emits
    the live event once and rebinds the agent.
    """
    agent = subject.agent
    before = len(subject.events)
    locked_before = _turn_started(subject, before)
    heard: list[PresetSelected] = []

    disposers: list[Callable[[], None]] = []
    loop.run_sync(lambda: disposers.append(runtime.events.on(SELECTED, heard.append)))

    async def select() -> BaseException | None:
        try:
            await runtime.presets.select(agent, preset)
        except PresetLockedError as exc:
            await trio.lowlevel.checkpoint()
            return exc
        return None

    try:
        refused = loop.call(select)
    finally:
        for dispose in disposers:
            loop.run_sync(dispose)
    appended = [e for e in subject.events[before:] if e.type == SELECTED]
    if refused is not None:
        if not _turn_started(subject, len(subject.events)):
            raise InvariantViolation(
                f"select({preset!r}) on {agent.id} raised PresetLockedError, "
                "but no turn has started"
            )
        if appended or heard:
            raise InvariantViolation(
                f"a refused select({preset!r}) on {agent.id} still appended "
                f"{len(appended)} and announced {len(heard)} agent-preset/selected"
            )
        return
    if locked_before:
        raise InvariantViolation(
            f"select({preset!r}) on {agent.id} succeeded after a turn had started"
        )
    if [e.data for e in appended] != [{"agentPreset": preset}]:
        raise InvariantViolation(
            f"select({preset!r}) on {agent.id} appended {[e.data for e in appended]}, "
            f'not exactly one {{"agentPreset": {preset!r}}}'
        )
    if _turn_started(subject, appended[0].seq):
        raise InvariantViolation(
            f"select({preset!r}) on {agent.id} appended its event after a turn started"
        )
    if [(e.session_id, e.preset) for e in heard] != [(str(agent.id), preset)]:
        raise InvariantViolation(
            f"select({preset!r}) on {agent.id} announced {heard!r}, not exactly once"
        )


def check_preset_binding(runtime: Runtime, subject: Subject) -> None:
    """A live agent is bound to the preset its log names last (the last
    ``agent-preset/selected``, else its header's ``agentPreset``)."""
    if subject.disposed:
        return
    agent = subject.agent
    want = agent.session.header.agent_preset
    for event in reversed(subject.events):
        if event.type == SELECTED and isinstance(event.data, dict):
            value = event.data.get("agentPreset")
            want = value if isinstance(value, str) else want
            break
    got = runtime.presets.composed_preset(agent)
    if got != want:
        raise InvariantViolation(
            f"{agent.id} is bound to preset {got!r}, but its log names {want!r}"
        )
