"""A hypothesis state machine that drives live agents and checks their invariants.

:class:`AgentStateMachine` hosts one trio run per example in guest mode (see
:class:`~dsh_trio.testing.GuestLoop`): each rule is one settled step, time is
virtual, and an operation that stays blocked is reported as a deadlock. Its rules
send input, edit the inbox, cancel, run maintenance, answer the scripted model, move
time, wait for idleness and dispose (after which a fresh agent takes over, and the
disposed one stays under watch). After every step it checks:

* every message ever inserted into the inbox is in exactly one state: pending,
  claimed by exactly one claim splice (then written as at most one ``user/message``,
  or dropped by a turn that was aborted, failed or blocked), or discarded;
* the live inbox equals the fold of the durable ``agent/inbox/spliced`` events, and
  the live inserted/claimed/discarded notifications match that fold;
* ``agent/status`` events alternate and match ``agent.status``; the agent runs
  exactly while a turn is open;
* turn numbers strictly increase; every turn and step is opened and closed once;
* an aborted turn records the first cause issued during it, and a cancelled
  maintenance task raises ``AgentCancelled`` with that cause;
* waking input after an abort goes to next-turn and is latched (never under
  ``DisposedCancel``); ``keep_inbox`` parks;
* ``when_idle()`` completes once the model is released;
* after dispose nothing more is appended and ``agent/disposed`` was emitted once;
* an idle agent holds no task, and no task outlives the runtime;
* claims happen only at boundaries and are predicted exactly: at a turn start all
  of next-step then one next-turn message, at a step boundary all of next-step;
* every model request carries exactly the fold of the log when it was made;
* once a cancel is issued to a turn, no step, ``user/message`` or request starts in it;
* a failure the retry policy retries ends a turn only after ``max_retries`` retries;
* a parked ``when_idle()`` waiter returns only when no driver or maintenance task
  remains, and returns once the agent is idle;
* a listener scoped to an agent hears only it and its descendants; a raising
  listener never stops the others;
* the ownership tree (child agents, also nested): ``roots()``/``is_owned_by`` match,
  children's ``agent/disposed`` precede their owner's, and no descendant appends
  once its owner started draining; concurrent ``dispose()`` callers dispose once.

Subclass it to add your own hooks, tools or listeners (:meth:`setup_agent`,
:meth:`runtime_options`) and your own rules and invariants; the checks above keep
running.

The parts: ``_profiles`` (hypothesis profiles), ``_harness`` (the model desk and the
runtime host), ``_checker`` (the log fold), ``_subject`` (each agent under test and
its recorders), ``_inbox_oracles`` and ``_activity_oracles`` (what each operation
must do), ``_invariants`` (one function per invariant) and ``_rules`` (the machine).
"""

from ._checker import LogChecker as LogChecker
from ._harness import ModelDesk as ModelDesk, RuntimeHost as RuntimeHost
from ._profiles import (
    machine_settings as machine_settings,
    profile_name as profile_name,
    register_profiles as register_profiles,
)
from ._report import (
    InvariantViolation as InvariantViolation,
    MaintenanceFailure as MaintenanceFailure,
)
from ._rules import AgentStateMachine as AgentStateMachine
from ._subject import Subject as Subject

__all__ = [
    "AgentStateMachine",
    "InvariantViolation",
    "LogChecker",
    "MaintenanceFailure",
    "ModelDesk",
    "RuntimeHost",
    "Subject",
    "machine_settings",
    "profile_name",
    "register_profiles",
]
