"""Testing support: a scripted model adapter and its script helpers.

Also a guest-mode trio driver (:class:`GuestLoop`) and, when hypothesis is
installed, strategies for agent inputs and the :class:`AgentStateMachine` base
class (imported on first use, so the scripted model needs no hypothesis).
"""

from typing import TYPE_CHECKING, Any

from .._metadata import fixup_module_metadata as _fixup_module_metadata
from ._guest import (
    Deadlock as Deadlock,
    GuestLoop as GuestLoop,
    advance_by as advance_by,
    advance_to_next_deadline as advance_to_next_deadline,
    settle as settle,
)
from ._script import (
    Gate as Gate,
    Script as Script,
    chunks as chunks,
    custom as custom,
    fail as fail,
    gate as gate,
    hang as hang,
    max_tokens as max_tokens,
    reply as reply,
    tool_calls as tool_calls,
)
from ._scripted import ScriptedModel as ScriptedModel

if TYPE_CHECKING:
    from ._strategies import (
        Advance as Advance,
        Answer as Answer,
        Cancel as Cancel,
        Dispose as Dispose,
        InboxEdit as InboxEdit,
        Maintenance as Maintenance,
        Operation as Operation,
        ReleaseGate as ReleaseGate,
        ReleaseMaintenance as ReleaseMaintenance,
        SelectPreset as SelectPreset,
        Send as Send,
        WaitIdle as WaitIdle,
        answers as answers,
        cancel_causes as cancel_causes,
        cancels as cancels,
        inbox_edits as inbox_edits,
        inbox_targets as inbox_targets,
        maintenances as maintenances,
        message_ids as message_ids,
        operation_sequences as operation_sequences,
        operations as operations,
        sends as sends,
        user_messages as user_messages,
    )
    from .machine import (
        AgentStateMachine as AgentStateMachine,
        InvariantViolation as InvariantViolation,
        MaintenanceFailure as MaintenanceFailure,
        machine_settings as machine_settings,
        register_profiles as register_profiles,
    )

__all__ = [
    "ScriptedModel",
    "Script",
    "Gate",
    "reply",
    "tool_calls",
    "max_tokens",
    "fail",
    "hang",
    "gate",
    "chunks",
    "custom",
    # guest-mode driver
    "GuestLoop",
    "Deadlock",
    "settle",
    "advance_by",
    "advance_to_next_deadline",
    # state machine (needs hypothesis)
    "AgentStateMachine",
    "InvariantViolation",
    "MaintenanceFailure",
    "machine_settings",
    "register_profiles",
    # strategies and operations (need hypothesis)
    "user_messages",
    "message_ids",
    "cancel_causes",
    "inbox_targets",
    "sends",
    "inbox_edits",
    "cancels",
    "maintenances",
    "answers",
    "operations",
    "operation_sequences",
    "Operation",
    "Send",
    "InboxEdit",
    "Cancel",
    "Maintenance",
    "ReleaseMaintenance",
    "Answer",
    "ReleaseGate",
    "Advance",
    "WaitIdle",
    "Dispose",
    "SelectPreset",
]

_MACHINE_NAMES = frozenset(
    {
        "AgentStateMachine",
        "InvariantViolation",
        "MaintenanceFailure",
        "machine_settings",
        "register_profiles",
    }
)


def __getattr__(name: str) -> Any:
    # The hypothesis-based helpers load on first use.
    if name in _MACHINE_NAMES:
        from . import machine

        return getattr(machine, name)
    if name in __all__:
        from . import _strategies

        return getattr(_strategies, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# The machine and the strategies (lazy, they need hypothesis) keep their defining module:
# hypothesis derives a derandomized machine's seed from its source, found through it.
_fixup_module_metadata(__name__)
